"""Text a language's G2P cannot read, left out before it reaches the G2P.

Left in, it is worse than silence: misaki's English G2P and espeak-ng spell out a Chinese
character as "Chinese letter" and a Cyrillic word letter by letter, read an emoji's English
name, and the CJK G2Ps pass foreign letters through as symbols the model never learned. So each
letter whose script the language does not read (``languages.Language.scripts``) is dropped, with
a warning that names the language that reads it; so are emoji, which no language reads (espeak-ng
would say a picture's English name). Digits, punctuation and symbols stay, as they reach kokoro's
G2P: every G2P reads or skips those itself (misaki says ``™ © ® °`` and currency signs as words).
``TEXT_SYMBOLS`` are such symbols although Unicode counts them as pictographs. A letter in no
particular script (Common, such as a full-width mark) and a combining mark on a kept letter stay
too. What is left out never takes a line break or a sentence's end mark with it: kokoro pauses at
both.

Scripts are Unicode's Script_Extensions, through ``regex`` (a dependency of misaki, so present
with every G2P).
"""

from __future__ import annotations

import unicodedata
import warnings
from dataclasses import dataclass, field
from functools import cache, lru_cache

from ..languages import LANGUAGES, Language, for_script
from .errors import DroppedTextWarning, G2PUnavailable

#: scripts named in warnings: those of Kokoro's languages, then the common others
KNOWN_SCRIPTS = (
    "Latin",
    "Han",
    "Hiragana",
    "Katakana",
    "Devanagari",
    "Cyrillic",
    "Greek",
    "Hangul",
    "Arabic",
    "Hebrew",
    "Thai",
    "Armenian",
    "Georgian",
    "Bengali",
    "Tamil",
    "Ethiopic",
)
EMOJI = "emoji"
#: pictographs to Unicode (Extended_Pictographic) that text uses as symbols and kokoro's G2Ps read:
#: misaki says "copyright", "registered", "TM"; ``‼ ⁉`` end sentences
TEXT_SYMBOLS = frozenset("©®™‼⁉")
#: the whitespace that ends a line: kokoro splits its input into paragraphs there
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_OPENERS = frozenset("([{“‘«¿¡「『（【《〈")
_EMOJI_CLASS = (
    r"\p{Extended_Pictographic}|\p{Emoji_Modifier}|\p{Regional_Indicator}"
    r"|[\u200d\ufe0e\ufe0f\u20e3\U000E0020-\U000E007F]"
)


@dataclass
class Filtered:
    """``text`` less what ``lang`` cannot read; ``dropped``: per script, the runs left out."""

    text: str
    dropped: dict[str, list[str]] = field(default_factory=dict)


@lru_cache(maxsize=1)
def _regex():
    try:
        import regex
    except ImportError as e:  # misaki needs it too: no G2P works without it
        raise G2PUnavailable(
            "text input needs the `regex` package (misaki's dependency): "
            "pip install 'kokoro-tvm-pipeline[text]'"
        ) from e
    return regex


@cache
def _patterns(scripts: tuple[str, ...]):
    rx = _regex()
    readable = rx.compile("[" + "".join(rf"\p{{scx={s}}}" for s in scripts) + "]")
    known = [(s, rx.compile(rf"\p{{scx={s}}}")) for s in KNOWN_SCRIPTS]
    return readable, known, rx.compile(_EMOJI_CLASS), rx.compile(r"\p{sc=Common}")


def script_of(c: str, lang: Language) -> str | None:
    """Why the letter or emoji ``c`` is left out for ``lang`` (its script, or ``emoji``), or
    None to keep it (``c`` is read, or is no letter at all)."""
    readable, known, emoji, common = _patterns(lang.scripts)
    if emoji.match(c) and c not in TEXT_SYMBOLS:
        return EMOJI
    if not c.isalpha() or readable.match(c) or common.match(c):
        return None
    return next((name for name, rx in known if rx.match(c)), "another script")


def _blank(c: str) -> bool:
    """Whitespace within a line: what a dropped run may take along."""
    return c.isspace() and c not in LINE_BREAKS


def readable(text: str, lang: Language) -> Filtered:
    """``text`` without what ``lang`` cannot read. A combining mark shares the fate of the
    character before it; a text symbol (``TEXT_SYMBOLS``) followed by U+FE0F, the request for
    its emoji picture, is an emoji. A dropped run takes one space beside it along, so
    ``"a 東京 b"`` reads as ``"a b"``; never a line break or a punctuation mark."""
    out: list[str] = []
    dropped: dict[str, list[str]] = {}
    run, run_script = "", None
    for i, c in enumerate(text):
        why = script_of(c, lang)
        if why != EMOJI and unicodedata.category(c)[0] == "M":
            why = run_script if run else None
        if c in TEXT_SYMBOLS and text[i + 1 : i + 2] == "\ufe0f":
            why = EMOJI
        if why is not None and run and why != run_script:
            dropped.setdefault(run_script, []).append(run)
            run = ""
        if why is not None:
            run, run_script = run + c, why
            continue
        if run:
            dropped.setdefault(run_script, []).append(run)
            run, run_script = "", None
            if _blank(c) and (not out or out[-1].isspace()):
                continue  # the space after the run goes with it
            if c in LINE_BREAKS or (unicodedata.category(c)[0] == "P" and c not in _OPENERS):
                while out and _blank(out[-1]):
                    out.pop()  # or the one before it, where a mark followed it ("a 東京, b")
        out.append(c)
    if run:
        dropped.setdefault(run_script, []).append(run)
        while out and _blank(out[-1]):
            out.pop()  # at the end, the space before it
    return Filtered("".join(out), dropped)


def warn_dropped(filtered: Filtered, lang: Language) -> None:
    """One warning per script left out, naming the language to pick for it."""
    for script, runs in filtered.dropped.items():
        shown = ", ".join(repr(r.strip()) for r in runs[:5]) + (" ..." if len(runs) > 5 else "")
        warnings.warn(
            f"{lang.name} (lang {lang.code}) does not read {what(script)}: {shown} left out; "
            + pick(script),
            DroppedTextWarning,
            stacklevel=4,
        )


def pick(script: str) -> str:
    """What to do for text in ``script``: the language to pick, or that none reads it."""
    if script == EMOJI:
        return "Kokoro reads no emoji (write the words instead)"
    langs = for_script(script)
    if not langs:
        return f"no language Kokoro speaks reads {script} text"
    return "to hear it, pick " + " or ".join(
        f"lang {x.code} ({x.name}) with a {x.code}*_ voice" for x in langs if x.code in LANGUAGES
    )


def what(script: str) -> str:
    return "emoji" if script == EMOJI else f"{script} text"
