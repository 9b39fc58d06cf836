"""Where synthesized speech goes: output paths checked before any work, files that appear whole
or not at all, and timestamps gathered as chunks are decoded.

A WAV (streamed or not) and its timestamps file are written to temporary files beside their
destinations and renamed into place only once the whole synthesis succeeded, so a failure at
any chunk leaves no partial file (and no WAV without the timestamps that were asked for).
Raw samples on stdout leave as they are made: a pipe cannot be taken back.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..atomic import atomic_path
from ..errors import KokoroTVMError
from .stream import ChunkAudio, piece_times
from .timestamps import Timestamp, merge_pieces
from .wav import AudioWriter

STDOUT = "-"


class OutputError(KokoroTVMError, ValueError):
    """An output path that cannot be written; the message says which and what to give instead."""


def check_output(path: str, what: str, allow_stdout: bool = True) -> None:
    """Refuse, before any work, an output path that the end of the work could not write."""
    if path == STDOUT:
        if allow_stdout:
            return
        raise OutputError(f"{what} cannot go to stdout ('-'); give a file path")
    p = Path(path)
    if not str(path).strip():
        raise OutputError(f"{what} path is empty; give a file path such as out.wav")
    if p.is_dir():
        raise OutputError(f"{what} {path} is a folder; give a file path inside it")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{what} {path}: folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: folder {parent} is not writable; pick another folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"{what} {path} exists and is not writable; pick another path")


@dataclass
class Written:
    """What a synthesis wrote, for the summary line."""

    chunks: int = 0
    samples: int = 0
    sample_rate: int = 0
    clipped: int = 0
    first_audio: float | None = None


@dataclass
class TimestampLog:
    """Timestamps gathered chunk by chunk: what ``--timestamps`` writes, and nothing else of a
    chunk (its audio and arrays are gone once written), so memory grows by a few hundred bytes
    per word, not by the audio."""

    sample_rate: int = 0
    chunks: list[dict[str, Any]] = field(default_factory=list)
    tokens: list[Timestamp] = field(default_factory=list)
    pieces: list[Timestamp] = field(default_factory=list)
    words: list[Any] = field(default_factory=list)

    def add(self, libs: Any, part: ChunkAudio) -> None:
        c, rate = part.chunk, part.sample_rate
        self.sample_rate = rate
        self.chunks.append(
            {
                "index": part.index,
                "start": part.offset / rate,
                "end": (part.offset + part.samples) / rate,
                "phonemes": c.phonemes,
                "text": c.text,
            }
        )
        self.tokens += part.tokens
        self.pieces += piece_times(libs, c, part.index, part.offset)
        self.words += c.words

    def document(self, samples: int) -> dict[str, Any]:
        rate = self.sample_rate
        return {
            "sample_rate": rate,
            "samples": samples,
            "audio_seconds": samples / rate if rate else 0.0,
            "chunks": self.chunks,
            "tokens": [t.as_dict() for t in self.tokens],
            "words": [w.as_dict() for w in merge_pieces(self.pieces, self.words)],
        }


@contextlib.contextmanager
def _audio_sink(path: str) -> Iterator[BinaryIO]:
    if path == STDOUT:
        yield sys.stdout.buffer
        return
    with atomic_path(path, suffix=".wav") as tmp, open(tmp, "wb") as f:
        yield f


def write_speech(
    parts: Iterator[ChunkAudio],
    libs: Any,
    output: str,
    fmt: str = "pcm16",
    timestamps: str | None = None,
    on_chunk: Any = None,
) -> Written:
    """Write each chunk as it is decoded: raw samples to stdout, or a WAV that appears whole at
    ``output`` once the last chunk is in (with ``timestamps``, its JSON beside it, the same)."""
    written = Written()
    log = TimestampLog() if timestamps else None
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(_audio_sink(output))
        writer: AudioWriter | None = None
        for part in parts:
            if writer is None:
                writer = AudioWriter(sink, part.sample_rate, fmt, raw=output == STDOUT)
                written.sample_rate, written.first_audio = part.sample_rate, part.latency
            writer.write(part.audio)
            if output == STDOUT:
                sink.flush()
            written.chunks += 1
            if log is not None:
                log.add(libs, part)
            if on_chunk is not None:
                on_chunk(part)
        if writer is None:
            raise OutputError("nothing was synthesized, so nothing was written")
        writer.close()  # the WAV's sizes, before the rename makes it visible
        written.samples, written.clipped = writer.samples, writer.clipped
        if timestamps is not None and log is not None:
            tmp = stack.enter_context(atomic_path(timestamps, suffix=".json"))
            doc = log.document(written.samples)
            tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    return written
