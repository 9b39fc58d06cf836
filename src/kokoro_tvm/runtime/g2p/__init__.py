"""Text to kokoro's utterances, in each of the nine languages Kokoro-82M speaks, with the G2P
kokoro 0.9.4's ``KPipeline`` uses for it (``languages``), offline.

``text_utterances(text, lang)`` first rewrites chat text as it is said (``normalize``: Markdown,
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

import threading
from typing import Any

from ..chunking import MAX_PHONEMES, InputError, Utterance
from ..languages import Language, resolve
from . import quiet, scripts
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
from .normalize import NormalizationOptions, normalize_text, options_of

__all__ = [
    "COMPONENTS",
    "INSTALL_HINT",
    "SPACY_MODEL",
    "SPACY_MODEL_PYPI",
    "DroppedTextWarning",
    "G2PUnavailable",
    "NormalizationOptions",
    "assemble",
    "load",
    "load_g2p",
    "normalize_text",
    "phonemize",
    "spacy_pipeline",
    "text_utterances",
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


def text_utterances(
    text: str,
    lang: str | Language | None = None,
    first: str = "none",
    g2p: Any = None,
    british: bool = False,
    limit: int = MAX_PHONEMES,
    normalize: bool | NormalizationOptions = True,
) -> list[Utterance]:
    """kokoro's utterances for ``text`` in ``lang`` (a ``lang_code`` letter or kokoro-onnx
    ``lang``; None: American English, or British with ``british``). ``first``: where the
    first chunk may end early (``options.Cuts.first``). ``g2p``: a loaded G2P to use instead of ``load``'s.
    ``normalize``: True rewrites chat text as it is said (``NormalizationOptions()``), False
    reads it as written (kokoro's G2P on the text itself), or the options to use.
    Raises ``InputError`` when nothing of the text is left to say."""
    lang = resolve(lang if lang is not None else ("b" if british else "a"))
    options = options_of(normalize)
    said = normalize_text(str(text), lang, options)
    filtered = scripts.readable(said, lang)
    scripts.warn_dropped(filtered, lang)
    g2p = load(lang) if g2p is None else g2p
    with _LOCK:
        quiet.hush_third_party()
        if lang.g2p == "en":
            from . import en

            utts = en.text_utterances(filtered.text, lang.british, first, g2p)
        else:
            from . import sentences

            utts = sentences.utterances(filtered.text, lang, g2p, first, limit)
    if not any(u.phonemes.strip() for u in utts):
        raise InputError(_nothing_to_say(text, said, filtered, lang))
    return utts


def phonemize(text: str, lang: str | Language | None = None, **kw: Any) -> list[tuple[str, str]]:
    """(graphemes, phonemes) per utterance: what ``KPipeline(lang_code).__call__`` yields as
    ``(result.graphemes, result.phonemes)`` for ``text``."""
    return [(u.text, u.phonemes) for u in text_utterances(text, lang, **kw)]


def _nothing_to_say(text: str, said: str, filtered: scripts.Filtered, lang: Language) -> str:
    if not str(text).strip():
        return "empty input: give some text to say"
    where = f"nothing to say in {lang.name} (lang {lang.code})"
    if not said.strip():
        return (
            f"{where}: read as Markdown, the text holds nothing said aloud (a code block is "
            "skipped); to hear it as written, turn text normalization off (normalize=False)"
        )
    if filtered.dropped:
        why = " or ".join(f"{scripts.what(s)} ({scripts.pick(s)})" for s in filtered.dropped)
        return f"{where}: it does not read {why}"
    return f"{where}: its G2P gives no phonemes for {str(text)[:40]!r}"
