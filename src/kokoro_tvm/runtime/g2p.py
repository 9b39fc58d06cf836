"""English text to Kokoro phonemes with misaki, the G2P kokoro's ``KPipeline`` uses.

misaki's English G2P needs a spaCy model and tries to download it on first use; offline that
fails deep inside spaCy, so we check first and say exactly what to install.
"""

from __future__ import annotations

from ..errors import KokoroTVMError

SPACY_MODEL = "en_core_web_sm"
INSTALL_HINT = ("`pip install 'misaki[en]==0.9.4'` and `python -m spacy download en_core_web_sm` "
                "(or pass phonemes with --phonemes)")


class G2PUnavailable(KokoroTVMError, RuntimeError):
    pass


def text_to_phonemes(text: str, british: bool = False) -> str:
    """Phonemes for English ``text`` (newline-separated paragraphs are joined by a space)."""
    try:
        import spacy
        from misaki import en
    except ImportError as e:
        raise G2PUnavailable(f"--text needs misaki's English G2P ({e.name} is not installed): {INSTALL_HINT}") from e
    if not spacy.util.is_package(SPACY_MODEL):
        raise G2PUnavailable(f"--text needs the spaCy model {SPACY_MODEL} for misaki's English G2P, and it "
                             f"is not installed: {INSTALL_HINT}")
    try:
        from misaki import espeak

        fallback = espeak.EspeakFallback(british=british)  # out-of-dictionary words, as kokoro does
    except Exception:
        fallback = None
    g2p = en.G2P(trf=False, british=british, fallback=fallback, unk="")
    parts = [g2p(p)[0] for p in text.splitlines() if p.strip()]
    return " ".join(p.strip() for p in parts if p.strip())
