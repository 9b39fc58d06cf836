"""WAV files with the standard library only: 16-bit PCM (``wave``) or 32-bit IEEE float.

stdlib ``wave`` writes and reads PCM only; float WAV (format tag 3) is a 44-byte RIFF header
plus a ``fact`` chunk, written here with ``struct`` so players and soundfile read it.
"""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np

FORMATS = ("pcm16", "float32")
_PCM, _FLOAT = 1, 3


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int, fmt: str = "pcm16") -> int:
    """Write mono audio; returns how many samples were clipped to [-1, 1] (PCM only)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown WAV format {fmt!r}; choose one of {list(FORMATS)}")
    x = np.asarray(audio, np.float32).reshape(-1)
    if not np.isfinite(x).all():
        raise ValueError("audio contains NaN or inf; refusing to write it")
    path = Path(path)
    if fmt == "pcm16":
        clipped = int(np.count_nonzero(np.abs(x) > 1.0))
        pcm = np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2")
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(sample_rate)
            w.writeframes(pcm.tobytes())
        return clipped
    data = x.astype("<f4").tobytes()
    fmt_chunk = struct.pack("<HHIIHH", _FLOAT, 1, sample_rate, sample_rate * 4, 4, 32)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk
            + b"fact" + struct.pack("<II", 4, x.size) + b"data" + struct.pack("<I", len(data)) + data)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return 0


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 audio in [-1, 1] and the sample rate, from a PCM16 or float32 WAV."""
    raw = Path(path).read_bytes()
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise ValueError(f"{path} is not a WAV file")
    pos, fmt, rate, channels, bits, data = 12, None, 0, 0, 0, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos:pos + 4], struct.unpack("<I", raw[pos + 4:pos + 8])[0]
        body = raw[pos + 8:pos + 8 + size]
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
