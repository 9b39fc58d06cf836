"""Text to kokoro's utterances, in each of the nine languages Kokoro-82M speaks, with the G2P
kokoro 0.9.4's ``KPipeline`` uses for it (``languages``), offline.

``utterances(text, Reading(lang))`` reads the text a piece at a time (``reading``: a string,
kokoro's list of segments, or a file), rewrites chat text as it is said (``normalize``: Markdown,
URLs, e-mails, phone numbers; English dates, times, units; on by default, ``normalize=False``
reads the text as written), leaves out what the language cannot read (``scripts``: another
script, emoji; a warning names the language to pick), then runs the language's G2P:
English through misaki's tokens and kokoro's grouping (``en``), the others through kokoro's
sentence chunks (``sentences``, G2Ps in ``loaders``). Each G2P is imported on first use of its
language; a missing one is a ``G2PUnavailable`` that names the pip extra to install.

G2P calls are serialized: espeak-ng (the English fallback and five languages' G2P) keeps global
state in its C library, and the server calls in from several threads. The G2Ps' packages'
deprecation warnings are not shown (``quiet``): their users cannot act on them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

from ..chunking import InputError, Utterance
from ..languages import Language, resolve
from . import quiet, reading, scripts
from .en import (
    COMPONENTS,
    INSTALL_HINT,
    SPACY_MODEL,
    SPACY_MODEL_PYPI,
    assemble,
    load_g2p,
    spacy_pipeline,
)
from .errors import DroppedTextWarning, G2PUnavailable
from .normalize import NormalizationOptions, normalize_text
from .reading import SPLIT_PATTERN, Reading, Seen, TextInput, check_text

__all__ = [
    "COMPONENTS",
    "INSTALL_HINT",
    "SPACY_MODEL",
    "SPACY_MODEL_PYPI",
    "SPLIT_PATTERN",
    "DroppedTextWarning",
    "G2PUnavailable",
    "NormalizationOptions",
    "Reading",
    "assemble",
    "load",
    "load_g2p",
    "normalize_text",
    "phonemize",
    "spacy_pipeline",
    "text_utterances",
    "utterances",
]

_LOCK = threading.RLock()


def load(lang: str | Language) -> Any:
    """The G2P for ``lang``, loaded once: misaki's ``en.G2P`` for English (``g2p(text)`` gives
    phonemes and tokens), else a ``text -> phonemes`` function."""
    lang = resolve(lang)
    with _LOCK:
        quiet.hush_third_party()
        if lang.g2p == "en":
            return load_g2p(lang.british)
        from . import loaders

        return loaders.load(lang)


def utterances(text: TextInput, how: Reading, g2p: Any = None) -> Iterator[Utterance]:
    """kokoro's utterances for ``text`` read as ``how`` says, one at a time: the text is read,
    normalized and phonemized a segment (and within a long one, a few sentences) at a time
    (``reading``), so the first utterance is out after the first piece whatever the input's
    length. ``g2p``: a loaded G2P to use instead of ``load``'s.

    The text's type and the G2P are checked here (an unknown type is an ``InputError``, a
    missing G2P a ``G2PUnavailable``); the iterator raises ``InputError`` at its end when
    nothing of the text was left to say."""
    check_text(text)
    lang = how.lang
    g2p = load(lang) if g2p is None else g2p
    seen = Seen()
    segments = reading.segments(text, how, seen)
    call = functools.partial(_locked, g2p)
    if lang.g2p == "en":
        from . import en

        utts = en.utterances(segments, call, how.first, seen)
    else:
        from . import sentences

        utts = sentences.utterances(segments, lang, call, how.first, how.limit, seen)
    return _said(utts, seen, lang)


def _locked(g2p: Any, text: str) -> Any:
    with _LOCK:
        quiet.hush_third_party()
        return g2p(text)


def _said(utts: Iterator[Utterance], seen: Seen, lang: Language) -> Iterator[Utterance]:
    said = False
    for u in utts:
        said = said or bool(u.phonemes.strip())
        yield u
    if not said:
        raise InputError(_nothing_to_say(seen, lang))


def text_utterances(
    text: TextInput, lang: str | Language | None = None, g2p: Any = None, **how: Any
) -> list[Utterance]:
    """Every utterance of ``text`` in ``lang`` (a ``lang_code`` letter or kokoro-onnx ``lang``;
    None: American English) at once; ``how``: ``Reading``'s other fields (``first``,
    ``normalize``, ``split_pattern``, ``limit``). ``normalize``: True rewrites chat text as it
    is said (``NormalizationOptions()``), False reads it as written, or the options to use."""
    return list(utterances(text, Reading(resolve(lang or "a"), **how), g2p))


def phonemize(text: str, lang: str | Language | None = None, **kw: Any) -> list[tuple[str, str]]:
    """(graphemes, phonemes) per utterance: what ``KPipeline(lang_code).__call__`` yields as
    ``(result.graphemes, result.phonemes)`` for ``text``."""
    return [(u.text, u.phonemes) for u in text_utterances(text, lang, **kw)]


def _nothing_to_say(seen: Seen, lang: Language) -> str:
    if not seen.raw:
        return "empty input: give some text to say"
    where = f"nothing to say in {lang.name} (lang {lang.code})"
    if not seen.said:
        return (
            f"{where}: read as Markdown, the text holds nothing said aloud (a code block is "
            "skipped); to hear it as written, turn text normalization off (normalize=False)"
        )
    if seen.dropped:
        why = " or ".join(f"{scripts.what(s)} ({scripts.pick(s)})" for s in seen.dropped)
        return f"{where}: it does not read {why}"
    return f"{where}: its G2P gives no phonemes for {seen.head!r}"
