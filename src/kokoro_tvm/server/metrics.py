"""``GET /metrics`` in Prometheus' text format (version 0.0.4), without a client library.

Counters and histograms are updated by the workers and the request handlers under one lock;
gauges that describe the scheduler's state (queue depth, open streams, busy workers) are read
from it when the page is rendered, so they are never stale.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "kokoro_"
#: seconds: time to first audio and chunk compute times, around the 0.2-0.5 s that matters
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    return repr(float(x)) if x != int(x) or abs(x) > 2**53 else str(int(x))


@dataclass
class _Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()
    values: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)
    hist: dict[tuple[tuple[str, str], ...], list[float]] = field(default_factory=dict)


class Metrics:
    """The server's counters, histograms and gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def counter(self, name: str, help: str, labelled: bool = False) -> None:
        """A counter; one without labels is exported (as 0) from the start."""
        fam = _Family(PREFIX + name, "counter", help)
        if not labelled:
            fam.values[()] = 0.0
        self._families[name] = fam

    def histogram(self, name: str, help: str, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self._families[name] = _Family(PREFIX + name, "histogram", help, tuple(sorted(buckets)))

    def gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        self._gauges[name] = (help, read)

    def info(self, name: str, help: str, series: Iterable[Mapping[str, str]]) -> None:
        """Facts fixed for the process's life, as Prometheus' info pattern has them: a gauge of
        1 per label set (a query joins on the labels, e.g. by precision)."""
        fam = _Family(PREFIX + name, "gauge", help)
        for labels in series:
            fam.values[tuple(sorted(labels.items()))] = 1.0
        self._families[name] = fam

    def inc(self, name: str, by: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._families[name]
            fam.values[key] = fam.values.get(key, 0.0) + by

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._families[name]
            counts = fam.hist.setdefault(key, [0.0] * (len(fam.buckets) + 2))
            for i, b in enumerate(fam.buckets):
                if value <= b:
                    counts[i] += 1
            counts[-2] += 1  # count
            counts[-1] += value  # sum

    def value(self, name: str, **labels: str) -> float:
        """A counter's current value (for tests and the load benchmark's summaries)."""
        with self._lock:
            return self._families[name].values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for fam in self._families.values():
                lines += [f"# HELP {fam.name} {fam.help}", f"# TYPE {fam.name} {fam.kind}"]
                if fam.kind == "histogram":
                    lines += self._histogram_lines(fam)
                else:
                    for key, v in sorted(fam.values.items()):
                        lines.append(f"{fam.name}{_labels(key)} {_num(v)}")
        for name, (help, read) in self._gauges.items():
            full = PREFIX + name
            lines += [f"# HELP {full} {help}", f"# TYPE {full} gauge", f"{full} {_num(read())}"]
        rss = resident_bytes()
        if rss is not None:
            lines += [
                "# HELP process_resident_memory_bytes Resident memory size in bytes.",
                "# TYPE process_resident_memory_bytes gauge",
                f"process_resident_memory_bytes {rss}",
            ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _histogram_lines(fam: _Family) -> Iterable[str]:
        for key, counts in sorted(fam.hist.items()):
            for b, c in zip(fam.buckets, counts):
                yield f"{fam.name}_bucket{_labels((*key, ('le', _num(b))))} {_num(c)}"
            yield f"{fam.name}_bucket{_labels((*key, ('le', '+Inf')))} {_num(counts[-2])}"
            yield f"{fam.name}_count{_labels(key)} {_num(counts[-2])}"
            yield f"{fam.name}_sum{_labels(key)} {_num(counts[-1])}"


def resident_bytes() -> int | None:
    """This process's resident set size (Linux ``/proc``), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def parse(text: str) -> dict[str, float]:
    """A metrics page as ``{"name{labels}": value}`` (what tests and the load benchmark read)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
