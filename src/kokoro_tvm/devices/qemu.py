"""Running aarch64 TVM libraries on this x86 host: an aarch64 Python under qemu-user.

The "sysroot" is Debian bookworm's ``python3.11:arm64`` and the shared libraries it needs,
unpacked (not installed) into a directory, plus the aarch64 wheels of the TVM runtime and numpy in
its ``usr/local/lib/python3.11/dist-packages``. ``qemu-aarch64-static -L <sysroot>`` resolves the
guest's absolute paths (``/lib/ld-linux-aarch64.so.1``, ``/usr/lib/python3.11``) there first.
``python -m kokoro_tvm.devices.setup`` builds it; this module only uses it.

Emulated time means nothing (the guest runs tens of times slower); numerics are aarch64's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..errors import KokoroTVMError
from .processes import free_port, spawn, stop

SETUP_CMD = "python -m kokoro_tvm.devices.setup"
ENV_SYSROOT = "KOKORO_TVM_AARCH64_SYSROOT"
PYTHON = "usr/bin/python3.11"
SITE = "usr/local/lib/python3.11/dist-packages"  # Debian's own place for non-Debian packages
WRAPPER = "usr/local/bin/python3.11-qemu"
MANIFEST = "kokoro-tvm-sysroot.json"  # written last by setup: its presence means "complete"
FORMAT = 1  # bump when the layout changes: status() then asks for a rebuild

# What the sysroot is built from: data, in data/sysroot_pins.toml (Debian packages, aarch64 wheels).
_PINS = tomllib.loads(
    (Path(__file__).parents[1] / "data" / "sysroot_pins.toml").read_text(encoding="utf-8")
)
DEBIAN_SUITE: str = _PINS["debian"]["suite"]
DEBIAN_PACKAGES: dict[str, str] = _PINS["debian"]["packages"]
WHEEL_PLATFORM: str = _PINS["wheels"]["platform"]
WHEELS: dict[str, str] = _PINS["wheels"]["packages"]
# Left out of the unpacked wheels: the compiler (~240 MB; TVM_USE_RUNTIME_LIB=1 loads the runtime
# only) and the CUDA runtime.
WHEEL_EXCLUDE = ("tvm/lib/libtvm_compiler.so", "tvm/lib/libtvm_runtime_cuda.so")
RUNTIME_EXTRA = f"{SITE}/tvm/lib/libtvm_runtime_extra.so"  # MetaSchedule's random_fill_for_measure


class QemuError(KokoroTVMError, RuntimeError):
    """qemu-user or the aarch64 sysroot is missing or broken; the message names the fix."""


def sysroot() -> Path:
    if os.environ.get(ENV_SYSROOT):
        return Path(os.environ[ENV_SYSROOT]).expanduser().absolute()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kokoro-tvm" / "aarch64-sysroot"


def emulator() -> Path | None:
    """qemu-user for aarch64 on PATH (Debian's qemu-user-static, or a distribution's
    qemu-aarch64)."""
    for name in ("qemu-aarch64-static", "qemu-aarch64"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def read_manifest(root: Path | None = None) -> dict | None:
    try:
        return json.loads(((root or sysroot()) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def sysroot_status(root: Path | None = None) -> tuple[bool, str]:
    """(complete, why not): the manifest setup writes last, built from this module's pins."""
    root = root or sysroot()
    manifest = read_manifest(root)
    if manifest is None:
        return False, f"no aarch64 sysroot at {root}: run `{SETUP_CMD}`"
    built_from = (manifest.get("format"), manifest.get("wheels"), manifest.get("debian_pins"))
    if built_from != (FORMAT, WHEELS, DEBIAN_PACKAGES):
        return False, f"the aarch64 sysroot at {root} was built from other pins: run `{SETUP_CMD}`"
    return True, f"aarch64 sysroot {root}"


def status(root: Path | None = None) -> tuple[bool, str]:
    """(usable, why): cheap (no emulation); ``why`` names the fix when not usable."""
    if emulator() is None:
        return False, (
            f"qemu-aarch64-static is not installed: run `{SETUP_CMD}` as root "
            "(or `apt-get install qemu-user-static`)"
        )
    ok, why = sysroot_status(root)
    return ok, f"qemu-user {emulator()} with the {why}" if ok else why


def require(root: Path | None = None) -> Path:
    usable, why = status(root)
    if not usable:
        raise QemuError(why)
    return python_wrapper(root)


def python_wrapper(root: Path | None = None) -> Path:
    """The aarch64 ``python3.11`` as a host executable: a shell script that runs it under qemu.

    ``-0 "$0"`` makes the script the guest's ``argv[0]`` and so its ``sys.executable``: TVM's RPC
    server starts its listener with ``subprocess.Popen([sys.executable, ...])`` (PopenWorker), and
    the host kernel cannot execute an aarch64 ELF without binfmt_misc (absent in containers), so the
    re-execution must go through this script. Rewritten when qemu's path or the sysroot changes.
    """
    root = (root or sysroot()).absolute()
    qemu = emulator()
    if qemu is None:
        raise QemuError(status(root)[1])
    q = shlex.quote
    text = f"""#!/bin/sh
# aarch64 python3.11 under qemu-user; written by kokoro_tvm.devices.qemu (do not edit).
# The host's interpreter settings must not leak into the guest (x86 libraries, another prefix).
unset PYTHONHOME PYTHONSTARTUP PYTHONEXECUTABLE VIRTUAL_ENV LD_LIBRARY_PATH LD_PRELOAD
export PYTHONPATH={q(str(root / SITE))}${{PYTHONPATH:+:$PYTHONPATH}}
export PYTHONNOUSERSITE=1 TVM_USE_RUNTIME_LIB=1
exec {q(str(qemu))} -L {q(str(root))} -0 "$0" {q(str(root / PYTHON))} "$@"
"""
    path = root / WRAPPER
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    return path


def _guest_env(env: Mapping[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("QEMU_")}
    return base | dict(env or {})


def run_python(
    args: Sequence[str], env: Mapping[str, str] | None = None, root: Path | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """``python3.11 *args`` on the emulated aarch64 (``subprocess.run`` keywords pass through):
    e.g. ``run_python(["-m", "kokoro_tvm.runtime.cli", ...], env={"PYTHONPATH": "src"})``; the
    sysroot's site-packages always come first on the guest's path."""
    wrapper = require(root)
    return subprocess.run([str(wrapper), *args], env=_guest_env(env), **kwargs)


@contextlib.contextmanager
def rpc_server(
    *,
    key: str = "",
    tracker: str | None = None,
    host: str = "127.0.0.1",
    load_library: Sequence[str | os.PathLike] = (),
    startup_timeout: float = 120.0,
    root: Path | None = None,
    threads: int | None = None,
) -> Iterator[tuple[str, int]]:
    """A TVM RPC server on the emulated aarch64 (``python -m tvm.exec.rpc_server``), listening on
    ``host`` at a free port, optionally registered with ``tracker`` ("HOST:PORT") under ``key``.

    Yields (host, port) once it answers the RPC handshake (and, with a tracker, once the tracker
    lists it); on exit its whole process group is killed. A compiled library needs no
    ``load_library``: ``remote.load_module`` dlopens it inside the session; MetaSchedule's runner
    needs ``load_library=[sysroot()/RUNTIME_EXTRA]``. ``threads``: TVM's thread pool size on the
    guest (default: TVM's, one per host core), e.g. 1 for one emulated board per core.
    """
    root = root or sysroot()
    wrapper = require(root)
    if tracker and not key:
        raise ValueError("an RPC server registered with a tracker needs a key")
    port = free_port(host)
    cmd = [
        str(wrapper),
        "-m",
        "tvm.exec.rpc_server",
        "--host",
        host,
        "--port",
        str(port),
        "--port-end",
        str(min(port + 64, 65536)),
    ]
    if key:
        cmd += ["--key", key]
    if tracker:
        cmd += ["--tracker", tracker]
    if load_library:
        cmd += ["--load-library", ":".join(str(Path(p).absolute()) for p in load_library)]
    # TMPDIR: each session's upload directory, which a killed server cannot remove, goes in here
    with tempfile.TemporaryDirectory(prefix="kokoro-tvm-qemu-rpc-") as tmp:
        log = Path(tmp) / "server.log"
        with open(log, "wb") as out:
            proc = spawn(  # its own process group: killed whole
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                env=_guest_env(
                    {"PYTHONUNBUFFERED": "1", "TMPDIR": tmp}
                    | ({"TVM_NUM_THREADS": str(threads)} if threads else {})
                ),
            )
        try:
            port = _wait_listening(proc, log, host, time.monotonic() + startup_timeout)
            if tracker:
                _wait_registered(proc, log, tracker, key, time.monotonic() + startup_timeout)
            yield host, port
        finally:
            stop(proc)


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _check_alive(proc: subprocess.Popen, log: Path) -> None:
    if proc.poll() is not None:
        raise QemuError(
            f"the aarch64 RPC server exited ({proc.returncode}) while starting:\n{_tail(log)}"
        )


def _wait_listening(proc: subprocess.Popen, log: Path, host: str, deadline: float) -> int:
    """The port the server bound, once its accept loop answers a handshake.

    A bare TCP connect would not do: TVM's listener reads the client's magic with ``recvall``,
    which raises on a closed connection, and that RuntimeError ends its accept loop for good. So
    the probe speaks the protocol with a key that cannot match (the server answers "mismatch" and
    keeps listening).
    """
    from tvm.rpc import base

    port = None
    while time.monotonic() < deadline:
        _check_alive(proc, log)
        if port is None:
            found = re.search(rf"bind to {re.escape(host)}:(\d+)", _tail(log, 200))
            port = int(found.group(1)) if found else None
        if port is not None:
            try:
                with socket.create_connection((host, port), timeout=10) as s:
                    probe = b"client:kokoro-tvm-probe-no-such-key"
                    s.sendall(struct.pack("<ii", base.RPC_MAGIC, len(probe)) + probe)
                    code = struct.unpack("<i", base.recvall(s, 4))[0]
                if code in (base.RPC_CODE_MISMATCH, base.RPC_CODE_SUCCESS):
                    return port
            except (OSError, RuntimeError):
                pass
        time.sleep(0.1)
    raise QemuError(
        f"the aarch64 RPC server did not answer within its startup timeout:\n{_tail(log)}"
    )


def _wait_registered(
    proc: subprocess.Popen, log: Path, tracker: str, key: str, deadline: float
) -> None:
    from tvm import rpc

    thost, tport = tracker.rsplit(":", 1)
    while time.monotonic() < deadline:
        _check_alive(proc, log)
        try:
            queue = rpc.connect_tracker(thost, int(tport)).summary().get("queue_info", {})
            if queue.get(key, {}).get("free", 0) > 0:
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.2)
    raise QemuError(
        f"the aarch64 RPC server did not register with the tracker {tracker} as '{key}':\n"
        f"{_tail(log)}"
    )
