"""One response's stream as the scheduler holds it, what its workers hand the response, and the
limits the scheduler keeps every stream within (``SchedulerConfig``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..runtime.chunking import MAX_PHONEMES

if TYPE_CHECKING:
    from .cost_model import CostModel

log = logging.getLogger("kokoro_tvm.server")

#: seconds of audio a paced stream may have made beyond what its client has received, before
#: it makes one more chunk: ahead of a listener's playback by more than any chunk's compute
AHEAD_SECONDS = 4.0


@dataclass(frozen=True)
class SchedulerConfig:
    """How many workers run chunks, how far a stream runs ahead of its client, and what
    admission promises (``admission.py``); the server's options of the same names."""

    workers: int = 1
    threads_per_worker: int = 1  # TVM threads in each worker's pool
    max_ahead: int = 2  # chunks a stream may run ahead of its consumer
    ahead_seconds: float = AHEAD_SECONDS  # audio a paced stream may run ahead of its client
    max_streams: int = 32
    first_audio: float = 0.5  # seconds: admission keeps every new stream's first audio within
    first_slack: float = 0.0  # seconds after arrival a first chunk is due (its EDF deadline)
    load_factor: float = 0.9  # share of the workers' time admission may plan to use
    admission: bool = True
    #: phoneme limits of a stream's first chunks, the last for all later ones (the cost model's
    #: guess of a chunk's audio before chunks at its place ran); kokoro's one limit by default,
    #: as the server's whole sentences have
    chunk_limits: tuple[int, ...] = (MAX_PHONEMES,)


@dataclass
class Item:
    """What a worker hands a stream's consumer: a chunk, the end, or an error."""

    part: Any = None  # runtime ChunkAudio
    error: BaseException | None = None
    compute: float = 0.0  # seconds this chunk took

    @property
    def end(self) -> bool:
        return self.part is None and self.error is None


@dataclass(eq=False)
class Stream:
    """One response's runtime stream and its place in the schedule (fields below ``arrival``
    change under the scheduler's lock only)."""

    id: int
    chars: int  # input characters: remaining audio is estimated from those not yet spoken
    speed: float
    loop: asyncio.AbstractEventLoop
    items: asyncio.Queue
    arrival: float  # time.monotonic()
    gen: Iterator[Any] | None = None
    first_chars: int = 0  # input characters of its first chunk, from its text (0: unknown)
    chars_done: int = 0
    produced: int = 0
    taken: int = 0
    audio_out: float = 0.0  # seconds of audio produced
    playback_start: float | None = None  # when the first chunk was produced
    running: bool = False
    finished: bool = False
    cancelled: bool = False
    token: int = 0  # invalidates older heap entries of this stream
    run_started: float = 0.0
    paced: bool = False  # its response reports what its client has received (``received``)
    received: float = 0.0  # seconds of its audio the client has received
    delivery: Any = None  # the response's ``delivery.Delivery``, which tells it

    def deadline(self, first_slack: float) -> float:
        """When the next chunk must be out: when the audio produced so far has played."""
        if self.playback_start is None:
            return self.arrival + first_slack
        return self.playback_start + self.audio_out

    def buffered(self, now: float) -> float:
        """Seconds of audio produced but not yet played (by a listener who started at the
        first chunk and plays in real time); negative when it ran dry."""
        if self.playback_start is None:
            return 0.0
        return self.playback_start + self.audio_out - now

    def next_audio(self, model: CostModel) -> float:
        """Audio seconds its next chunk may hold: the first by its own text's first chunk, a
        later one by what is left of its text, up to a full chunk. A chunk's length is known
        only once the runtime plans it; rated shorter than it is, it would start too late."""
        left = max(0, self.chars - self.chars_done) * model.per_char / self.speed
        if self.produced == 0:
            return min(left, model.first_chunk_audio(self.first_chars, self.speed))
        return min(left, model.limit_audio(self.produced) / self.speed)

    def advance(self) -> Item:
        """One ``next()`` of the runtime stream (one chunk planned and decoded), timed."""
        t0 = time.monotonic()
        try:
            part = next(self.gen)
        except StopIteration:
            return Item()
        except Exception as e:  # delivered to the request, which reports it
            return Item(error=e, compute=time.monotonic() - t0)
        return Item(part=part, compute=time.monotonic() - t0)

    def close_gen(self) -> None:
        """Close the runtime stream, once."""
        if self.gen is not None:
            try:
                self.gen.close()
            except Exception:  # a runtime stream's cleanup must not take a worker down
                log.exception("closing a cancelled stream")
            self.gen = None

    def idle(self) -> bool:
        """Prepared and neither running nor ended: a worker could take its next chunk."""
        return self.gen is not None and not (self.running or self.finished or self.cancelled)

    def runnable(self, config: SchedulerConfig) -> bool:
        """Idle, and within how far ``config`` lets it run ahead of its consumer and client."""
        return (
            self.idle()
            and self.produced - self.taken < config.max_ahead
            and (not self.paced or self.audio_out - self.received < config.ahead_seconds)
        )
