"""Synthesis from the compiled buckets: ``KokoroTVM.from_manifest(...).synthesize(phonemes)``.

The data flow is ``KModel.forward_with_tokens`` split at its two length axes:
duration predictor (token bucket) -> host alignment (numpy) -> text encoder (token bucket) ->
decoder (frame bucket). Each chunk takes the smallest bucket that fits. A bounded library (the
default, ``shapes: bounded``) gets its inputs at the valid length and computes only that; a
padded one gets them zero-padded to its bucket, computes the whole bucket, and the runtime crops.

Chunks are kokoro's own utterances (``chunking``): phonemes up to 510 symbols are one, longer
input and text are grouped as ``KPipeline`` groups them. Only an utterance that does not fit the
largest built bucket is cut further (once per call a warning says so and names the bucket): more
tokens than the largest token bucket holds are regrouped at its size; predicted frames past the
largest frame bucket are cut at the best boundary before the point where the cumulative
durations fill it, and each piece is re-predicted (durations depend on the whole utterance)
until every piece fits. Frames are never cut: the decoder's BiLSTM and norms see the whole
utterance. Chunks are concatenated as kokoro's pipeline output is (``seams``).

``stream`` plans and decodes one chunk at a time, so the first audio is out after the first
chunk; ``synthesize`` is the stream joined.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts as A
from ..config import load_model_config
from ..errors import KokoroTVMError
from ..spec import SAMPLE_RATE, samples_per_frame
from . import alignment, chunking, seams, timestamps, voices
from .chunking import Utterance
from .library import (
    CompiledComponent,
    ComponentWeights,
    check_toolchain,
    find_entry,
    explain_pick,
    pick_target,
    read_manifest,
)
from .timestamps import Timestamp


class BucketError(KokoroTVMError, ValueError):
    """No built bucket can hold the input, even after splitting."""


class BucketSplitWarning(UserWarning):
    """An utterance did not fit the largest built bucket and was cut beyond kokoro's chunking."""


@dataclass
class Chunk:
    """One utterance as the compiled components saw it; enough to replay it in eager kokoro."""

    phonemes: str  # kokoro's ps: the voice row is pack[len(phonemes) - 1]
    input_ids: np.ndarray  # [T], with the boundary token 0 at both ends
    durations: np.ndarray  # [T] frames per token (after ``speed``)
    style: np.ndarray  # [1, 2 * style_dim]: the voice-pack row for this chunk's length
    token_bucket: int
    frame_bucket: int = 0
    rand_ini: np.ndarray | None = None  # decoder draws: [1, harmonics]
    noise: np.ndarray | None = None  # [1, frames * samples_per_frame, harmonics]
    audio: np.ndarray | None = None  # this chunk's audio before ``seams.join``
    seconds: float = 0.0  # compute time spent on this chunk
    d: np.ndarray | None = field(default=None, repr=False)  # duration predictor's d, [1, C, T]
    words: list = field(default_factory=list, repr=False)  # the utterance's tokens (misaki MToken / Token)
    text: str = ""  # the utterance's text (graphemes), or its phonemes for phoneme input
    offset: int = 0  # samples of audio before this chunk in the joined output

    @property
    def tokens(self) -> int:
        return int(self.input_ids.size)

    @property
    def frames(self) -> int:
        return int(self.durations.sum())


@dataclass
class ChunkAudio:
    """One decoded chunk of a stream: play ``audio`` next; the stream's pieces concatenate to
    exactly ``Synthesis.audio``."""

    index: int
    chunk: Chunk
    audio: np.ndarray  # float32: the chunk's audio, seams faded (``seams.segment``)
    last: bool  # no chunk follows
    latency: float  # seconds from the call until this chunk was ready
    tokens: list[Timestamp]  # per model token, seconds from the start of the stream
    words: list[Timestamp]  # per word (kokoro's join_timestamps), seconds from the start
    sample_rate: int = SAMPLE_RATE

    @property
    def offset(self) -> int:
        return self.chunk.offset


@dataclass
class Synthesis:
    audio: np.ndarray  # float32, mono
    chunks: list[Chunk]
    seconds: float  # wall time of the whole call
    sample_rate: int = SAMPLE_RATE
    tokens: list[Timestamp] = field(default_factory=list, repr=False)  # per model token, tiling the audio
    words: list[Timestamp] = field(default_factory=list, repr=False)  # per word, as kokoro times them

    @property
    def audio_seconds(self) -> float:
        return self.audio.size / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""
        return self.seconds / max(self.audio_seconds, 1e-9)


Progress = Callable[[int, int, Chunk], None]  # (chunks done, chunks known so far, chunk just decoded)
Source = str | Sequence[Utterance]  # phonemes, or utterances (``g2p.text_utterances`` for text)


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
                      num_threads: int | None = None) -> KokoroTVM:
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
    def utterances(self, source: Source, unknown: str = "warn", first_clause: bool = False) -> list[Utterance]:
        """kokoro's utterances for phonemes (``chunking.phoneme_utterances``), or the given ones;
        symbols outside the vocabulary are warned about (once) or refused."""
        if isinstance(source, str):
            utts = chunking.phoneme_utterances(source, first_clause)
        else:
            utts = [u for u in source if u.phonemes]
            if not utts:
                raise chunking.InputError("empty input: nothing to say")
        chunking.check_symbols("".join(u.phonemes for u in utts), self.vocab, unknown)
        return utts

    def _check_speed(self, speed: float) -> None:
        if not (isinstance(speed, (int, float)) and np.isfinite(speed) and speed > 0):
            raise chunking.InputError(f"speed must be a positive number, got {speed!r}")

    def plan(self, phonemes: Source, voice: Any = None, speed: float = 1.0, seed: int = 0,
             unknown: str = "warn", first_clause: bool = False) -> list[Chunk]:
        """Every chunk with its predicted durations, each fitting a built bucket (see ``chunks``)."""
        self._check_speed(speed)
        pending = self.utterances(phonemes, unknown, first_clause)
        return list(self.chunks(pending, self.voice_pack(voice, seed), speed))

    def chunks(self, pending: list[Utterance], pack: np.ndarray, speed: float) -> Iterator[Chunk]:
        """Predict durations utterance by utterance, consuming ``pending``; an utterance that does
        not fit the largest buckets is cut and its pieces put back first. Lazy, so a stream
        starts after its first chunk; ``pending`` tells whether another chunk follows."""
        max_phonemes = self.token_buckets[-1] - 2
        if max_phonemes < 1:
            raise BucketError(f"the largest token bucket ({self.token_buckets[-1]}) cannot hold one phoneme "
                              "plus 2 boundary tokens; add a bigger bucket to 'buckets.tokens' and run `dvc repro`")
        warned = False
        while pending:
            utt = pending.pop(0)
            n = chunking.token_ids(utt.phonemes, self.vocab).size - 2
            if n > max_phonemes:
                warned = warned or self._warn_split(utt, f"{n + 2} tokens", "tokens", self.token_buckets[-1])
                pending[:0] = chunking.split_utterance(utt, max_phonemes)
                continue
            chunk = self.predict_durations(utt, pack, speed)
            if chunk.frames <= self.frame_buckets[-1]:
                yield chunk
                continue
            warned = warned or self._warn_split(utt, f"{chunk.frames} frames at speed {speed}", "frames",
                                                self.frame_buckets[-1])
            pending[:0] = self._split_for_frames(chunk, utt, speed)

    @staticmethod
    def _warn_split(utt: Utterance, need: str, axis: str, bucket: int) -> bool:
        """Say once per call that the audio now differs from kokoro's, and how to avoid it."""
        if len(utt.phonemes) > chunking.MAX_PHONEMES:
            why = f"kokoro itself would truncate this {len(utt.phonemes)}-phoneme utterance to 510"
        else:
            why = (f"add a bigger bucket to 'buckets.{axis}' in params.yaml (and run `dvc repro`) to synthesize "
                   "it as kokoro does")
        warnings.warn(f"an utterance of {len(utt.phonemes)} phonemes needs {need}, more than the largest {axis[:-1]} "
                      f"bucket {bucket}: it is cut into shorter utterances than kokoro's, which changes the "
                      f"audio near the cuts; {why}", BucketSplitWarning, stacklevel=4)
        return True

    def predict_durations(self, utt: Utterance | str, pack: np.ndarray, speed: float) -> Chunk:
        if isinstance(utt, str):
            utt = Utterance(utt, chunking.phoneme_tokens(utt), utt)
        ids = chunking.token_ids(utt.phonemes, self.vocab)
        t, tb = ids.size, self.bucket("tokens", ids.size)
        style = voices.style_for(pack, len(utt.phonemes))
        t0 = time.perf_counter()
        lib = self.library("duration", tb)
        dur, d = lib(_token_input(ids, lib), np.array([t]), style[:, self.style_width // 2:])
        durations = alignment.frame_durations(dur[0, :t], speed)
        return Chunk(utt.phonemes, ids, durations, style, tb, seconds=time.perf_counter() - t0,
                     d=np.ascontiguousarray(d[:, :t, :].transpose(0, 2, 1)), words=list(utt.tokens),
                     text=utt.text)

    def _split_for_frames(self, chunk: Chunk, utt: Utterance, speed: float) -> list[Utterance]:
        """Cut where the cumulative frames would overflow the largest frame bucket."""
        limit = self.frame_buckets[-1]
        inner = np.cumsum(chunk.durations[1:-1])  # frames after phoneme i (boundary tokens aside)
        room = limit - chunk.durations[0] - chunk.durations[-1]
        n = int(np.searchsorted(inner, room, side="right"))  # phonemes that fit
        if chunk.tokens <= 3:
            raise BucketError(f"one phoneme ({chunk.phonemes!r}) needs {chunk.frames} frames at speed {speed}, "
                              f"more than the largest frame bucket {limit}; add a bigger bucket to "
                              "'buckets.frames' (and `dvc repro`) or raise the speed")
        known = [i for i, c in enumerate(utt.phonemes) if c in self.vocab]
        symbols = known[max(1, min(n, len(known) - 1)) - 1] + 1  # of ps, through the n-th known one
        pieces = chunking.split_utterance(utt, max(1, min(symbols, len(utt.phonemes) - 1)))
        if len(pieces) < 2:
            return pieces
        rest = [t for p in pieces[1:] for t in p.tokens]
        return [pieces[0], Utterance(chunking.tokens_to_ps(rest), rest, chunking.tokens_to_text(rest))]

    # -- synthesis -------------------------------------------------------------------------
    def decode(self, chunk: Chunk, rng: np.random.Generator) -> np.ndarray:
        """Text encoder, alignment and decoder for one planned chunk; fills its draws and audio."""
        t0 = time.perf_counter()
        t, m = chunk.tokens, chunk.frames
        tb, fb = chunk.token_bucket, self.bucket("frames", m)
        te = self.library("text_encoder", tb)
        (t_en,) = te(_token_input(chunk.input_ids, te), np.array([t]))
        dec = self.library("decoder", fb)
        harmonics = next(s["shape"][1] for s in dec.entry["inputs"] if s["name"] == "rand_ini")
        spf = self.samples_per_frame
        chunk.frame_bucket = fb
        chunk.rand_ini = rng.random((1, harmonics), dtype=np.float32)
        chunk.noise = rng.standard_normal((1, m * spf, harmonics), dtype=np.float32)
        # a bounded decoder takes the valid length as is; a padded one its whole bucket
        pad = None if dec.bounded else fb
        noise = chunk.noise
        if pad is not None:
            noise = np.zeros((1, fb * spf, harmonics), np.float32)
            noise[:, : m * spf] = chunk.noise
        en = alignment.expand(chunk.d, chunk.durations, pad)
        asr = alignment.expand(t_en[:, :, :t], chunk.durations, pad)
        (audio,) = dec(en, asr, np.array([m]), chunk.style, chunk.rand_ini, noise)
        chunk.audio = audio.reshape(-1)[: m * spf].astype(np.float32)
        chunk.seconds += time.perf_counter() - t0
        return chunk.audio

    def stream(self, phonemes: Source, voice: Any = None, speed: float = 1.0, seed: int = 0,
               unknown: str = "warn", first_clause: bool = False) -> Iterator[ChunkAudio]:
        """Yield each chunk's audio and timestamps as soon as it is decoded.

        ``phonemes``: misaki/kokoro phonemes, or utterances (``g2p.text_utterances`` for text).
        ``first_clause``: cut the first chunk at the first clause mark (``,;:.!?—…``) within
        ``chunking.FIRST_CLAUSE_LIMIT`` phonemes, for earlier first audio (not kokoro's chunking).
        Draws are seeded by ``seed`` in chunk order, so the audio equals ``synthesize``'s.
        """
        t0 = time.perf_counter()
        self._check_speed(speed)
        pack = self.voice_pack(voice, seed)
        pending = self.utterances(phonemes, unknown, first_clause)
        rng = np.random.default_rng(seed)
        offset = 0
        for i, chunk in enumerate(self.chunks(pending, pack, speed)):
            self.decode(chunk, rng)
            chunk.offset, last = offset, not pending
            offset += chunk.audio.size
            yield ChunkAudio(i, chunk, seams.segment(chunk.audio, i == 0, last), last,
                             time.perf_counter() - t0, self.token_times(chunk, i), self.word_times(chunk, i))

    def synthesize(self, phonemes: Source, voice: Any = None, speed: float = 1.0, seed: int = 0,
                   unknown: str = "warn", progress: Progress | None = None,
                   first_clause: bool = False) -> Synthesis:
        """Phonemes (misaki/kokoro alphabet) or utterances to float32 audio at 24 kHz.

        ``voice``: a voice spec (``voices.resolve``), a pack array, or None for a style seeded by
        ``seed``; ``seed`` also seeds the decoder's random draws. ``unknown``: ``warn`` drops
        symbols outside the vocabulary (kokoro's behaviour), ``error`` refuses them.
        """
        t0 = time.perf_counter()
        parts = []
        for part in self.stream(phonemes, voice, speed, seed, unknown, first_clause):
            parts.append(part)
            if progress is not None:
                progress(part.index + 1, part.index + 1 + (0 if part.last else 1), part.chunk)
        return Synthesis(np.concatenate([p.audio for p in parts]), [p.chunk for p in parts],
                         time.perf_counter() - t0, tokens=[t for p in parts for t in p.tokens],
                         words=self.all_word_times([p.chunk for p in parts]))

    def render(self, chunks: list[Chunk], seed: int = 0, progress: Progress | None = None,
               started: float | None = None) -> Synthesis:
        """Decode planned chunks (draws seeded by ``seed``, in chunk order) and join them."""
        t0 = time.perf_counter() if started is None else started
        rng = np.random.default_rng(seed)
        offset = 0
        for i, chunk in enumerate(chunks):
            self.decode(chunk, rng)
            chunk.offset, offset = offset, offset + chunk.audio.size
            if progress is not None:
                progress(i + 1, len(chunks), chunk)
        audio = seams.join([c.audio for c in chunks])
        return Synthesis(audio, chunks, time.perf_counter() - t0,
                         tokens=[t for i, c in enumerate(chunks) for t in self.token_times(c, i)],
                         words=self.all_word_times(chunks))

    # -- timestamps ------------------------------------------------------------------------
    def token_times(self, chunk: Chunk, index: int) -> list[Timestamp]:
        """Each model token's span in the joined audio (``chunk.offset`` must be set)."""
        return timestamps.token_times(chunk.phonemes, chunk.durations, self.vocab, chunk.offset,
                                      self.samples_per_frame, SAMPLE_RATE, index)

    def word_times(self, chunk: Chunk, index: int) -> list[Timestamp]:
        """Each word's span as kokoro's ``join_timestamps`` gives it, in the joined audio (a word
        cut across two chunks, only ever by a bucket overflow, shows in both)."""
        return timestamps.merge_pieces(self._piece_times(chunk, index), chunk.words)

    def _piece_times(self, chunk: Chunk, index: int) -> list[Timestamp]:
        per_symbol = timestamps.symbol_durations(chunk.phonemes, chunk.durations, self.vocab)
        return timestamps.word_times(chunk.words, per_symbol, chunk.offset, self.samples_per_frame,
                                     SAMPLE_RATE, index)

    def all_word_times(self, chunks: list[Chunk]) -> list[Timestamp]:
        """Word spans over all chunks, pieces of a word cut between chunks merged."""
        return timestamps.merge_pieces([w for i, c in enumerate(chunks) for w in self._piece_times(c, i)],
                                       [t for c in chunks for t in c.words])

    def info(self) -> dict[str, Any]:
        return describe(self.manifest, self.root)


def _token_input(ids: np.ndarray, lib: CompiledComponent) -> np.ndarray:
    """[1, T] token ids as ``lib`` takes them: as is (bounded), or zero-padded to its bucket."""
    if lib.bounded:
        return np.asarray(ids, np.int64).reshape(1, -1)
    padded = np.zeros((1, lib.bucket), np.int64)
    padded[0, : ids.size] = ids
    return padded


def describe(manifest: dict[str, Any], root: Path) -> dict[str, Any]:
    """What ``kokoro-tvm info`` prints: model, toolchain, and libraries per target (no loading)."""
    libs: dict[str, list[dict[str, Any]]] = {}
    for e in manifest["libraries"]:
        libs.setdefault(e["target"], []).append(
            {"component": e["component"], "bucket": e["bucket"], "bytes": e["bytes"],
             "present": (Path(root) / e["path"]).exists(), "validation": e.get("validation", {})})
    try:
        picked, why = explain_pick(manifest)
    except A.ArtifactError as e:  # none runs here: info still lists what was built
        picked, why = None, [str(e)]
    return {"artifacts": str(root), "model": manifest["model"], "toolchain": manifest["toolchain"],
            "targets": {t: manifest["targets"].get(t, {}) for t in sorted(libs)},
            "picked_target": picked, "pick_reasons": why, "unvalidated": manifest.get("unvalidated", {}),
            "buckets": manifest["buckets"],
            "weights": {c: w["bytes"] for c, w in manifest["weights"].items()},
            "libraries": libs}
