"""Text as people hand it over, read a piece at a time up to the segments kokoro phonemizes.

``KPipeline.__call__`` takes a string, which it strips and splits at ``split_pattern``
(``\\n+``: every line is a segment; None: the whole text is one), or a list of strings, one
segment each; each segment is phonemized on its own. The runtime reads the same segments, but
lazily, so that speech starts after the first of them whatever the input's length and memory
does not grow with it:

1. ``_raw``: a string in slices, a text file (stdin) a line at a time (at most ``READ_CHARS``
   characters: a line is read as soon as it is there);
2. ``_lines``: lines, a line longer than ``BLOCK_CHARS`` cut at a space (else anywhere);
3. ``_blocks``: what normalization may read alone. With Markdown read (the default) a block ends
   where a Markdown block ends, at a blank line outside fenced code, so it reads as it would
   within the whole text; and with a line that ends a sentence, so that prose arriving a line
   at a time is spoken as it arrives; a block past ``BLOCK_CHARS`` ends at a line end. Without
   Markdown, normalization is per line and each line is a block;
4. ``_said``: each block as it is said (``normalize``) less what the language cannot read
   (``scripts``), followed by what separates it from the next as ``normalize_text`` joins them;
5. ``_split``: kokoro's segments of that text, in ``(piece, ends its segment)`` pieces: a
   segment may come in several, which the G2P's readers (``en``, ``sentences``) cut further
   where a sentence ends. A match of ``split_pattern`` is found if it is shorter than
   ``HOLD_CHARS``.

What the pieces hold is what the whole text gives, but where a cut falls inside a reading: a
line cut at a space past ``BLOCK_CHARS`` (a date or phone number across the cut is read in two
parts), Markdown spanning a sentence-ending line (emphasis closed on the next line, a ``===``
heading underline), and the trailing spaces of a file's last line, which kokoro would strip.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..chunking import MAX_PHONEMES, InputError
from ..languages import Language
from ..options import FIRSTS
from . import scripts
from .normalize import NormalizationOptions, normalize_text, options_of

#: ``KPipeline.__call__``'s default: every line is a segment of its own
SPLIT_PATTERN = r"\n+"
READ_CHARS = 65_536  #: the most characters read from a file at once
BLOCK_CHARS = 16_384  #: the most characters normalized at once (a longer line is cut)
HOLD_CHARS = 4_096  #: the text a split keeps back in case a match of the pattern goes on
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’)\]」』）]*\s*$")

TextInput = str | Sequence[str] | TextIO
ACCEPTED = (
    "text must be a str, a list of str (each item one segment, as kokoro's KPipeline takes "
    "them) or a text file open for reading (such as sys.stdin)"
)


@dataclass(frozen=True)
class Reading:
    """How text is read before its G2P: ``lang``; ``first``, where the first utterance may
    end early (``options.Cuts.first``); ``normalize`` (``normalize.NormalizationOptions``);
    ``split_pattern`` (kokoro's: a regular expression, or None for no split); ``limit``, the
    most phonemes of an utterance of a language other than English (``sentences``)."""

    lang: Language
    first: str = "none"
    normalize: NormalizationOptions | bool = field(default_factory=NormalizationOptions)
    split_pattern: str | None = SPLIT_PATTERN
    limit: int = MAX_PHONEMES

    def __post_init__(self) -> None:
        if self.first not in FIRSTS:
            raise InputError(f"first must be one of {FIRSTS}, got {self.first!r}")
        object.__setattr__(self, "normalize", options_of(self.normalize))
        check_split_pattern(self.split_pattern)


def check_split_pattern(pattern: Any) -> re.Pattern | None:
    """kokoro's ``split_pattern``: a regular expression (``re``), or None for no split."""
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise InputError(
            f"split_pattern must be a regular expression (a str such as r'\\n+', kokoro's "
            f"default) or None (no split), got {type(pattern).__name__} {pattern!r}"
        )
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InputError(f"split_pattern {pattern!r} is not a regular expression: {e}") from None


def check_text(text: Any) -> None:
    """Refuse, naming the accepted types, any text the readers cannot read."""
    if isinstance(text, str) or _is_file(text):
        return
    if isinstance(text, (list, tuple)):
        for i, item in enumerate(text):
            if not isinstance(item, str):
                raise InputError(
                    f"text[{i}] is {_a(item)}: {ACCEPTED}; every item of a list is a str"
                )
        return
    hint = (
        " (decode it first: text.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
    )
    raise InputError(f"{ACCEPTED}; got {_a(text)}{hint}")


def _is_file(text: Any) -> bool:
    return isinstance(text, io.TextIOBase) or (
        hasattr(text, "readline") and not isinstance(text, (str, bytes, bytearray))
    )


def _a(x: Any) -> str:
    return "None" if x is None else f"a {type(x).__name__}"


@dataclass
class Seen:
    """What reading found, for the error when nothing is left to say and for warnings that
    should be given once per call."""

    head: str = ""  #: the input's first characters
    raw: bool = False  #: any text that is not whitespace
    said: bool = False  #: any, once normalized
    dropped: dict[str, list[str]] = field(default_factory=dict)  #: per script, runs left out
    warned: set[str] = field(default_factory=set)

    def once(self, key: str, message: str, category: type[Warning] = UserWarning) -> None:
        """Warn ``message`` unless ``key`` was warned about in this call already."""
        if key not in self.warned:
            self.warned.add(key)
            warnings.warn(message, category, stacklevel=2)


def segments(text: TextInput, how: Reading, seen: Seen) -> Iterator[Iterator[str]]:
    """kokoro's segments of ``text`` as said in ``how.lang``, each as the pieces it arrives in
    (see the module docstring); a segment left unread is skipped."""
    if isinstance(text, (list, tuple)):  # kokoro: one segment per item, neither split nor stripped
        pieces: Iterable[tuple[str, bool]] = (
            piece for item in text for piece in _split(_said(_raw(item), how, seen), None)
        )
    else:
        pattern = check_split_pattern(how.split_pattern)
        pieces = _split(_said(_raw(text), how, seen), pattern)
    ahead = iter(pieces)
    for piece, end in ahead:
        segment = _segment(piece, end, ahead)
        yield segment
        for _ in segment:  # what the reader left of it
            pass


def _segment(piece: str, end: bool, ahead: Iterator[tuple[str, bool]]) -> Iterator[str]:
    yield piece
    if end:
        return
    for piece, end in ahead:
        yield piece
        if end:
            return


def _raw(text: str | TextIO) -> Iterator[str]:
    if isinstance(text, str):
        text = text.rstrip()  # kokoro strips the text, and a string's end is known
        for i in range(0, len(text), READ_CHARS):
            yield text[i : i + READ_CHARS]
        return
    while True:
        try:
            piece = text.readline(READ_CHARS)
        except UnicodeDecodeError as e:
            raise InputError(f"the text read is not UTF-8 ({e.reason} at byte {e.start})") from None
        if not isinstance(piece, str):
            raise InputError(
                f"the text file gives {type(piece).__name__}: open it in text mode "
                "(open(path, encoding='utf-8'))"
            )
        if not piece:
            return
        yield piece


def _lines(raw: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(line, what followed it): ``"\\n"``; for a piece of an over-long line, ``" "`` when it
    was cut at a space, ``""`` when cut anywhere (or at the end of the text)."""
    buf = ""
    for piece in raw:
        buf += piece
        start = 0
        while (end := buf.find("\n", start)) >= 0:
            yield from _long(buf[start:end], "\n")
            start = end + 1
        buf = buf[start:]
        while len(buf) > BLOCK_CHARS:
            cut = _space(buf, BLOCK_CHARS)
            yield (buf[: cut - 1], " ") if cut > 0 else (buf[:BLOCK_CHARS], "")
            buf = buf[cut if cut > 0 else BLOCK_CHARS :]
    if buf:
        yield from _long(buf, "")


def _long(line: str, end: str) -> Iterator[tuple[str, str]]:
    while len(line) > BLOCK_CHARS:
        cut = _space(line, BLOCK_CHARS)
        yield (line[: cut - 1], " ") if cut > 0 else (line[:BLOCK_CHARS], "")
        line = line[cut if cut > 0 else BLOCK_CHARS :]
    yield line, end


def _space(text: str, limit: int) -> int:
    """Just past the last space before ``limit``, or 0."""
    return text.rfind(" ", 1, limit + 1) + 1


def _blocks(lines: Iterable[tuple[str, str]], markdown: bool) -> Iterator[tuple[str, str]]:
    """(block, what follows it): see the module docstring. With Markdown a block also ends
    with a line that ends a sentence (not a table row), so that prose is read a line at a time
    as it arrives; a blank line after such a block is a block of its own, ``("", "\\n\\n")``."""
    if not markdown:
        yield from lines
        return
    block: list[tuple[str, str]] = []
    size, fence, blank = 0, "", True
    for line, end in lines:
        if not fence and not line.strip() and end in ("\n", ""):  # a Markdown block ends
            if block:
                yield _joined(block), "\n\n"
                block, size = [], 0
            elif not blank:
                yield "", "\n\n"
            blank = True
            continue
        blank = False
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            elif size > BLOCK_CHARS:
                continue  # a fence's body is not said: past the limit it need not be kept
        elif opened:
            fence = opened.group(1)
        block.append((line, end))
        size += len(line) + len(end)
        said_out = end == "\n" and _SENTENCE_END.search(line) and not line.lstrip().startswith("|")
        if not fence and (size > BLOCK_CHARS or said_out):
            yield _joined(block), end
            block, size = [], 0
    if block:
        yield _joined(block), block[-1][1]


def _joined(block: list[tuple[str, str]]) -> str:
    return "".join(line + end for line, end in block[:-1]) + block[-1][0]


def _said(raw: Iterable[str], how: Reading, seen: Seen) -> Iterator[str]:
    """The blocks of ``raw`` as said (normalized, less what ``how.lang`` cannot read), each
    followed by what separates it from the next, as ``normalize_text`` joins a whole text's
    (with Markdown: a blank line, else a line break; a block that says nothing is left out)."""
    options = how.normalize
    markdown = options.normalize and options.markdown
    after = "\n\n"  # what the text said last ends with
    for block, end in _blocks(_lines(_note_raw(raw, seen)), markdown):
        text = normalize_text(block, how.lang, options)
        seen.said = seen.said or bool(text.strip())
        if not markdown:  # line by line: every character of the text stays where it was
            yield _readable(text, how.lang, seen) + end
        elif text.strip():
            yield _readable(text, how.lang, seen) + end
            after = end
        elif end == "\n\n" and after == "\n":  # a block that said nothing, between two blank lines
            yield "\n"
            after = end


def _note_raw(raw: Iterable[str], seen: Seen) -> Iterator[str]:
    for piece in raw:
        if len(seen.head) < 40:
            seen.head += piece[: 40 - len(seen.head)]
        seen.raw = seen.raw or bool(piece.strip())
        yield piece


def _readable(text: str, lang: Language, seen: Seen) -> str:
    filtered = scripts.readable(text, lang)
    for script, runs in filtered.dropped.items():
        kept = seen.dropped.setdefault(script, [])
        kept += runs[: 6 - len(kept)]
        if script not in seen.warned:
            seen.warned.add(script)
            scripts.warn_dropped(scripts.Filtered("", {script: runs}), lang)
    return filtered.text


def _split(said: Iterable[str], pattern: re.Pattern | None) -> Iterator[tuple[str, bool]]:
    """kokoro's ``re.split(pattern, text.strip())`` (with a pattern; without one the text is
    one segment, unstripped) over text that arrives in pieces: ``(piece, ends its segment)``.

    A match of the pattern at the end of what has arrived may go on in the next piece, so it
    waits for it; but a match of kokoro's ``\\n+`` can only grow at its end, which changes
    nothing before it: the segment ends at once (a line is spoken as soon as it is read)."""
    if pattern is None:
        for piece in said:
            yield piece, False
        yield "", True
        return
    buf, started = "", False
    runs_on = pattern.pattern == SPLIT_PATTERN
    for piece in said:
        if not started:
            piece = piece.lstrip()
            started = bool(piece)
        buf += piece
        buf = yield from _cut(buf, pattern, runs_on)
    yield from _cut(buf.rstrip(), pattern, None)


def _cut(buf: str, pattern: re.Pattern, runs_on: bool | None):
    """Yield what ``buf`` holds of its segments; return the text kept back (``runs_on`` None:
    ``buf`` is the end of the text)."""
    pos = 0
    for m in pattern.finditer(buf):
        if runs_on is False and m.end() >= len(buf):
            break  # the match may go on, or be another, with the next piece
        yield buf[pos : m.start()], True
        for group in m.groups():  # re.split's captured separators are segments too
            if group is not None:
                yield group, True
        pos = m.end()
    rest = buf[pos:]
    if runs_on is None:
        yield rest, True
        return ""
    if len(rest) > HOLD_CHARS:
        yield rest[:-HOLD_CHARS], False
        rest = rest[-HOLD_CHARS:]
    return rest
