"""What one call asks of the runtime, checked once at the API edge and handed down whole.

``SpeechOptions`` is the voice pack, speed, seed, unknown-symbol policy and ``Cuts``; the
planner, the stream and the server's engine read it and never change it. ``Cuts`` is where a
stream may be cut beyond kokoro's own utterances, and what those cuts keep of kokoro's silences.

Why cuts are named profiles, not free knobs: kokoro's prosody is per utterance (every utterance
ends the way a sentence ends), so each cut kokoro would not make is heard. The profiles are the
measured choices (``eval.prosody`` and the ``bench_cuts`` stage hold each against kokoro's
whole sentence; docs/runtime.md shows the table):

* ``kokoro``: kokoro's utterances exactly (``KPipeline``'s chunks), kokoro's silences;
* ``sentences`` (``synth --stream`` and ``serve``): kokoro's utterances, the first of them ending
  at its first sentence end, where the speech already breaks, so the first audio waits for one
  sentence rather than a whole paragraph (a run-on, with no mark where kokoro's cuts could end
  it, at a word about a sentence in: ``chunking.first_cut``); the silence before the first word
  cut from the decoded audio (a wait, not part of the speech; the model still sees kokoro's
  input);
* ``fast`` and ``fast-shared``: short chunks cut inside sentences (the first at its first clause
  mark or a few words, then capped), with kokoro's pauses at those cuts shortened: first audio
  from a fraction of a sentence, at a cost in melody, pauses and words that the table states.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

import numpy as np

from ..errors import InputError

First = Literal["none", "sentence", "clause"]
FIRSTS: tuple[str, ...] = ("none", "sentence", "clause")
UNKNOWN = ("warn", "error")  # what ``unknown`` may say about symbols outside the vocabulary


@dataclass(frozen=True)
class Cuts:
    """Where a stream is cut beyond kokoro's utterances (see the module docstring).

    ``first``: where the first chunk may end early (its first sentence end, its first clause
    mark within ``chunking.FIRST_CLAUSE_LIMIT`` phonemes, or nowhere). ``limits``: phonemes per
    chunk, the i-th for the i-th chunk and the last for every later one (empty: kokoro's 510).
    ``cut_pauses``: frames each boundary token keeps at a cut inside a sentence (None: kokoro's
    sentence pause). ``lead_in``: frames of silence kept before the first word (None: kokoro's).
    """

    name: str
    first: First = "none"
    limits: tuple[int, ...] = ()
    cut_pauses: int | None = None
    lead_in: int | None = None

    def __post_init__(self) -> None:
        if self.first not in FIRSTS:
            raise InputError(f"cuts.first must be one of {FIRSTS}, got {self.first!r}")
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.limits):
            raise InputError(
                f"chunk_limits must be positive numbers of phonemes (e.g. (16, 24)), got "
                f"{self.limits!r}"
            )
        for what, frames in (("cut_pauses", self.cut_pauses), ("lead_in", self.lead_in)):
            if frames is not None and (
                isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1
            ):
                raise InputError(
                    f"{what} must be None (kokoro's pause) or the frames (>= 1) its boundary "
                    f"token keeps, got {frames!r}"
                )

    def limit(self, index: int) -> int | None:
        """The most phonemes of the ``index``-th chunk (None: no cap beyond kokoro's)."""
        return self.limits[min(index, len(self.limits) - 1)] if self.limits else None


KOKORO = Cuts("kokoro")
SENTENCES = Cuts("sentences", first="sentence", lead_in=2)
#: a listener alone (``synth --stream``): the first chunk short, the next longer, then capped
FAST = Cuts("fast", first="clause", limits=(16, 60, 150), cut_pauses=1, lead_in=2)
#: listeners sharing the cores (``serve``): every chunk after the first capped at 24 phonemes
FAST_SHARED = Cuts("fast-shared", first="clause", limits=(16, 24, 24), cut_pauses=1, lead_in=2)
PROFILES: dict[str, Cuts] = {c.name: c for c in (KOKORO, SENTENCES, FAST, FAST_SHARED)}
#: what a listener who plays audio as it arrives gets unless they ask for another profile
LISTENER = SENTENCES


def cuts_of(cuts: str | Cuts) -> Cuts:
    """A profile by name, or the given ``Cuts``; an unknown name is an ``InputError``."""
    if isinstance(cuts, Cuts):
        return cuts
    found = PROFILES.get(cuts) if isinstance(cuts, str) else None
    if found is None:
        raise InputError(f"cuts must be one of {', '.join(PROFILES)} (or a Cuts), got {cuts!r}")
    return found


def check_speed(speed: float) -> float:
    if isinstance(speed, bool) or not (
        isinstance(speed, (int, float)) and np.isfinite(speed) and speed > 0
    ):
        raise InputError(f"speed must be a positive number, got {speed!r}")
    return float(speed)


def check_seed(seed: int) -> int:
    """numpy's generators take any non-negative whole number; anything else is the caller's."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(
            f"seed must be a whole number >= 0 (it seeds the decoder's noise), got {seed!r}"
        )
    return int(seed)


def check_unknown(unknown: str) -> str:
    if unknown not in UNKNOWN:
        raise InputError(f"unknown must be one of {UNKNOWN}, got {unknown!r}")
    return unknown


@dataclass(frozen=True, eq=False)
class SpeechOptions:
    """One call's options, each checked on construction.

    ``pack``: the voice pack [N, 1, W] (row ``len(phonemes) - 1`` styles an utterance);
    ``seed``: the decoder's draws, in chunk order; ``unknown``: ``warn`` drops symbols outside the
    vocabulary as kokoro does, ``error`` refuses them; ``keep_draws``: each streamed chunk keeps
    the decoder's draws, to replay it in eager kokoro (a stream otherwise holds one chunk's
    audio at a time). ``voice``: the name the pack was resolved from, if any (text is read in its
    language unless another is asked for)."""

    FIELDS: ClassVar[frozenset[str]] = frozenset({"speed", "seed", "unknown", "cuts", "keep_draws"})

    pack: np.ndarray = field(repr=False)
    voice: str | None = None
    speed: float = 1.0
    seed: int = 0
    unknown: str = "warn"
    cuts: Cuts = KOKORO
    keep_draws: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "speed", check_speed(self.speed))
        object.__setattr__(self, "seed", check_seed(self.seed))
        object.__setattr__(self, "cuts", cuts_of(self.cuts))
        check_unknown(self.unknown)

    def but(self, **changes) -> SpeechOptions:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)
