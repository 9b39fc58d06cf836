"""Text in a language other than English to kokoro's utterances.

kokoro 0.9.4's ``KPipeline.__call__`` runs these languages' G2Ps on whole pieces of text, not on
words: each paragraph (split on newlines) is cut after each run of ``.!?`` and the sentences are
packed into chunks of at most 400 characters; each chunk's phonemes are one utterance. That is
followed here exactly (``chunks``, one chunk at a time as the text is read), so the
utterances, and with them the audio, are kokoro's.

Beyond kokoro, in the two places where it differs on purpose:

* a chunk whose phonemes pass 510 symbols, which kokoro truncates (the rest of the chunk is never
  spoken: a Chinese or Japanese paragraph has no ``.!?`` to cut at), is cut at the language's own
  marks (``。！？`` and ``।`` end sentences, ``，、`` end clauses), strongest first, then at
  spaces, then between characters, into the fewest pieces that fit;
* ``first`` (``options.Cuts.first``) may end the very first chunk early, for earlier first
  audio: after its first sentence (``sentence``), or after its first clause mark when that
  clause has at most ``chunking.FIRST_CLAUSE_LIMIT`` phonemes (``clause``).

Each cut runs the G2P on the pieces as text, so every utterance keeps the graphemes it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from ..chunking import FIRST_CLAUSE_LIMIT, MAX_PHONEMES, Utterance, phoneme_tokens
from ..languages import CLOSERS, Language
from .reading import Seen

#: ``KPipeline.__call__``'s chunk size for languages other than English, in characters
KOKORO_CHUNK_CHARS = 400

Phonemizer = Callable[[str], str]


def kokoro_chunks(paragraph: str, size: int = KOKORO_CHUNK_CHARS) -> list[str]:
    """``KPipeline.__call__``'s chunks of one paragraph: sentences cut after ``[.!?]+`` and
    packed while they fit ``size`` characters (one longer sentence is a chunk of its own)."""
    sentences = re.split(r"([.!?]+)", paragraph)
    chunks: list[str] = []
    current = ""
    for i in range(0, len(sentences), 2):
        sentence = sentences[i] + (sentences[i + 1] if i + 1 < len(sentences) else "")
        if len(current) + len(sentence) <= size:
            current += sentence
        else:
            if current:
                chunks.append(current.strip())
            current = sentence
    if current:
        chunks.append(current.strip())
    if not chunks:
        chunks = [paragraph[i : i + size] for i in range(0, len(paragraph), size)]
    return chunks


def utterances(
    segments: Iterable[Iterator[str]],
    lang: Language,
    g2p: Phonemizer,
    first: str = "none",
    limit: int = MAX_PHONEMES,
    seen: Seen | None = None,
) -> Iterator[Utterance]:
    """kokoro's utterances for text in ``lang``, each at most ``limit`` phonemes, one at a time:
    each segment (``reading.segments``) in kokoro's chunks (``chunks``) through the G2P."""
    seen = Seen() if seen is None else seen
    started = False
    for parts in segments:
        for chunk in chunks(parts, lang, seen):
            if not chunk.strip():
                continue
            if first != "none" and not started:
                head, chunk = _first_piece(chunk, lang, g2p, first)
                started = bool(head)
                yield from head
            for text, ps in fit(chunk, lang, g2p, limit):
                started = True
                yield _utterance(text, ps)


#: a sentence with no ``.!?`` for this many characters is cut before it reaches the G2P
RUN_ON_CHARS = 2_000
_MARKS = re.compile(r"[.!?]+")


def chunks(
    parts: Iterable[str], lang: Language, seen: Seen, size: int = KOKORO_CHUNK_CHARS
) -> Iterator[str]:
    """``kokoro_chunks`` of a segment arriving in ``parts``, each as soon as the sentence after
    it is read. A sentence with no ``.!?`` for ``RUN_ON_CHARS`` characters (kokoro: one chunk,
    of which it speaks the first 510 phonemes) is cut first at the language's own marks, else
    at a space, else anywhere, with a warning for the last two."""
    current, buf = "", ""
    for part in parts:
        buf += part
        pos = 0
        for m in _MARKS.finditer(buf):
            if m.end() >= len(buf):
                break  # the run of marks may go on in the next part
            current = yield from _pack(current, buf[pos : m.end()], size)
            pos = m.end()
        buf = buf[pos:]
        while len(buf) > RUN_ON_CHARS:
            cut = _run_on_cut(buf, lang, seen)
            current = yield from _pack(current, buf[:cut], size)
            buf = buf[cut:]
    current = yield from _pack(current, buf, size)
    if current:
        yield current.strip()


def _pack(current: str, sentence: str, size: int):
    """``KPipeline.__call__``'s packing of one more sentence: yield the chunk it closes, return
    the chunk being filled."""
    if len(current) + len(sentence) <= size:
        return current + sentence
    if current:
        yield current.strip()
    return sentence


def _run_on_cut(text: str, lang: Language, seen: Seen) -> int:
    """Where a run of ``RUN_ON_CHARS`` characters without ``.!?`` is cut: after the last of the
    language's sentence marks (``。！？।``), else clause marks, else spaces, else anywhere."""
    head = text[:RUN_ON_CHARS]
    for level, marks in enumerate((lang.sentence_marks, lang.clause_marks, " \t")):
        z = max((head.rfind(c) for c in marks), default=-1) + 1
        if z > 0:
            if level:
                _warn_run_on(lang, seen)
            return z
    _warn_run_on(lang, seen)
    return RUN_ON_CHARS


def _warn_run_on(lang: Language, seen: Seen) -> None:
    seen.once(
        "run-on",
        f"{lang.name} text runs over {RUN_ON_CHARS:,} characters without a sentence end: it "
        "is read in pieces cut at a clause mark or a space (kokoro reads it as one chunk and "
        "speaks only its first 510 phonemes)",
    )


def _utterance(text: str, phonemes: str) -> Utterance:
    # tokens only so that a chunk too big for the built buckets can be cut further; they are
    # phonemes, not words, so no word is timed (kokoro times English words only)
    return Utterance(phonemes, phoneme_tokens(phonemes), text, timed_words=False)


def _first_piece(
    chunk: str, lang: Language, g2p: Phonemizer, first: str
) -> tuple[list[Utterance], str]:
    """The chunk's first sentence (``first="sentence"``) or clause as an utterance, and the
    rest of the chunk; no cut when there is no mark before the end or a clause is long."""
    clause = first == "clause"
    marks = lang.sentence_marks + (lang.clause_marks if clause else "")
    z = next((i + 1 for i, c in enumerate(chunk) if c in marks), 0)
    while 0 < z < len(chunk) and (chunk[z] in marks or chunk[z] in CLOSERS):
        z += 1
    head, rest = chunk[:z].strip(), chunk[z:].strip()
    if not z or not rest:
        return [], chunk
    ps = g2p(head)
    if not ps or len(ps) > (FIRST_CLAUSE_LIMIT if clause else MAX_PHONEMES):
        return [], chunk
    piece = _utterance(head, ps)
    piece.cut_early = True
    return [piece], rest


def fit(text: str, lang: Language, g2p: Phonemizer, limit: int, level: int = 0) -> list[tuple]:
    """(text, phonemes) pieces of ``text`` whose phonemes each fit ``limit``: ``text`` whole
    when it fits (kokoro's case), else cut at ``level`` and weaker cuts (``_pieces``), packing as
    many consecutive pieces as fit into each."""
    ps = g2p(text.strip())
    if len(ps) <= limit:
        return [(text.strip(), ps)] if ps else []
    pieces = _pieces(text, lang, level)
    if pieces is None:  # no cut left: the runtime's planner cuts the phonemes themselves
        return [(text.strip(), ps)]
    if len(pieces) < 2:
        return fit(text, lang, g2p, limit, level + 1)
    out: list[tuple] = []
    start = 0
    while start < len(pieces):
        k, ps = _longest_fit(pieces, start, g2p, limit)
        if k == start:  # one piece alone is too long: cut it finer
            out += fit(pieces[start], lang, g2p, limit, level + 1)
            start += 1
            continue
        if ps:
            out.append(("".join(pieces[start:k]).strip(), ps))
        start = k
    return out


def _longest_fit(pieces: list[str], start: int, g2p: Phonemizer, limit: int) -> tuple[int, str]:
    """The most pieces from ``start`` on whose joined phonemes fit ``limit`` (binary search:
    phonemes grow with text), and those phonemes; ``start`` itself when not even one fits."""
    lo, hi, best = start, len(pieces), ""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ps = g2p("".join(pieces[start:mid]).strip())
        if len(ps) <= limit:
            lo, best = mid, ps
        else:
            hi = mid - 1
    return lo, best


def _pieces(text: str, lang: Language, level: int) -> list[str] | None:
    """``text`` cut (nothing lost) after each run of sentence marks (level 0), clause marks (1),
    spaces (2), or between characters (3); None past the last level."""
    if level >= 4:
        return None
    if level == 3:
        return list(text)
    if level == 2:
        return [p for p in re.split(r"(?<=\s)(?=\S)", text) if p]
    marks = lang.sentence_marks if level == 0 else lang.sentence_marks + lang.clause_marks
    out, start, i = [], 0, 0
    while i < len(text):
        if text[i] in marks:
            i += 1
            while i < len(text) and (text[i] in marks or text[i] in CLOSERS):
                i += 1
            out.append(text[start:i])
            start = i
        else:
            i += 1
    if start < len(text):
        out.append(text[start:])
    return out
