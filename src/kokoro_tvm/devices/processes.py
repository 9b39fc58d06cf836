"""Helper processes the pipeline starts and must stop whole: qemu-user RPC servers, local RPC
trackers and servers (each in its own process group, ``start_new_session=True``).

Each lives in its own session, so nothing stops it when the stage that started it dies: ``stop``
ends one when its ``finally`` runs, and ``stop_all`` ends every one still running where no
``finally`` will (the watchdog's exit, a stage's SIGTERM).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

_running_groups: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()


def spawn(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen)`` as the leader of its own process group, registered for
    ``stop_all``."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    with _lock:
        _running_groups[proc.pid] = proc
    return proc


def stop_all(grace: float = 1.0) -> None:
    """``stop`` every helper ``spawn`` started that is still running."""
    with _lock:
        procs = list(_running_groups.values())
    for proc in procs:
        stop(proc, grace)


def stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Kill ``proc``'s process group (the server, its listener and any session it forked): TERM,
    then KILL after ``grace`` seconds; returns once none of them runs."""
    pgid = proc.pid  # start_new_session: the group's id is the leader's pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while (running := _running(proc, pgid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not running:
            break
    proc.wait()
    with _lock:
        _running_groups.pop(pgid, None)


class Stat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` a process tree is read from."""

    state: str  # ps's STAT letter: R, S, Z, ...
    ppid: int
    pgid: int


def stats() -> dict[int, Stat]:
    """pid -> ``Stat`` of every process now."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:  # after the command, which may hold ") "
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                out[int(d.name)] = Stat(fields[0], int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    return out


def group_members(pgid: int) -> dict[int, str]:
    """pid -> state letter of every process in group ``pgid``."""
    return {pid: st.state for pid, st in stats().items() if st.pgid == pgid}


def _running(proc: subprocess.Popen, pgid: int) -> bool:
    """Whether a member of the group still runs. Zombies do not count: the leader's are reaped
    here, the others' (orphans: their parent was the leader) by init, in its own time (seconds
    in some containers)."""
    proc.poll()
    return any(state != "Z" for state in group_members(pgid).values())


def free_port(host: str) -> int:
    """A port the kernel considers free now; the server scans from it (the bound one is read back
    from its log), so a race with another process only moves it along."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
