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

Pauses at cuts inside a sentence (``options.Cuts.cut_pauses``): kokoro wraps every utterance in a
boundary token, and the model gives the first one about a third of a second of silence and the last
one a frame or more: between two sentences a natural pause, inside one ("Please leave the package
at ... the front door") a pause where a listener expects none. So where a chunk does not end its
sentence and another follows, the boundary tokens on both sides of that cut keep at most
``cut_pauses`` frames. The durations are shortened before decoding, not the audio after it: the
decoder makes no frames that would be thrown away (the first chunk is heard that much sooner),
and word times follow from the durations as always. Sentence ends keep kokoro's pause, a comma
its own (it is a token with its duration, inside the chunk). Only at a cut the runtime makes: a
chunk kokoro's chunking would not make is the runtime's input to the model anyway, and its
boundary token's duration one more such choice.

``Cuts.lead_in`` shortens the silence before the first word, which a listener waits through: given
to the model the same way when the first chunk is itself cut inside its sentence, but cut from
the decoded audio (``Chunk.lead_trim``) when the first chunk ends where kokoro's chunking could:
the model's rendition of a whole utterance depends on the length of the silence it starts with
(its F0 predictor and norms run over all frames), so a shorter lead given to the model would
change every word of a sentence the runtime did not cut.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from . import alignment, chunking, voices
from .chunking import Utterance
from .component import CompiledComponent
from .libraries import BucketError, Libraries
from .options import SpeechOptions

Source = str | Iterable[Utterance]  # phonemes, or utterances (``g2p.utterances`` for text)


class BucketSplitWarning(UserWarning):
    """An utterance did not fit the largest built bucket and was cut beyond kokoro's chunking."""


@dataclass(frozen=True)
class Chunk:
    """One utterance as planned for the compiled components: enough to decode it, and to replay
    it in eager kokoro."""

    phonemes: str  # kokoro's ps: the voice row is pack[len(phonemes) - 1]
    input_ids: np.ndarray  # [T], with the boundary token 0 at both ends
    durations: np.ndarray  # [T] frames per token (after ``speed``, and the cuts' pauses)
    style: np.ndarray  # [1, 2 * style_dim]: the voice-pack row for this chunk's length
    token_bucket: int
    d: np.ndarray = field(repr=False)  # duration predictor's d, [1, C, T]
    words: tuple = field(default=(), repr=False)  # the utterance's tokens, when words are timed
    text: str = ""  # the utterance's text (graphemes), or its phonemes for phoneme input
    lead_trim: int = 0  # frames of silence to cut from the decoded audio's start (``lead_in``)
    seconds: float = 0.0  # compute time spent planning it (the duration predictor)

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


class Pending:
    """The utterances still to plan: those a cut put back first, then the source's, pulled one
    at a time. ``bool(pending)`` looks one utterance ahead (the G2P may run for it), so the
    planner knows whether another chunk follows without reading the rest of the input.

    Each utterance pulled is checked as ``utterances`` checks a whole input: symbols outside the
    vocabulary are warned about (once per symbol) or refused (``options.unknown``), and an
    utterance with no symbol of the vocabulary is skipped (warned about once, counted at the
    end); ``checked``: the source's symbols were checked already. The first speakable utterance
    is pulled on construction, so an input with none fails before any chunk is asked for."""

    def __init__(
        self,
        libs: Libraries,
        source: Iterable[Utterance],
        options: SpeechOptions,
        checked: bool = False,
    ):
        self._ahead: deque[Utterance] = deque()
        self._source: Iterator[Utterance] | None = iter(source)
        self._vocab, self._unknown, self._checked = libs.vocab, options.unknown, checked
        self._reported: set[str] = set()
        self._skipped: list[str] = []
        self._said = False  # any utterance with phonemes, speakable or not
        if not self:
            raise chunking.InputError(
                "no phoneme of the input is in the Kokoro vocabulary; pass phonemes (misaki "
                "output) with --phonemes, or text with --text"
                if self._said
                else "empty input: nothing to say"
            )

    def __bool__(self) -> bool:
        return bool(self._ahead) or self._pull()

    def pop(self) -> Utterance:
        if not self:
            raise IndexError("no utterance left")
        return self._ahead.popleft()

    def put_back(self, utts: list[Utterance]) -> None:
        """``utts`` to plan next, in their order."""
        self._ahead.extendleft(reversed(utts))

    def _pull(self) -> bool:
        if self._source is None:
            return False
        for u in self._source:
            if u.phonemes:
                self._said = True
                if self._speakable(u):
                    self._ahead.append(u)
                    return True
        self._source = None
        if len(self._skipped) > 1:
            warnings.warn(
                f"{len(self._skipped)} utterance(s) in all hold no symbol of the Kokoro "
                "vocabulary and were skipped",
                stacklevel=4,
            )
        return False

    def _speakable(self, u: Utterance) -> bool:
        bad = {c for c in u.phonemes if c not in self._vocab and c not in chunking.SILENT_MARKS}
        known = any(c in self._vocab for c in u.phonemes)
        if bad and not self._checked and (self._unknown == "error" or not bad <= self._reported):
            if self._unknown == "error" or known:  # (one of unknown symbols alone: skipped below)
                chunking.check_symbols(u.phonemes, self._vocab, self._unknown)  # warns, or raises
        self._reported |= bad
        if known:
            return True
        self._skipped.append(u.text or u.phonemes)
        if len(self._skipped) == 1:
            warnings.warn(
                f"utterance(s) hold no symbol of the Kokoro vocabulary and were skipped: "
                f"{self._skipped[0][:30]!r} (any more are skipped too, and counted at the end)",
                stacklevel=4,
            )
        return False


def utterances(libs: Libraries, source: Source, options: SpeechOptions) -> Pending:
    """What ``chunks`` plans: kokoro's utterances for phonemes (``chunking.phoneme_utterances``,
    the first ending where ``options.cuts`` lets it), or the given ones, pulled as they are
    needed (``Pending``); symbols outside the vocabulary are warned about or refused
    (``options.unknown``): for phonemes all at once, for utterances as each is pulled.

    An utterance left with no symbol of the vocabulary would be only the two boundary tokens,
    shorter than any library takes: it is skipped with a warning (it holds nothing to say)."""
    if not isinstance(source, str):
        return Pending(libs, source, options)
    utts = chunking.phoneme_utterances(source, options.cuts.first)
    chunking.check_symbols("".join(u.phonemes for u in utts), libs.vocab, options.unknown)
    known = [any(c in libs.vocab for c in u.phonemes) for u in utts]
    speakable = [u for u, k in zip(utts, known) if k]
    if len(speakable) < len(utts):
        skipped = [u.text or u.phonemes for u, k in zip(utts, known) if not k]
        warnings.warn(
            f"{len(skipped)} utterance(s) hold no symbol of the Kokoro vocabulary and were "
            f"skipped: {', '.join(repr(t[:30]) for t in skipped[:3])}",
            stacklevel=3,
        )
    return Pending(libs, speakable, options, checked=True)


def shorten_pauses(chunk: Chunk, head: int | None, tail: int | None) -> Chunk:
    """``chunk`` with at most ``head`` frames for the boundary token before its first phoneme
    and ``tail`` after its last (None: as predicted)."""
    durations = chunk.durations.copy()
    if head is not None:
        durations[0] = min(durations[0], head)
    if tail is not None:
        durations[-1] = min(durations[-1], tail)
    return replace(chunk, durations=durations)


def chunks(libs: Libraries, pending: Pending, options: SpeechOptions) -> Iterator[Chunk]:
    """Predict durations utterance by utterance, consuming ``pending``; an utterance that does
    not fit the largest buckets is cut and its pieces put back first. Lazy, so a stream starts
    after its first chunk; ``pending`` tells whether another chunk follows (``Pending``: one
    utterance of lookahead). ``options.cuts``:
    the most phonemes of each chunk, and the frames the pauses at cuts inside a sentence and the
    silence before the first word keep (module docstring)."""
    cuts = options.cuts
    max_phonemes = libs.token_buckets[-1] - 2
    if max_phonemes < 1:
        raise BucketError(
            f"the largest token bucket ({libs.token_buckets[-1]}) cannot hold one phoneme "
            "plus 2 boundary tokens; add a bigger bucket to 'buckets.tokens' and run `dvc repro`"
        )
    warned = False
    cut_before = False  # the chunk yielded last did not end its sentence
    ended_early = False  # the runtime ended the chunk yielded last where kokoro would go on
    yielded = 0
    while pending:
        utt = pending.pop()
        cap = cuts.limit(yielded)
        if cap is not None:
            utt, rest = chunking.cut_first(utt, cap)
            if rest is not None:
                pending.put_back(_speakable(libs, [rest]))
            if not _speakable(libs, [utt]):
                continue
        n = chunking.token_ids(utt.phonemes, libs.vocab).size - 2
        if n > max_phonemes:
            warned = warned or _warn_split(utt, f"{n + 2} tokens", "tokens", libs.token_buckets[-1])
            pending.put_back(_speakable(libs, chunking.split_utterance(utt, max_phonemes)))
            continue
        chunk = predict_durations(libs, utt, options.pack, options.speed)
        cut_after = bool(pending) and not chunking.ends_sentence(utt.phonemes)
        head = cuts.cut_pauses if cut_before else None
        # the silence a chunk starts with is a wait before the first word, and after a sentence
        # the runtime ended early, more pause than kokoro's (its own end is the sentence's)
        lead = cuts.lead_in is not None and (not yielded or (ended_early and not cut_before))
        if lead:
            if not yielded and cut_after:  # a piece of a sentence: the runtime's input already
                head = cuts.lead_in
            else:
                trim = max(0, int(chunk.durations[0]) - cuts.lead_in)
                chunk = replace(chunk, lead_trim=trim)
        chunk = shorten_pauses(chunk, head, cuts.cut_pauses if cut_after else None)
        if chunk.n_frames <= libs.frame_buckets[-1]:
            cut_before, ended_early = cut_after, utt.cut_early
            yielded += 1
            yield chunk
            continue
        warned = warned or _warn_split(
            utt,
            f"{chunk.n_frames} frames at speed {options.speed}",
            "frames",
            libs.frame_buckets[-1],
        )
        pending.put_back(_speakable(libs, _split_for_frames(libs, chunk, utt, options.speed)))


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
            f"add a bigger bucket to 'buckets.{axis}' in params.yaml (and run `dvc repro`) to "
            "synthesize it as kokoro does"
        )
    warnings.warn(
        f"an utterance of {len(utt.phonemes)} phonemes needs {need}, more than the largest "
        f"{axis[:-1]} bucket {bucket}: it is cut into shorter utterances than kokoro's, which "
        f"changes the audio near the cuts; {why}",
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
        d=np.ascontiguousarray(d[:, :t, :].transpose(0, 2, 1)),
        words=tuple(utt.tokens) if utt.timed_words else (),
        text=utt.text,
        seconds=time.perf_counter() - t0,
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
