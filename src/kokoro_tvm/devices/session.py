"""Open the device a record names (``resolve``) for the stages that execute libraries.

A session gives ``CompiledComponent`` what differs between devices: the ``Device`` tensors live
on and how a library is loaded there. Locally that is ``tvm.cpu()`` and ``load_module``; over TVM
RPC the library is uploaded first and every tensor is a remote one, so validation's inputs,
weights and outputs travel over the connection and the kernels run on the device's own CPU.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import KokoroTVMError
from . import watchdog
from .resolve import HOST, NONE, QEMU, RPC


class DeviceError(KokoroTVMError, RuntimeError):
    """A device that cannot be reached or used; the message names the fix."""


class LocalSession:
    """This process's CPU."""

    emulated = False
    stateful = False  # the VM's functions are called directly

    def bounded(self) -> contextlib.AbstractContextManager:
        """A local call needs no bound: it cannot lose its device."""
        return contextlib.nullcontext()

    def __init__(self) -> None:
        from ..runtime import tvm_runtime

        self.dev = tvm_runtime.cpu()

    def load_module(self, path: Path):
        from ..runtime import tvm_runtime

        return tvm_runtime.load_module(path)


class RemoteSession:
    """A TVM RPC session (a board through a tracker, or the pipeline's own qemu server).

    TVM 0.27's RPC passes no ``ffi.Array`` in either direction, and a library's functions take
    and return tuples: ``stateful`` tells ``CompiledComponent`` to call them through the VM's
    ``set_input`` / ``invoke_stateful`` / ``get_outputs``, which move tensors one at a time.
    """

    stateful = True

    def __init__(self, remote, emulated: bool, name: str = "the RPC device") -> None:
        self.remote, self.emulated, self.name = remote, emulated, name
        self.dev = remote.cpu()

    def bounded(self) -> contextlib.AbstractContextManager:
        """Every remote call under ``watchdog.deadline``: a lost device ends the stage with an
        error instead of blocking it for ever."""
        return watchdog.deadline(self.name)

    def load_module(self, path: Path):
        with self.bounded():
            self.remote.upload(str(path))
            return self.remote.load_module(Path(path).name)


@contextlib.contextmanager
def open_session(record: dict[str, Any]) -> Iterator[LocalSession | RemoteSession]:
    """The device ``record`` names, open for the duration of the block (a qemu server the
    pipeline started is stopped after it, whatever happens inside)."""
    kind = record["device"]
    if kind == HOST:
        yield LocalSession()
    elif kind == RPC:
        host, port = record["tracker"].rsplit(":", 1)
        yield RemoteSession(
            request(host, int(port), record["key"], record.get("timeout_s", 60)),
            emulated=False,
            name=f"the board '{record['key']}' of the tracker {record['tracker']}",
        )
    elif kind == QEMU:
        from tvm import rpc

        from . import qemu

        with qemu.rpc_server() as (host, port):
            name = f"the qemu-user RPC server for {record['target']}"
            yield RemoteSession(rpc.connect(host, port), emulated=True, name=name)
    elif kind == NONE:
        raise DeviceError(
            f"{record['target']}: no device runs it ({record['reason']}); {record['fix']}"
        )
    else:
        raise DeviceError(
            f"unknown device kind {kind!r} in the record of {record['target']}; run `dvc repro`"
        )


def connect_tracker(host: str, port: int, error: type[Exception] = DeviceError):
    """The tracker at ``host:port``, or ``error`` at once: TVM's ``connect_tracker`` retries a
    refused connection for 60 s, so the socket is asked first."""
    from tvm import rpc

    try:
        socket.create_connection((host, port), timeout=10).close()
        return rpc.connect_tracker(host, port)
    except Exception as e:
        raise error(
            f"no RPC tracker at {host}:{port} ({type(e).__name__}: {e}); start one with "
            f"`python -m tvm.exec.rpc_tracker --host {host} --port {port}` or fix params.yaml "
            "'devices.<target>.tracker'"
        ) from None


def wait_free(
    tracker, host: str, port: int, key: str, timeout_s: float, error: type[Exception] = DeviceError
) -> int:
    """How many devices ``tracker`` has free under ``key``, polling its summary for at most
    ``timeout_s``. Why poll: TVM's ``TrackerSession.request`` blocks until a device is free, for
    ever."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = int(tracker.summary().get("queue_info", {}).get(key, {}).get("free", 0))
        if free > 0:
            return free
        if time.monotonic() >= deadline:
            raise error(
                f"the tracker at {host}:{port} had no free device under key '{key}' for "
                f"{timeout_s:g} s; on the board run `python -m tvm.exec.rpc_server --tracker "
                f"{host}:{port} --key {key} --load-library <tvm>/lib/libtvm_runtime_extra.so` "
                "(README 'Scaling out'), or raise 'devices.<target>.timeout_s'"
            )
        time.sleep(0.5)


def request(host: str, port: int, key: str, timeout_s: float):
    """A session on a device registered with the tracker at ``host:port`` under ``key``, waiting
    at most ``timeout_s`` for one to be free."""
    tracker = connect_tracker(host, port)
    wait_free(tracker, host, port, key, timeout_s)
    return tracker.request(key, priority=1, session_timeout=0, max_retry=1)
