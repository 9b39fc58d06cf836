"""The G2P of each language other than English, as kokoro 0.9.4's ``KPipeline`` builds it, loaded
on first use: each pulls its own packages (espeak-ng's library, jieba's dictionary, MeCab's), and
a user of one language installs only that language's extra.

- Spanish, French, Hindi, Italian, Brazilian Portuguese: misaki's ``EspeakG2P`` for the language,
  through ``phonemizer-fork`` and ``espeakng-loader`` (its wheel bundles libespeak-ng and its data).
- Mandarin: misaki's ``ZHG2P`` with ``version=None``, what kokoro runs for Kokoro-82M (the other
  version is for the ``-v1.1-zh`` model): jieba words, pypinyin, numbers through cn2an.
- Japanese: misaki's ``JAG2P`` (cutlet) on fugashi with ``unidic-lite``; misaki's ``ja`` module
  imports ``pyopenjtalk`` too, which ``pyopenjtalk-plus`` provides with its dictionary bundled
  (plain ``pyopenjtalk`` and ``unidic`` download theirs on first use).

Each loader returns ``text -> phonemes``: what ``KPipeline.__call__`` takes from ``g2p(chunk)[0]``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from ..languages import Language
from .errors import G2PUnavailable

Phonemizer = Callable[[str], str]


def _unavailable(lang: Language, why: str) -> G2PUnavailable:
    return G2PUnavailable(
        f"{lang.name} text (lang {lang.code} / {lang.onnx}) needs {lang.package}, and {why}: "
        f"pip install 'kokoro-tvm-pipeline[{lang.extra}]', or pass phonemes "
        "(--phonemes, or is_phonemes=True)"
    )


@functools.cache
def load(lang: Language) -> Phonemizer:
    """``lang``'s G2P, built once per language."""
    if lang.g2p not in _LOADERS:
        raise ValueError(f"{lang.name} has no phonemes-only G2P here (its family is {lang.g2p})")
    try:
        g2p = _LOADERS[lang.g2p](lang)
    except ImportError as e:
        raise _unavailable(lang, f"{e.name or e} is not installed") from e
    except G2PUnavailable:
        raise
    except Exception as e:  # a package present without its data (a dictionary, libespeak-ng)
        raise _unavailable(lang, f"it failed to load ({type(e).__name__}: {e})") from e
    return lambda text: g2p(text)[0] or ""


def _espeak(lang: Language):
    from misaki import espeak

    return espeak.EspeakG2P(language=lang.espeak)


def _zh(lang: Language):
    import jieba

    jieba.setLogLevel(logging.WARNING)  # it logs its dictionary's build to stderr otherwise
    from misaki import zh

    return zh.ZHG2P(version=None)


def _ja(lang: Language):
    from misaki import ja

    return ja.JAG2P()


_LOADERS = {"espeak": _espeak, "zh": _zh, "ja": _ja}
