"""Where tuning measures its candidates: this CPU, or the devices of a TVM RPC tracker.

A target's tuning measures where its libraries run (the ``devices@<target>`` record):

- ``host``: MetaSchedule's ``LocalRunner``, one candidate at a time on this CPU;
- ``rpc``: MetaSchedule's ``RPCRunner`` with one connection per device the tracker has free under
  the key, so N servers measure N candidates at once, and a cross target (aarch64) is measured on
  its own CPU. Candidates travel as object files in a tar that the device links itself, so no
  cross linker is needed on the build host;
- ``qemu`` and ``none``: no real timings exist, and tuning refuses with the fix.

The keep-or-drop timing of each task's best record (``tune.keep_winners``) runs on the same device.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..devices.resolve import HOST, RPC
from ..devices.session import DeviceError, RemoteSession, connect_tracker, request, wait_free

#: MetaSchedule's own evaluator defaults, for both runners: 3 calls per repeat, >= 100 ms each.
NUMBER, REPEAT, MIN_REPEAT_MS = 3, 1, 100


class TuneDeviceError(DeviceError):
    """Tuning asked of a device that gives no real timings; the message names the fix."""


class LocalMeasure:
    """This CPU: candidates are measured one at a time (they would share its cores)."""

    workers = 1

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def describe(self) -> str:
        return "this CPU"

    def runner(self):
        from tvm.s_tir import meta_schedule as ms

        return ms.runner.LocalRunner(evaluator_config=_evaluator())

    def evaluators(self, mods: list, target, func: str = "main") -> tuple[list, Any]:
        """``time_evaluator`` of each built module's ``func``, and the device its tensors go on."""
        import tvm

        return [tvm.compile(m, target=target).jit().time_evaluator(func, tvm.cpu(), min_repeat_ms=20)
                for m in mods], tvm.cpu()


class TrackerMeasure:
    """Every device registered with the tracker under the record's key."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        host, port = record["tracker"].rsplit(":", 1)
        self.host, self.port, self.key = host, int(port), record["key"]
        self.timeout_s = float(record.get("timeout_s", 60))
        self.workers = free_devices(self.host, self.port, self.key, self.timeout_s)
        self._session: RemoteSession | None = None
        self._uploads = 0

    def describe(self) -> str:
        return f"{self.workers} device(s) under key '{self.key}' at {self.record['tracker']}"

    def runner(self):
        from tvm.s_tir import meta_schedule as ms

        # the session timeout bounds one candidate's wait for a device plus its run
        config = ms.runner.RPCConfig(tracker_host=self.host, tracker_port=self.port, tracker_key=self.key,
                                     session_timeout_sec=int(max(60, self.timeout_s)))
        return ms.runner.RPCRunner(config, evaluator_config=_evaluator(), max_workers=self.workers)

    def evaluators(self, mods: list, target, func: str = "main") -> tuple[list, Any]:
        import tvm
        from tvm.support.tar import tar

        # one session for every task's timing: a second request would wait for the device this
        # one holds (with one server, for ever)
        if self._session is None:
            self._session = RemoteSession(request(self.host, self.port, self.key, self.timeout_s), emulated=False)
        session = self._session
        out = []
        with tempfile.TemporaryDirectory(prefix="tune-rpc-") as tmp:
            for m in mods:
                # object files the device links itself; a fresh name each, since loading a path
                # the device already loaded would hand back the module loaded first
                self._uploads += 1
                path = Path(tmp) / f"candidate{self._uploads}.tar"
                tvm.compile(m, target=target).export_library(str(path), fcompile=tar)
                out.append(session.load_module(path).time_evaluator(func, session.dev, min_repeat_ms=20))
        return out, session.dev


def for_device(record: dict[str, Any] | None) -> LocalMeasure | TrackerMeasure:
    """The measurer of a ``devices@<target>`` record (``None``: this CPU, as tests call it)."""
    record = record or {"device": HOST, "target": "this CPU"}
    if record["device"] == HOST:
        return LocalMeasure(record)
    if record["device"] == RPC:
        return TrackerMeasure(record)
    target = record["target"]
    why = ("it runs under qemu here, whose timings mean nothing" if record.get("emulated")
           else f"no device runs it ({record.get('reason', record['device'])})")
    raise TuneDeviceError(f"cannot tune {target}: {why}. Attach a device: params.yaml 'devices.{target}: "
                          "{tracker: HOST:9190, key: NAME}', or set tune.trials: 0")


def free_devices(host: str, port: int, key: str, timeout_s: float) -> int:
    """How many devices the tracker has free under ``key``, waiting at most ``timeout_s`` for one."""
    tracker = connect_tracker(host, port, TuneDeviceError)
    return wait_free(tracker, host, port, key, timeout_s, TuneDeviceError)


def _evaluator():
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS)
