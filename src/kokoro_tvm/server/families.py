"""The metric families the scheduler and the HTTP layer export, with the help texts ``GET
/metrics`` shows (docs/serving.md lists them): declared apart from the code that counts, so that
one page says what each number means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .cost_model import CostModel
from .metrics import Metrics
from .streams import SchedulerConfig


class SchedulerState(Protocol):
    """What the scheduler's gauges read (``scheduler.Scheduler``)."""

    busy: int
    config: SchedulerConfig
    model: CostModel

    def queue_depth(self) -> int: ...
    def open_streams(self) -> int: ...
    def margin(self) -> float: ...


def declare_scheduler(m: Metrics, state: SchedulerState) -> None:
    """The workers' and admission's counters, and gauges read from ``state`` when the page is
    rendered."""
    m.counter("chunks_total", "Chunks synthesized.")
    m.counter("chunks_discarded_total", "Chunks finished after their stream was cancelled.")
    m.counter("compute_seconds_total", "Worker seconds spent synthesizing chunks.")
    m.counter("audio_seconds_total", "Seconds of audio synthesized.")
    m.counter(
        "late_chunks_total",
        "Chunks produced after the audio sent before them had played out (a listener "
        "playing in real time from the first chunk ran dry).",
    )
    m.counter("late_seconds_total", "Seconds by which late chunks missed their deadline.")
    m.counter("streams_cancelled_total", "Streams ended before their last chunk.", labelled=True)
    m.counter(
        "requests_rejected_total",
        "Requests refused by admission control or limits.",
        labelled=True,
    )
    m.histogram("chunk_compute_seconds", "Compute seconds per chunk.")
    m.gauge("queue_depth", "Streams whose next chunk waits for a worker.", state.queue_depth)
    m.gauge("streams_open", "Streams open (admitted and not yet closed).", state.open_streams)
    m.gauge("workers_busy", "Workers synthesizing a chunk now.", lambda: state.busy)
    m.gauge("workers", "Worker threads.", lambda: state.config.workers)
    m.gauge(
        "real_time_factor",
        "Compute seconds per second of audio for one worker, as the cost model has learned "
        "it (chunk cost = c0 + r * audio; this is r).",
        lambda: state.model.r,
    )
    m.gauge("chunk_overhead_seconds", "The cost model's c0.", lambda: state.model.c0)
    m.gauge(
        "cost_model_margin",
        "How much slower than the cost model predicts recent chunks ran (their 95th "
        "percentile; 0 before enough chunks): admission plans first audio with it.",
        state.margin,
    )


def declare_http(m: Metrics) -> None:
    """What the HTTP layer counts: requests (``middleware.CountRequests``) and the speech
    streams' first audio and ends (``streaming.py``)."""
    m.counter("requests_total", "HTTP requests by path and status.", labelled=True)
    m.histogram(
        "time_to_first_audio_seconds",
        "Seconds from a speech request's arrival to its first audio bytes leaving.",
    )
    m.counter("streams_completed_total", "Speech streams that sent their last chunk.")
    m.counter("stream_errors_total", "Speech streams that failed after they started.")


def declare_model(m: Metrics, precision: Mapping[str, str]) -> None:
    """What the loaded libraries compute in: a series per component (``KokoroTVM.precision``)."""
    m.info(
        "precision_info",
        "The precision each component's libraries compute in (fp32, bf16), as the server "
        "picked it at start (--precision; docs/precision.md): 1 per component.",
        [{"component": c, "precision": p} for c, p in precision.items()],
    )
