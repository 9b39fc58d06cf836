"""Where tuning measures its candidates: this CPU, or the devices of a TVM RPC tracker.

A target's tuning measures where its libraries run (the ``devices@<target>`` record):

- ``host``: MetaSchedule's ``LocalRunner``, one candidate at a time on this CPU;
- ``rpc``: MetaSchedule's ``RPCRunner`` with one connection per device the tracker has free under
  the key, so N servers measure N candidates at once, and a cross target (aarch64) is measured on
  its own CPU. A cross target's candidates are linked here when this host has its linker
  (``devices.cross``), so a device without a compiler (a minimal board image, the emulated
  sysroot) can measure; otherwise they travel as object files in a tar the device links itself;
- ``qemu`` and ``none``: no real timings exist, and tuning refuses with the fix.

The keep-or-drop timing of each task's best record (``metaschedule.keep_winners``) runs on the same
devices, a task per free device at a time (``map``): its tuned and rule schedules on one board.

Each measurer also picks MetaSchedule's task scheduler (``scheduler``): on a tracker the host's
search of one task runs while the devices measure another's batch (round robin); on this CPU the
search would share the cores the candidate is timed on, so the default scheduler stays.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..devices import cross
from ..devices.resolve import HOST, RPC
from ..devices.session import DeviceError, RemoteSession, connect_tracker, request, wait_free

#: MetaSchedule's own evaluator defaults, for both runners: 3 calls per repeat, >= 100 ms each.
NUMBER, REPEAT, MIN_REPEAT_MS = 3, 1, 100
#: The keep-or-drop timing (``metaschedule._time_pair``, five interleaved rounds): each round at
#: least 20 ms of calls, from one call up, so microsecond kernels count and a slow board's long
#: kernel runs once per round (``time_evaluator``'s default is 10 calls).
TIMING = {"number": 1, "repeat": 1, "min_repeat_ms": 20}


class TuneDeviceError(DeviceError):
    """Tuning asked of a device that gives no real timings; the message names the fix."""


class LocalMeasure:
    """This CPU: candidates are measured one at a time (they would share its cores)."""

    workers = 1
    #: MetaSchedule's default, unchanged for this CPU (see ``TrackerMeasure.scheduler``)
    scheduler = "gradient"

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def describe(self) -> str:
        return "this CPU"

    def export(self, target) -> None:
        """MetaSchedule's own tar export: this CPU links what it measures."""
        return None

    def runner(self):
        from tvm.s_tir import meta_schedule as ms

        return ms.runner.LocalRunner(evaluator_config=_evaluator())

    def map(self, fn: Callable[[Any, Any], Any], jobs: list) -> list:
        """``fn(job, device)`` for each job, one after the other on this CPU (``device``: this
        measurer, whose ``evaluators`` time modules)."""
        return [fn(job, self) for job in jobs]

    def evaluators(self, mods: list, target, func: str = "main") -> tuple[list, Any]:
        """``time_evaluator`` of each built module's ``func``, and the device its tensors go on."""
        import tvm

        return [
            tvm.compile(m, target=target).jit().time_evaluator(func, tvm.cpu(), **TIMING)
            for m in mods
        ], tvm.cpu()


class TrackerMeasure:
    """Every device registered with the tracker under the record's key."""

    #: Round robin overlaps the host's work with the devices': MetaSchedule's runner is
    #: asynchronous, and round robin joins a task's measurements only when that task's turn comes
    #: back, so the evolutionary search and builds of the next task run while the boards measure.
    #: The gradient scheduler joins its chosen task before searching it, which after its first
    #: round leaves the boards idle through every search. Every task still gets ``trials``
    #: (``metaschedule.search`` caps each task at ``max_trials_global / tasks``), so the order
    #: changes no budget.
    scheduler = "round-robin"

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        host, port = record["tracker"].rsplit(":", 1)
        self.host, self.port, self.key = host, int(port), record["key"]
        self.timeout_s = float(record.get("timeout_s", 60))
        self.workers = free_devices(self.host, self.port, self.key, self.timeout_s)
        self._idle: list[RemoteSession] = []  # open sessions no job holds
        self._lock = threading.Lock()
        self._uploads = 0

    def describe(self) -> str:
        return f"{self.workers} device(s) under key '{self.key}' at {self.record['tracker']}"

    def export(self, target) -> Callable[[Any], str] | None:
        """MetaSchedule's ``f_export`` for ``target``'s candidates (None: its tar)."""
        linker = _host_linker(target)
        return None if linker is None else functools.partial(export_linked, linker)

    def runner(self):
        from tvm.s_tir import meta_schedule as ms

        # the session timeout bounds one candidate's wait for a device plus its run
        config = ms.runner.RPCConfig(
            tracker_host=self.host,
            tracker_port=self.port,
            tracker_key=self.key,
            session_timeout_sec=int(max(60, self.timeout_s)),
        )
        return ms.runner.RPCRunner(config, evaluator_config=_evaluator(), max_workers=self.workers)

    def map(self, fn: Callable[[Any, Any], Any], jobs: list) -> list:
        """``fn(job, device)`` for each job, spread over the free devices (one thread and one RPC
        session each, reused across jobs): with N boards, N keep-or-drop timings run at once.
        ``device.evaluators`` time modules on that board; results come back in job order."""
        if self.workers == 1 or len(jobs) < 2:
            return [self._on_board(fn, job) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs))) as pool:
            return list(pool.map(lambda job: self._on_board(fn, job), jobs))

    def _on_board(self, fn: Callable[[Any, Any], Any], job: Any) -> Any:
        with self._lock:  # a session per concurrent job, kept for the next: at most ``workers``
            session = self._idle.pop() if self._idle else None
        if session is None:
            session = RemoteSession(
                request(self.host, self.port, self.key, self.timeout_s), emulated=False
            )
        try:
            return fn(job, _Board(self, session))
        finally:
            with self._lock:
                self._idle.append(session)


class _Board:
    """One RPC session of a ``TrackerMeasure``: modules built here, timed there."""

    def __init__(self, measurer: TrackerMeasure, session: RemoteSession) -> None:
        self.measurer, self.session = measurer, session

    def evaluators(self, mods: list, target, func: str = "main") -> tuple[list, Any]:
        import tvm
        from tvm.support.tar import tar

        fcompile = _host_linker(target) or tar
        suffix = ".tar" if fcompile is tar else ".so"
        out = []
        with tempfile.TemporaryDirectory(prefix="tune-rpc-") as tmp:
            for m in mods:
                # built one at a time (TVM's compile is not known to be thread-safe); a fresh name
                # each, since loading a path the device already loaded would hand back the
                # module loaded first
                with self.measurer._lock:
                    self.measurer._uploads += 1
                    path = Path(tmp) / f"candidate{self.measurer._uploads}{suffix}"
                    tvm.compile(m, target=target).export_library(str(path), fcompile=fcompile)
                out.append(
                    self.session.load_module(path).time_evaluator(func, self.session.dev, **TIMING)
                )
        return out, self.session.dev


def for_device(record: dict[str, Any] | None) -> LocalMeasure | TrackerMeasure:
    """The measurer of a ``devices@<target>`` record (``None``: this CPU, as tests call it)."""
    record = record or {"device": HOST, "target": "this CPU"}
    if record["device"] == HOST:
        return LocalMeasure(record)
    if record["device"] == RPC:
        return TrackerMeasure(record)
    target = record["target"]
    why = (
        "it runs under qemu here, whose timings mean nothing"
        if record.get("emulated")
        else f"no device runs it ({record.get('reason', record['device'])})"
    )
    raise TuneDeviceError(
        f"cannot tune {target}: {why}. Attach a device: params.yaml 'devices.{target}: "
        "{tracker: HOST:9190, key: NAME}', or set tune.trials: 0"
    )


def export_linked(linker: Callable[..., None], rt_mod) -> str:
    """A candidate as a shared library linked on this host by ``linker`` (runs in a builder
    worker)."""
    path = os.path.join(tempfile.mkdtemp(prefix="tune-candidate-"), "candidate.so")
    rt_mod.export_library(path, fcompile=linker)
    return path


def _host_linker(target) -> Callable[..., None] | None:
    """This host's linker for a cross ``target`` (a tvm Target), None for a native one or where
    none is installed (the device then links the tar itself)."""
    spec = dict(target.export())
    if not cross.is_cross(spec) or not cross.available(spec)[0]:
        return None
    return cross.linker_for(spec)


def free_devices(host: str, port: int, key: str, timeout_s: float) -> int:
    """How many devices the tracker has free under ``key``, waiting at most ``timeout_s`` for
    one."""
    tracker = connect_tracker(host, port, TuneDeviceError)
    return wait_free(tracker, host, port, key, timeout_s, TuneDeviceError)


def _evaluator():
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS)
