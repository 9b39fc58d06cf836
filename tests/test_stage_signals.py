"""A stage that is ended (DVC's SIGTERM, the watchdog's exit) stops the helper processes it
started in their own sessions, which nothing else would stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kokoro_tvm.devices.processes import stats

STAGE = """
import ctypes, subprocess, sys, time
from kokoro_tvm.commands import exit_status
from kokoro_tvm.devices import processes, watchdog
from kokoro_tvm.pipeline.entry import main

def body():
    helper = processes.spawn(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # the pid printed inside: a signal on its heels lands where ``finally`` runs
        print(helper.pid, flush=True)
        {wait}
    finally:
        processes.stop(helper)

{run}
"""


def _alive(pid: int) -> bool:
    st = stats().get(pid)
    return st is not None and st.state != "Z"


def _start(wait: str, run: str) -> tuple[subprocess.Popen, int]:
    code = textwrap.dedent(STAGE).format(wait=wait, run=run)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    helper = int(proc.stdout.readline())
    assert _alive(helper)
    return proc, helper


def _gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


#: how the stage waits when the signal comes: in Python, or inside a C call that does not return
#: for signals (as TVM and LLVM compile), here libc's ``system``, which retries its wait
WAITS = {"in-python": "time.sleep(600)", "in-c": 'ctypes.CDLL(None).system(b"sleep 607")'}


@pytest.mark.parametrize(
    "handled, wait",
    [(True, "in-python"), (True, "in-c"), (False, "in-python")],
    ids=["stage-in-python", "stage-in-c", "control-without-handler"],
)
def test_sigterm_ends_a_stage_and_its_helpers(handled: bool, wait: str):
    # the control runs the same body without ``entry.main``'s handler: Python dies on the spot
    run = "main(body)" if handled else "sys.exit(exit_status(body))"
    proc, helper = _start(WAITS[wait], run)
    waiting: set[int] = set()  # what ``system`` started: the stage is inside the C call
    while wait == "in-c" and not waiting and proc.poll() is None:
        waiting = {pid for pid, st in stats().items() if st.ppid == proc.pid} - {helper}
        time.sleep(0.02)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # in C, the handler alone would wait for ``system``'s 607 s
        if handled:
            assert proc.returncode == 128 + signal.SIGTERM
            assert _gone(helper), "the stage's helper outlived it"
        else:
            assert proc.returncode == -signal.SIGTERM
            time.sleep(0.5)
            assert _alive(helper)  # what the handler is there for
    finally:
        proc.kill()
        left = waiting | {pid for pid, st in stats().items() if st.ppid in waiting}  # sh, sleep
        for pid in [helper, *left]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_watchdog_exit_stops_the_helpers():
    proc, helper = _start(
        'with watchdog.deadline("a board", 1):\n            time.sleep(600)', "body()"
    )
    try:
        proc.wait(timeout=30)
        assert proc.returncode == 1
        assert "a board did not answer within 1 s" in proc.stderr.read()
        assert _gone(helper), "the helper outlived the watchdog's exit"
    finally:
        proc.kill()
        if _alive(helper):
            os.killpg(helper, signal.SIGKILL)
