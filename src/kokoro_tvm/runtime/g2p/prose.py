"""Markdown as prose: what a person reading a chat reply aloud says, in any language.

Chat front ends send Markdown; read literally, ``**bold**`` is "bold asterisk asterisk" and a
table is a row of bars. ``markdown_prose`` parses it (``markdown-it-py``, CommonMark with tables
and strikethrough) and keeps what is said: emphasis, headings and quotes by their words, list
items one to a line (an ordered one with its number), links by their text, images by their
alt text, code spans by their content, tables a row to a line with cells joined by commas, HTML
by its text. Fenced code blocks are skipped: code read symbol by symbol is noise to a listener.

Plain text passes through unchanged but for Markdown's own escapes and entities (``\\*``,
``&amp;``): indented code blocks are off, so an indented line stays prose. Every line break in
a paragraph stays a line break (kokoro pauses there), and each block is a line of its own.
"""

from __future__ import annotations

import functools
from html.parser import HTMLParser
from typing import Any

#: inline tokens whose ``content`` is what is said
_SAID = frozenset({"text", "text_special", "code_inline"})
#: inline tokens that end a line
_BREAKS = frozenset({"softbreak", "hardbreak"})


@functools.cache
def _parser() -> Any:
    from markdown_it import MarkdownIt

    return (
        MarkdownIt("commonmark", {"html": True})
        .enable(["table", "strikethrough"])
        .disable("code")  # an indented line is prose in chat text, not a code block
    )


def markdown_prose(text: str) -> str:
    """``text`` (Markdown) as the prose it reads as: one line per block, list item or table
    row, a blank line where the source has one between blocks; line breaks inside a paragraph
    kept."""
    lines: list[tuple[str, int, int]] = []  # (what is said, first and last+1 source line)
    row: list[str] | None = None  # the cells of the table row being read
    row_map, rows = (0, 0), 0
    number = ""  # an ordered list item's number, said before its first line
    for tok in _parser().parse(text):
        kind, where = tok.type, tuple(tok.map or (0, 0))
        if kind in ("list_item_open", "list_item_close"):
            number = f"{tok.info}{tok.markup} " if kind == "list_item_open" and tok.info else ""
        elif kind == "table_open":
            rows = 0
        elif kind == "tr_open":
            row, row_map = [], where
        elif kind == "tr_close" and row is not None:
            first = lines[-1][2] if rows and lines else row_map[0]  # rows follow one another
            lines.append((", ".join(c for c in row if c), first, row_map[1]))
            row, rows = None, rows + 1
        elif kind == "inline":
            said = _inline(tok.children or [])
            if row is not None:
                row.append(said.strip())
            else:
                lines.append((number + said, *where))
                number = ""
        elif kind == "html_block":
            lines.append((_html_text(tok.content), *where))
        # fence: skipped; every other token (openers, closers, hr) says nothing itself
    out, end = [], None
    for said, first, last in lines:
        said = said.strip()
        if not said:
            continue
        if end is not None:
            out.append("\n\n" if first > end else "\n")
        out.append(said)
        end = last
    return "".join(out)


def _inline(children: list[Any]) -> str:
    out = []
    for i, child in enumerate(children):
        if child.type in _SAID:
            out.append(child.content)
        elif child.type in _BREAKS:
            out.append("\n")
        elif child.type == "image":  # its alt text, which markdown-it parses as children
            out.append(_inline(child.children or []))
        elif child.type.startswith(("em_", "strong_")) and _between_digits(out, children, i):
            out.append(child.markup)  # 2*3*4 is arithmetic, not an emphasized 3
        # emphasis, link and strikethrough marks and inline HTML tags say nothing
    return "".join(out)


def _between_digits(out: list[str], children: list[Any], i: int) -> bool:
    before = next((piece[-1] for piece in reversed(out) if piece), "")
    later = (children[j] for j in range(i + 1, len(children)))
    after = next((c.content[:1] for c in later if c.type in _SAID and c.content), "")
    return before.isdigit() and after.isdigit()


class _TextOf(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _html_text(html: str) -> str:
    """The text of an HTML block, its tags left out (the standard library's parser)."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)
