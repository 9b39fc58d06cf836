"""Synthesis from the compiled buckets: ``KokoroTVM.from_manifest(...).synthesize(phonemes)``.

The data flow is ``KModel.forward_with_tokens`` split at its two length axes:
duration predictor (token bucket) -> host alignment (numpy) -> text encoder (token bucket) ->
decoder (frame bucket) -> crop. Each chunk is padded to the smallest bucket that fits; the
libraries return the full bucket and we crop to the real length.

Long input (see ``chunking``): a phoneme string longer than the largest token bucket is cut at
punctuation or word boundaries as kokoro's ``KPipeline`` does. A chunk whose predicted frames
exceed the largest frame bucket is cut again, at the best boundary before the point where its
cumulative durations fill the bucket, and each piece is re-predicted (durations depend on the
whole chunk) until every piece fits. Frames are never cut: the decoder's BiLSTM and norms see
the whole utterance. Each chunk is therefore exactly a kokoro utterance, and chunks are
concatenated as kokoro's pipeline output is (``chunking.join``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import alignment, chunking, voices
from .. import artifacts as A
from ..errors import KokoroTVMError
from ..config import load_model_config
from ..spec import SAMPLE_RATE, samples_per_frame
from .library import ComponentWeights, CompiledComponent, check_toolchain, find_entry, pick_target, read_manifest


class BucketError(KokoroTVMError, ValueError):
    """No built bucket can hold the input, even after splitting."""


@dataclass
class Chunk:
    """One utterance as the compiled components saw it; enough to replay it in eager kokoro."""

    phonemes: str
    input_ids: np.ndarray  # [T], with the boundary token 0 at both ends
    durations: np.ndarray  # [T] frames per token (after ``speed``)
    style: np.ndarray  # [1, 2 * style_dim]: the voice-pack row for this chunk's length
    token_bucket: int
    frame_bucket: int = 0
    rand_ini: np.ndarray | None = None  # decoder draws: [1, harmonics]
    noise: np.ndarray | None = None  # [1, frames * samples_per_frame, harmonics]
    audio: np.ndarray | None = None  # this chunk's audio before ``join``
    seconds: float = 0.0  # compute time spent on this chunk
    d: np.ndarray | None = field(default=None, repr=False)  # duration predictor's d, [1, C, T]

    @property
    def tokens(self) -> int:
        return int(self.input_ids.size)

    @property
    def frames(self) -> int:
        return int(self.durations.sum())


@dataclass
class Synthesis:
    audio: np.ndarray  # float32, mono
    chunks: list[Chunk]
    seconds: float  # wall time of the whole call
    sample_rate: int = SAMPLE_RATE

    @property
    def audio_seconds(self) -> float:
        return self.audio.size / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""
        return self.seconds / max(self.audio_seconds, 1e-9)


Progress = Callable[[int, int, Chunk], None]  # (chunks done, chunks total, chunk just decoded)


class KokoroTVM:
    """Verified, lazily loaded libraries of one target, and the host code between them."""

    def __init__(self, root: Path, manifest: dict[str, Any], target: str):
        self.root, self.manifest, self.target = Path(root), manifest, target
        self.cfg = load_model_config(manifest["model"]["config"])
        self.vocab: dict[str, int] = self.cfg["vocab"]
        self.samples_per_frame = samples_per_frame(self.cfg)
        self.style_width = 2 * self.cfg["style_dim"]
        entries = [e for e in manifest["libraries"] if e["target"] == target]
        self.buckets = {c: sorted(e["bucket"] for e in entries if e["component"] == c)
                        for c in ("duration", "text_encoder", "decoder")}
        missing = [c for c, b in self.buckets.items() if not b]
        if missing:
            raise A.ArtifactError(f"target {target!r} has no library for {missing}; run `dvc repro`")
        self.token_buckets = sorted(set(self.buckets["duration"]) & set(self.buckets["text_encoder"]))
        self.frame_buckets = self.buckets["decoder"]
        self._weights: dict[str, ComponentWeights] = {}
        self._libs: dict[tuple[str, int], CompiledComponent] = {}

    @classmethod
    def from_manifest(cls, path: str | Path = A.ROOT, target: str | None = None,
                      num_threads: int | None = None) -> "KokoroTVM":
        """Open an artifact directory (or its ``manifest.json``) for one target.

        ``target=None`` picks the built target with the richest ISA this CPU runs. Nothing is
        loaded yet: each library is verified (sha256) and loaded on first use; the toolchain is
        checked here, before any.
        """
        path = Path(path)
        root = path.parent if path.name == "manifest.json" else path
        manifest = read_manifest(root)
        check_toolchain(manifest)
        if num_threads:
            os.environ["TVM_NUM_THREADS"] = str(num_threads)
        else:  # TVM alone would use half the cores
            os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
        return cls(root, manifest, pick_target(manifest, target))

    # -- libraries -------------------------------------------------------------------------
    def library(self, component: str, bucket: int) -> CompiledComponent:
        """The VM for one bucket, created on first use; weights are loaded once per component."""
        key = (component, bucket)
        if key not in self._libs:
            entry = find_entry(self.manifest, component, bucket, self.target)
            if component not in self._weights:
                self._weights[component] = ComponentWeights(self.root, self.manifest["weights"][component])
            self._libs[key] = CompiledComponent(self.root, entry, self._weights[component])
        return self._libs[key]

    def bucket(self, axis: str, n: int) -> int:
        buckets = self.token_buckets if axis == "tokens" else self.frame_buckets
        fits = [b for b in buckets if b >= n]
        if not fits:
            raise BucketError(f"{n} {axis} exceed the largest {axis} bucket {buckets[-1]}")
        return fits[0]

    # -- inputs ----------------------------------------------------------------------------
    def voice_pack(self, voice: str | Path | np.ndarray | None, seed: int = 0) -> np.ndarray:
        """A checked [N, 1, W] pack: a voice spec (``voices.resolve``: file, registry name, blend),
        an array, or (None) a seeded random style."""
        if voice is None:
            return voices.random_style(seed, self.style_width)
        if isinstance(voice, (str, Path)):
            return voices.resolve(voice, self.style_width)
        return voices.check_pack(np.asarray(voice), self.style_width)

    # -- planning: token components only -------------------------------------------------
    def plan(self, phonemes: str, voice: Any = None, speed: float = 1.0, seed: int = 0,
             unknown: str = "warn") -> list[Chunk]:
        """Split the input into chunks whose tokens and predicted frames fit built buckets."""
        if not (isinstance(speed, (int, float)) and np.isfinite(speed) and speed > 0):
            raise chunking.InputError(f"speed must be a positive number, got {speed!r}")
        pack = self.voice_pack(voice, seed)
        text = chunking.clean_phonemes(phonemes, self.vocab, unknown)
        max_phonemes = self.token_buckets[-1] - 2
        if max_phonemes < 1:
            raise BucketError(f"the largest token bucket ({self.token_buckets[-1]}) cannot hold one phoneme "
                              "plus 2 boundary tokens; add a bigger bucket to 'buckets.tokens' and run `dvc repro`")
        pending = chunking.split_phonemes(text, max_phonemes)
        chunks: list[Chunk] = []
        while pending:
            chunk = self.predict_durations(pending.pop(0), pack, speed)
            if chunk.frames <= self.frame_buckets[-1]:
                chunks.append(chunk)
                continue
            pending[:0] = self._split_for_frames(chunk, speed)
        return chunks

    def predict_durations(self, phonemes: str, pack: np.ndarray, speed: float) -> Chunk:
        ids = chunking.token_ids(phonemes, self.vocab)
        t, tb = ids.size, self.bucket("tokens", ids.size)
        style = voices.style_for(pack, len(phonemes))
        t0 = time.perf_counter()
        padded = np.zeros((1, tb), np.int64)
        padded[0, :t] = ids
        dur, d = self.library("duration", tb)(padded, np.array([t]), style[:, self.style_width // 2:])
        durations = alignment.frame_durations(dur[0, :t], speed)
        return Chunk(phonemes, ids, durations, style, tb, seconds=time.perf_counter() - t0,
                     d=np.ascontiguousarray(d[:, :t, :].transpose(0, 2, 1)))

    def _split_for_frames(self, chunk: Chunk, speed: float) -> list[str]:
        """Cut where the cumulative frames would overflow the largest frame bucket."""
        limit = self.frame_buckets[-1]
        inner = np.cumsum(chunk.durations[1:-1])  # frames after phoneme i (boundary tokens aside)
        room = limit - chunk.durations[0] - chunk.durations[-1]
        n = int(np.searchsorted(inner, room, side="right"))  # phonemes that fit
        if len(chunk.phonemes) <= 1:
            raise BucketError(f"one phoneme ({chunk.phonemes!r}) needs {chunk.frames} frames at speed {speed}, "
                              f"more than the largest frame bucket {limit}; add a bigger bucket to "
                              "'buckets.frames' (and `dvc repro`) or raise the speed")
        k = chunking.cut_point(chunk.phonemes, max(1, min(n, len(chunk.phonemes) - 1)))
        return [p for p in (chunk.phonemes[:k].strip(), chunk.phonemes[k:].strip()) if p]

    # -- synthesis -------------------------------------------------------------------------
    def decode(self, chunk: Chunk, rng: np.random.Generator) -> np.ndarray:
        """Text encoder, alignment and decoder for one planned chunk; fills its draws and audio."""
        t0 = time.perf_counter()
        t, m = chunk.tokens, chunk.frames
        tb, fb = chunk.token_bucket, self.bucket("frames", m)
        padded = np.zeros((1, tb), np.int64)
        padded[0, :t] = chunk.input_ids
        (t_en,) = self.library("text_encoder", tb)(padded, np.array([t]))
        dec = self.library("decoder", fb)
        harmonics = next(s["shape"][1] for s in dec.entry["inputs"] if s["name"] == "rand_ini")
        spf = self.samples_per_frame
        chunk.frame_bucket = fb
        chunk.rand_ini = rng.random((1, harmonics), dtype=np.float32)
        chunk.noise = rng.standard_normal((1, m * spf, harmonics), dtype=np.float32)
        noise = np.zeros((1, fb * spf, harmonics), np.float32)
        noise[:, : m * spf] = chunk.noise
        en = alignment.expand(chunk.d, chunk.durations, fb)
        asr = alignment.expand(t_en[:, :, :t], chunk.durations, fb)
        (audio,) = dec(en, asr, np.array([m]), chunk.style, chunk.rand_ini, noise)
        chunk.audio = audio.reshape(-1)[: m * spf].astype(np.float32)
        chunk.seconds += time.perf_counter() - t0
        return chunk.audio

    def synthesize(self, phonemes: str, voice: Any = None, speed: float = 1.0, seed: int = 0,
                   unknown: str = "warn", progress: Progress | None = None) -> Synthesis:
        """Phonemes (misaki/kokoro alphabet) to float32 audio at 24 kHz.

        ``voice``: a Kokoro voice pack path/array, or None for a style seeded by ``seed``;
        ``seed`` also seeds the decoder's random draws. ``unknown``: ``warn`` drops symbols
        outside the vocabulary (kokoro's behaviour), ``error`` refuses them.
        """
        t0 = time.perf_counter()
        chunks = self.plan(phonemes, voice, speed, seed, unknown)
        return self.render(chunks, seed, progress, started=t0)

    def render(self, chunks: list[Chunk], seed: int = 0, progress: Progress | None = None,
               started: float | None = None) -> Synthesis:
        """Decode planned chunks (draws seeded by ``seed``, in chunk order) and join them."""
        t0 = time.perf_counter() if started is None else started
        rng = np.random.default_rng(seed)
        for i, chunk in enumerate(chunks):
            self.decode(chunk, rng)
            if progress is not None:
                progress(i + 1, len(chunks), chunk)
        audio = chunking.join([c.audio for c in chunks])
        return Synthesis(audio, chunks, time.perf_counter() - t0)

    def info(self) -> dict[str, Any]:
        return describe(self.manifest, self.root)


def describe(manifest: dict[str, Any], root: Path) -> dict[str, Any]:
    """What ``kokoro-tvm info`` prints: model, toolchain, and libraries per target (no loading)."""
    libs: dict[str, list[dict[str, Any]]] = {}
    for e in manifest["libraries"]:
        libs.setdefault(e["target"], []).append(
            {"component": e["component"], "bucket": e["bucket"], "bytes": e["bytes"],
             "present": (Path(root) / e["path"]).exists(), "validation": e.get("validation", {})})
    return {"artifacts": str(root), "model": manifest["model"], "toolchain": manifest["toolchain"],
            "targets": {t: manifest["targets"].get(t, {}) for t in sorted(libs)},
            "buckets": manifest["buckets"],
            "weights": {c: w["bytes"] for c, w in manifest["weights"].items()},
            "libraries": libs}
