"""A TVM RPC tracker and RPC servers on this machine, as TVM's own commands start them.

What a user runs on a tracker host and on each board (docs/scaling-out.md), started from Python
for the tests and ``benchmarks/tune_rpc.py``: the tracker (``python -m tvm.exec.rpc_tracker``)
and servers that register under a key (``python -m tvm.exec.rpc_server --tracker ... --key ...``),
each with ``libtvm_runtime_extra.so`` loaded, which holds MetaSchedule's
``random_fill_for_measure``. Every process is stopped, with its process group, when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .processes import free_port, spawn, stop


def runtime_extra() -> Path:
    """``libtvm_runtime_extra.so`` of the installed TVM (MetaSchedule's runner needs it served)."""
    import tvm

    return Path(tvm.__file__).parent / "lib" / "libtvm_runtime_extra.so"


@contextlib.contextmanager
def local_tracker(host: str = "127.0.0.1", timeout_s: float = 30) -> Iterator[str]:
    """A tracker on ``host``; yields its ``HOST:PORT`` once it listens (it needs tornado)."""
    with _logged(
        [
            sys.executable,
            "-m",
            "tvm.exec.rpc_tracker",
            "--host",
            host,
            "--port",
            str(port := free_port(host)),
            "--port-end",
            str(port + 64),
        ]
    ) as (proc, log):
        deadline = time.monotonic() + timeout_s
        while not (found := re.search(rf"bind to {re.escape(host)}:(\d+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the RPC tracker did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield f"{host}:{found.group(1)}"


@contextlib.contextmanager
def local_servers(
    tracker: str, key: str, count: int, threads: int = 1, timeout_s: float = 60
) -> Iterator[list[tuple[subprocess.Popen, Path]]]:
    """``count`` RPC servers registered with ``tracker`` under ``key``, each running kernels on
    ``threads`` threads (one device per core, as separate boards would be); yields each one's
    process and log once the tracker lists all of them free."""
    from tvm import rpc

    host, port = tracker.rsplit(":", 1)
    env = dict(os.environ, TVM_NUM_THREADS=str(threads))
    cmd = [
        sys.executable,
        "-m",
        "tvm.exec.rpc_server",
        "--tracker",
        tracker,
        "--key",
        key,
        "--host",
        "127.0.0.1",
        "--load-library",
        str(runtime_extra()),
    ]
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                _logged(
                    [*cmd, "--port", str(p := free_port("127.0.0.1")), "--port-end", str(p + 64)],
                    env,
                )
            )
            for _ in range(count)
        ]
        deadline = time.monotonic() + timeout_s
        while (
            rpc.connect_tracker(host, int(port))
            .summary()
            .get("queue_info", {})
            .get(key, {})
            .get("free", 0)
            < count
        ):
            if any(p.poll() is not None for p, _ in servers) or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{count} RPC server(s) under key '{key}' did not register with {tracker}"
                )
            time.sleep(0.2)
        yield servers


@contextlib.contextmanager
def _logged(
    cmd: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, Path]]:
    with tempfile.NamedTemporaryFile(prefix="kokoro-tvm-rpc-", suffix=".log", delete=False) as f:
        log = Path(f.name)
    with open(log, "wb") as out:
        proc = spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc, log
    finally:
        stop(proc)
        log.unlink(missing_ok=True)
