"""WAV files with the standard library only: 16-bit PCM or 32-bit IEEE float, whole or streamed.

The header is written with ``struct`` (stdlib ``wave`` writes PCM only and needs the length up
front): a 44-byte PCM header, or for float (format tag 3) the same plus a ``fact`` chunk, so
players, soundfile and ``wave`` read them. Streaming writes the header first with unknown sizes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import KokoroTVMError

FORMATS = ("pcm16", "float32")
_PCM, _FLOAT = 1, 3
_UNKNOWN = 0xFFFFFFFF  # size of a streamed WAV before it is patched (or forever, on a pipe)


class AudioError(KokoroTVMError, ValueError):
    """Audio that cannot be written as asked (a format this writer lacks, samples not finite)."""


class AudioWriter:
    """Mono float audio written as it comes: a WAV header first, then samples, then (when the
    output is seekable) the header's sizes patched; or raw little-endian samples (``raw``).

    A stream that cannot seek keeps 0xFFFFFFFF sizes, which players read as "until the end".
    """

    def __init__(self, out: BinaryIO, sample_rate: int, fmt: str = "pcm16", raw: bool = False):
        if fmt not in FORMATS:
            raise AudioError(f"unknown WAV format {fmt!r}; choose one of {list(FORMATS)}")
        self.out, self.sample_rate, self.fmt, self.raw = out, sample_rate, fmt, raw
        self.samples = self.clipped = 0
        if not raw:
            self.out.write(self._header(_UNKNOWN))

    @property
    def width(self) -> int:
        return 2 if self.fmt == "pcm16" else 4

    def _header(self, samples: int) -> bytes:
        data = _UNKNOWN if samples == _UNKNOWN else samples * self.width
        if self.fmt == "pcm16":
            fmt_chunk = struct.pack(
                "<HHIIHH", _PCM, 1, self.sample_rate, self.sample_rate * 2, 2, 16
            )
            extra = b""
        else:
            fmt_chunk = struct.pack(
                "<HHIIHH", _FLOAT, 1, self.sample_rate, self.sample_rate * 4, 4, 32
            )
            extra = b"fact" + struct.pack("<II", 4, samples)
        head = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + extra
        riff = _UNKNOWN if samples == _UNKNOWN else len(head) + 8 + data
        return b"RIFF" + struct.pack("<I", riff) + head + b"data" + struct.pack("<I", data)

    def write(self, audio: np.ndarray) -> None:
        x = np.asarray(audio, np.float32).reshape(-1)
        if not np.isfinite(x).all():
            raise AudioError(
                "the synthesized audio contains NaN or inf, so it was not written: the libraries "
                "or weights are broken; check them with `kokoro-tvm info` and rebuild (`dvc repro`)"
            )
        if self.fmt == "pcm16":
            self.clipped += int(np.count_nonzero(np.abs(x) > 1.0))
            data = np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        else:
            data = x.astype("<f4").tobytes()
        self.out.write(data)
        self.out.flush()
        self.samples += x.size

    def close(self) -> None:
        """Patch the header's sizes when the output can seek back to it."""
        if self.raw:
            return
        try:
            seekable = self.out.seekable()
        except (AttributeError, OSError):
            seekable = False
        if seekable:
            end = self.out.tell()
            self.out.seek(0)
            self.out.write(self._header(self.samples))
            self.out.seek(end)
        self.out.flush()


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int, fmt: str = "pcm16") -> int:
    """Write mono audio; returns how many samples were clipped to [-1, 1] (PCM only)."""
    x = np.asarray(audio, np.float32).reshape(-1)
    if not np.isfinite(x).all():
        raise AudioError(
            "the synthesized audio contains NaN or inf, so it was not written: the libraries "
            "or weights are broken; check them with `kokoro-tvm info` and rebuild (`dvc repro`)"
        )
    with open(path, "wb") as f:
        w = AudioWriter(f, sample_rate, fmt)
        w.write(x)
        w.close()
    return w.clipped


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 audio in [-1, 1] and the sample rate, from a PCM16 or float32 WAV."""
    raw = Path(path).read_bytes()
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise ValueError(f"{path} is not a WAV file")
    pos, fmt, rate, channels, bits, data = 12, None, 0, 0, 0, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], struct.unpack("<I", raw[pos + 4 : pos + 8])[0]
        body = raw[pos + 8 : pos + 8 + size]
        if cid == b"fmt ":
            fmt, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
        elif cid == b"data":
            data = body
        pos += 8 + size + (size & 1)
    if data is None or fmt is None or channels != 1:
        raise ValueError(f"{path}: expected a mono WAV with fmt and data chunks")
    if (fmt, bits) == (_PCM, 16):
        return np.frombuffer(data, "<i2").astype(np.float32) / 32767.0, rate
    if (fmt, bits) == (_FLOAT, 32):
        return np.frombuffer(data, "<f4").astype(np.float32), rate
    raise ValueError(f"{path}: unsupported WAV encoding (format tag {fmt}, {bits} bits)")
