"""Planning: kokoro's utterances, each as a chunk with its predicted durations that fits a built
bucket. Only the token components run here (the duration predictor).

Chunks are kokoro's own utterances (``chunking``): phonemes up to 510 symbols are one, longer
input and text are grouped as ``KPipeline`` groups them. Only an utterance that does not fit the
largest built bucket is cut further (once per call a warning says so and names the bucket): more
tokens than the largest token bucket holds are regrouped at its size; predicted frames past the
largest frame bucket are cut at the best boundary before the point where the cumulative
durations fill it, and each piece is re-predicted (durations depend on the whole utterance)
until every piece fits. Frames are never cut: the decoder's BiLSTM and norms see the whole
utterance.

Pauses at cuts inside a sentence (``cut_pauses``): kokoro wraps every utterance in a boundary
token, and the model gives the first one about a third of a second of silence and the last one
a frame or more: between two sentences a natural pause, inside one ("Please leave the package
at ... the front door") a pause where a listener expects none. So where a chunk does not end its
sentence and another follows, the boundary tokens on both sides of that cut keep at most
``cut_pauses`` frames. The durations are shortened before decoding, not the audio after it: the
decoder makes no frames that would be thrown away (the first chunk is heard that much sooner),
and word times follow from the durations as always. Sentence ends keep kokoro's pause, a comma
its own (it is a token with its duration, inside the chunk). Only at a cut the runtime makes: a
chunk kokoro's chunking would not make is the runtime's input to the model anyway, and its
boundary token's duration one more such choice.

``lead_in`` shortens the silence before the first word, which a listener waits through: given
to the model the same way when the first chunk is itself cut inside its sentence, but cut from
the decoded audio (``Chunk.lead_trim``) when the first chunk ends where kokoro's chunking could:
the model's rendition of a whole utterance depends on the length of the silence it starts with
(its F0 predictor and norms run over all frames), so a shorter lead given to the model would
change every word of a sentence the runtime did not cut.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import alignment, chunking, voices
from .chunking import Utterance
from .component import CompiledComponent
from .libraries import BucketError, Libraries

Source = str | Sequence[Utterance]  # phonemes, or utterances (``g2p.text_utterances`` for text)


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
    words: list = field(
        default_factory=list, repr=False
    )  # the utterance's tokens (misaki MToken / Token)
    text: str = ""  # the utterance's text (graphemes), or its phonemes for phoneme input
    offset: int = 0  # samples of audio before this chunk in the joined output
    samples: int = 0  # samples of this chunk's audio, once decoded (and trimmed)
    lead_trim: int = 0  # frames of silence cut from the decoded audio's start (``lead_in``)

    @property
    def n_tokens(self) -> int:
        """Model tokens, the two boundary tokens included."""
        return int(self.input_ids.size)

    @property
    def n_frames(self) -> int:
        """Decoder frames: the predicted durations' sum."""
        return int(self.durations.sum())

    @property
    def heard_durations(self) -> np.ndarray:
        """Frames per token of the audio as it plays: the durations, less the silence trimmed
        from the start (timestamps are of this)."""
        if not self.lead_trim:
            return self.durations
        out = self.durations.copy()
        out[0] -= self.lead_trim
        return out


def check_speed(speed: float) -> None:
    if isinstance(speed, bool) or not (
        isinstance(speed, (int, float)) and np.isfinite(speed) and speed > 0
    ):
        raise chunking.InputError(f"speed must be a positive number, got {speed!r}")


def check_seed(seed: int) -> None:
    """numpy's generators take any non-negative whole number; anything else is the caller's."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise chunking.InputError(
            f"seed must be a whole number >= 0 (it seeds the decoder's noise), got {seed!r}"
        )


#: what ``unknown`` may say about symbols outside the vocabulary
UNKNOWN = ("warn", "error")


def check_unknown(unknown: str) -> None:
    if unknown not in UNKNOWN:
        raise chunking.InputError(f"unknown must be one of {UNKNOWN}, got {unknown!r}")


def utterances(
    libs: Libraries, source: Source, unknown: str = "warn", first_clause: bool = False
) -> list[Utterance]:
    """kokoro's utterances for phonemes (``chunking.phoneme_utterances``), or the given ones;
    symbols outside the vocabulary are warned about (once) or refused.

    An utterance left with no symbol of the vocabulary would be only the two boundary tokens,
    shorter than any library takes: it is skipped with a warning (it holds nothing to say)."""
    if isinstance(source, str):
        utts = chunking.phoneme_utterances(source, first_clause)
    else:
        utts = [u for u in source if u.phonemes]
        if not utts:
            raise chunking.InputError("empty input: nothing to say")
    chunking.check_symbols("".join(u.phonemes for u in utts), libs.vocab, unknown)
    known = [any(c in libs.vocab for c in u.phonemes) for u in utts]
    speakable = [u for u, k in zip(utts, known) if k]
    if len(speakable) < len(utts):
        skipped = [u.text or u.phonemes for u, k in zip(utts, known) if not k]
        warnings.warn(
            f"{len(skipped)} utterance(s) hold no symbol of the Kokoro vocabulary and were "
            f"skipped: {', '.join(repr(t[:30]) for t in skipped[:3])}",
            stacklevel=3,
        )
    return speakable


def check_pause(frames: int | None, what: str) -> None:
    if frames is not None and (
        isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1
    ):
        raise chunking.InputError(
            f"{what} must be None (kokoro's pause) or the frames (>= 1) its boundary token "
            f"keeps, got {frames!r}"
        )


def shorten_pauses(chunk: Chunk, head: int | None, tail: int | None) -> None:
    """At most ``head`` frames for the boundary token before the chunk's first phoneme and
    ``tail`` after its last (None: as predicted)."""
    durations = chunk.durations.copy()
    if head is not None:
        durations[0] = min(durations[0], head)
    if tail is not None:
        durations[-1] = min(durations[-1], tail)
    chunk.durations = durations


def chunks(
    libs: Libraries,
    pending: list[Utterance],
    pack: np.ndarray,
    speed: float,
    cut_pauses: int | None = None,
    lead_in: int | None = None,
    limit: Callable[[int], int] | None = None,
) -> Iterator[Chunk]:
    """Predict durations utterance by utterance, consuming ``pending``; an utterance that does
    not fit the largest buckets is cut and its pieces put back first. Lazy, so a stream starts
    after its first chunk; ``pending`` tells whether another chunk follows. ``cut_pauses``:
    frames kept by the pauses at cuts inside a sentence; ``lead_in``: by the silence before
    the first word (None: kokoro's; module docstring). ``limit``: the most phonemes of the
    i-th chunk, asked when it is planned (``chunking.cut_first``)."""
    check_pause(cut_pauses, "cut_pauses")
    check_pause(lead_in, "lead_in")
    max_phonemes = libs.token_buckets[-1] - 2
    if max_phonemes < 1:
        raise BucketError(
            f"the largest token bucket ({libs.token_buckets[-1]}) cannot hold one phoneme "
            "plus 2 boundary tokens; add a bigger bucket to 'buckets.tokens' and run `dvc repro`"
        )
    warned = False
    first = True
    cut_before = False  # the chunk yielded last did not end its sentence
    yielded = 0
    while pending:
        utt = pending.pop(0)
        if limit is not None:
            utt, rest = chunking.cut_first(utt, limit(yielded))
            if rest is not None:
                pending[:0] = _speakable(libs, [rest])
            if not _speakable(libs, [utt]):
                continue
        n = chunking.token_ids(utt.phonemes, libs.vocab).size - 2
        if n > max_phonemes:
            warned = warned or _warn_split(utt, f"{n + 2} tokens", "tokens", libs.token_buckets[-1])
            pending[:0] = _speakable(libs, chunking.split_utterance(utt, max_phonemes))
            continue
        chunk = predict_durations(libs, utt, pack, speed)
        cut_after = bool(pending) and not chunking.ends_sentence(utt.phonemes)
        head = cut_pauses if cut_before else None
        if first and lead_in is not None:
            if cut_after:  # a piece of a sentence: the runtime's input to the model already
                head = lead_in
            else:
                chunk.lead_trim = max(0, int(chunk.durations[0]) - lead_in)
        shorten_pauses(chunk, head, cut_pauses if cut_after else None)
        if chunk.n_frames <= libs.frame_buckets[-1]:
            first, cut_before = False, cut_after
            yielded += 1
            yield chunk
            continue
        warned = warned or _warn_split(
            utt, f"{chunk.n_frames} frames at speed {speed}", "frames", libs.frame_buckets[-1]
        )
        pending[:0] = _speakable(libs, _split_for_frames(libs, chunk, utt, speed))


def _speakable(libs: Libraries, pieces: list[Utterance]) -> list[Utterance]:
    """The pieces of a cut utterance that hold a symbol of the vocabulary (a piece of only
    unknown symbols would be the two boundary tokens alone)."""
    return [p for p in pieces if any(c in libs.vocab for c in p.phonemes)]


def _warn_split(utt: Utterance, need: str, axis: str, bucket: int) -> bool:
    """Say once per call that the audio now differs from kokoro's, and how to avoid it."""
    if len(utt.phonemes) > chunking.MAX_PHONEMES:
        why = f"kokoro itself would truncate this {len(utt.phonemes)}-phoneme utterance to 510"
    else:
        why = (
            f"add a bigger bucket to 'buckets.{axis}' in params.yaml (and run `dvc repro`) to synthesize "
            "it as kokoro does"
        )
    warnings.warn(
        f"an utterance of {len(utt.phonemes)} phonemes needs {need}, more than the largest {axis[:-1]} "
        f"bucket {bucket}: it is cut into shorter utterances than kokoro's, which changes the "
        f"audio near the cuts; {why}",
        BucketSplitWarning,
        stacklevel=5,
    )
    return True


def predict_durations(
    libs: Libraries, utt: Utterance | str, pack: np.ndarray, speed: float
) -> Chunk:
    """The duration predictor's frames per token (and its ``d``) for one utterance."""
    if isinstance(utt, str):
        utt = Utterance(utt, chunking.phoneme_tokens(utt), utt)
    ids = chunking.token_ids(utt.phonemes, libs.vocab)
    t, tb = ids.size, libs.bucket("tokens", ids.size)
    style = voices.style_for(pack, len(utt.phonemes))
    t0 = time.perf_counter()
    lib = libs.get("duration", tb)
    dur, d = lib(token_input(ids, lib), np.array([t]), style[:, libs.style_width // 2 :])
    durations = alignment.frame_durations(dur[0, :t], speed)
    return Chunk(
        utt.phonemes,
        ids,
        durations,
        style,
        tb,
        seconds=time.perf_counter() - t0,
        d=np.ascontiguousarray(d[:, :t, :].transpose(0, 2, 1)),
        words=list(utt.tokens) if utt.timed_words else [],
        text=utt.text,
    )


def _split_for_frames(
    libs: Libraries, chunk: Chunk, utt: Utterance, speed: float
) -> list[Utterance]:
    """Cut where the cumulative frames would overflow the largest frame bucket."""
    limit = libs.frame_buckets[-1]
    inner = np.cumsum(chunk.durations[1:-1])  # frames after phoneme i (boundary tokens aside)
    room = limit - chunk.durations[0] - chunk.durations[-1]
    n = int(np.searchsorted(inner, room, side="right"))  # phonemes that fit
    if chunk.n_tokens <= 3:
        raise BucketError(
            f"one phoneme ({chunk.phonemes!r}) needs {chunk.n_frames} frames at speed {speed}, "
            f"more than the largest frame bucket {limit}; add a bigger bucket to "
            "'buckets.frames' (and `dvc repro`) or raise the speed"
        )
    known = [i for i, c in enumerate(utt.phonemes) if c in libs.vocab]
    symbols = known[max(1, min(n, len(known) - 1)) - 1] + 1  # of ps, through the n-th known one
    pieces = chunking.split_utterance(utt, max(1, min(symbols, len(utt.phonemes) - 1)))
    if len(pieces) < 2:
        return pieces
    rest = [t for p in pieces[1:] for t in p.tokens]
    return [
        pieces[0],
        Utterance(
            chunking.tokens_to_ps(rest), rest, chunking.tokens_to_text(rest), utt.timed_words
        ),
    ]


def token_input(ids: np.ndarray, lib: CompiledComponent) -> np.ndarray:
    """[1, T] token ids as ``lib`` takes them: as is (bounded), or zero-padded to its bucket."""
    if lib.bounded:
        return np.asarray(ids, np.int64).reshape(1, -1)
    padded = np.zeros((1, lib.bucket), np.int64)
    padded[0, : ids.size] = ids
    return padded
