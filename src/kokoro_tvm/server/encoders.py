"""One encoder per response, whose bytes leave after every chunk.

``pcm`` (OpenAI's: 24 kHz, 16-bit signed little-endian, mono) and ``wav`` are written by the
runtime's own ``AudioWriter``, so their samples are exactly what ``kokoro-tvm synth`` writes; a
streamed WAV cannot know its length, so its sizes are 0xFFFFFFFF ("until the end"), as a WAV
written to a pipe. The compressed formats go through one PyAV (FFmpeg) encoder and muxer per
response, writing into a sink that is emptied after each chunk:

* ``mp3`` (LAME) without a Xing header: a streamed file cannot go back to fill in its frame
  count, and a header that says 0 frames is worse than none;
* ``opus`` in Ogg, with 20 ms pages: the Ogg muxer otherwise holds its pages back, so nothing
  would leave before the end (libopus takes 24 kHz as it is);
* ``aac`` in ADTS frames, the stream form of AAC;
* ``flac``: lossless, so it decodes to the same samples as ``pcm``.

Every encoder is fed the same 16-bit samples (the runtime's rounding), so the formats differ
only by their codec. Lossy codecs add a start delay (mp3 1105 samples, aac 1024) that a
streamed file has no header to announce; Ogg/Opus announces its pre-skip, so it has none.
"""

from __future__ import annotations

import struct
from typing import Protocol

import numpy as np

from ..spec import SAMPLE_RATE

#: response_format -> media type (OpenAI's formats)
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
#: container, codec, muxer options, bit rate (None: the codec's own, or lossless)
_AV = {
    "mp3": ("mp3", "libmp3lame", {"write_xing": "0"}, 64_000),
    "opus": ("ogg", "libopus", {"page_duration": "20000"}, 64_000),
    "aac": ("adts", "aac", {}, 64_000),
    "flac": ("flac", "flac", {}, None),
}


class Encoder(Protocol):
    media_type: str

    def encode(self, audio: np.ndarray) -> bytes:
        """This chunk's audio (float32) in; every byte the format can give out now."""

    def finish(self) -> bytes:
        """The rest of the stream (codec delay flushed, trailers)."""


class _Sink:
    """A write-only, non-seekable file for PyAV (as a socket is)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def write(self, data: bytes) -> int:
        self.buf += data
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


class WavEncoder:
    """``wav`` and ``pcm`` through the runtime's ``AudioWriter`` (``raw`` for pcm)."""

    def __init__(self, fmt: str, sample_rate: int = SAMPLE_RATE):
        from ..runtime.wav import AudioWriter

        self.media_type = MEDIA_TYPES[fmt]
        self.sink = _Sink()
        self.writer = AudioWriter(self.sink, sample_rate, "pcm16", raw=fmt == "pcm")

    def encode(self, audio: np.ndarray) -> bytes:
        self.writer.write(audio)
        return self.sink.take()

    def finish(self) -> bytes:
        return self.sink.take()


class AVEncoder:
    """``mp3``, ``opus``, ``aac`` or ``flac`` through one PyAV encoder and muxer."""

    def __init__(self, fmt: str, sample_rate: int = SAMPLE_RATE):
        import av

        container, codec, options, bit_rate = _AV[fmt]
        self.media_type = MEDIA_TYPES[fmt]
        self.sample_rate = sample_rate
        self.sink = _Sink()
        self.out = av.open(self.sink, mode="w", format=container, options=options)
        self.stream = self.out.add_stream(codec, rate=sample_rate, layout="mono")
        if bit_rate:
            self.stream.bit_rate = bit_rate
        # the codec's own sample format (mp3 s32p, aac fltp, opus/flac s16), from our s16
        wanted = self.stream.codec_context.codec.audio_formats[0].name
        self.resampler = av.AudioResampler(format=wanted, layout="mono", rate=sample_rate)
        self.pts = 0

    def encode(self, audio: np.ndarray) -> bytes:
        import av

        pcm = pcm16(audio)
        if pcm.size:
            frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
            frame.sample_rate = self.sample_rate
            frame.pts = self.pts
            self.pts += pcm.size
            for converted in self.resampler.resample(frame):
                self._mux(converted)
        return self.sink.take()

    def finish(self) -> bytes:
        for converted in self.resampler.resample(None):
            self._mux(converted)
        self._mux(None)
        self.out.close()
        return self.sink.take()

    def _mux(self, frame) -> None:
        for packet in self.stream.encode(frame):
            self.out.mux(packet)


def pcm16(audio: np.ndarray) -> np.ndarray:
    """float32 -> int16 exactly as the runtime's WAV writer rounds (clipped to [-1, 1])."""
    x = np.asarray(audio, np.float32).reshape(-1)
    return np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)


class Scaled:
    """Kokoro-FastAPI's ``volume_multiplier``: every sample times ``gain`` before the encoder,
    which clips to [-1, 1] as it always does."""

    def __init__(self, inner: Encoder, gain: float):
        self.inner, self.gain = inner, np.float32(gain)
        self.media_type = inner.media_type

    def encode(self, audio: np.ndarray) -> bytes:
        return self.inner.encode(np.asarray(audio, np.float32) * self.gain)

    def finish(self) -> bytes:
        return self.inner.finish()


def encoder(fmt: str, sample_rate: int = SAMPLE_RATE, volume: float = 1.0) -> Encoder:
    """A new encoder for one response in ``fmt`` (one of ``MEDIA_TYPES``), its samples times
    ``volume``."""
    enc: Encoder = (
        WavEncoder(fmt, sample_rate) if fmt in ("wav", "pcm") else AVEncoder(fmt, sample_rate)
    )
    return enc if volume == 1.0 else Scaled(enc, volume)


def whole_wav(data: bytes) -> bytes:
    """A streamed WAV (sizes 0xFFFFFFFF, "until the end") with its real sizes, once the whole
    file is at hand: a file saved to disk should say how long it is."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return data
    out, pos = bytearray(data), 12
    while pos + 8 <= len(out):
        chunk, size = bytes(out[pos : pos + 4]), struct.unpack_from("<I", out, pos + 4)[0]
        if chunk == b"data":  # the last chunk the writer writes
            struct.pack_into("<I", out, pos + 4, len(out) - pos - 8)
            struct.pack_into("<I", out, 4, len(out) - 8)
            return bytes(out)
        pos += 8 + size + size % 2
    return data
