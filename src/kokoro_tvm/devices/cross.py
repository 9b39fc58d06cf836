"""Linking TVM libraries for another CPU architecture than the build host's (aarch64 on x86).

LLVM (inside the apache-tvm wheel) emits the target's object files on any host; only the final
``-shared`` link needs a toolchain for the target. Two are supported, tried in this order:

- Debian's cross gcc (``gcc-aarch64-linux-gnu`` + ``libc6-dev-arm64-cross`` for ``crti.o``);
- ``python -m ziglang cc -target aarch64-linux-gnu`` (the ``ziglang`` PyPI wheel: no root needed).

The two produce different (each reproducible) bytes, so ``KOKORO_TVM_CROSS_LINKER=gcc|zig`` pins
the choice where artifacts must match between machines that have both.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import KokoroTVMError
from .isa import arch_of, host_arch

ZIGLANG_VERSION = "0.15.2"  # what `python -m kokoro_tvm.devices.setup` installs
SETUP_CMD = "python -m kokoro_tvm.devices.setup"
LINKERS = ("gcc", "zig")  # in order of preference


class CrossToolchainError(KokoroTVMError, RuntimeError):
    """No linker for a cross target; the message names the command that installs one."""


def target_triple(target_spec: dict[str, Any]) -> str | None:
    """The ``mtriple`` of an LLVM target dict (or of its ``host``), None for the build host's."""
    triple = target_spec.get("mtriple")
    host = target_spec.get("host")
    if not triple and isinstance(host, dict):
        triple = host.get("mtriple")
    return str(triple) if triple else None


def target_arch(target_spec: dict[str, Any]) -> str:
    triple = target_triple(target_spec)
    return arch_of(triple) if triple else host_arch()


def is_cross(target_spec: dict[str, Any]) -> bool:
    return target_arch(target_spec) != host_arch()


def linker_for(target_spec: dict[str, Any]) -> Callable[..., None] | None:
    """An ``fcompile`` for ``executable.export_library(path, fcompile=...)`` linking
    ``target_spec``'s objects, or None when the target runs on this host's architecture (TVM's
    default cc links it).

    Raises CrossToolchainError when no linker for the target's architecture is installed.
    """
    if not is_cross(target_spec):
        return None
    gnu = gnu_triple(target_triple(target_spec) or "")
    choice = os.environ.get("KOKORO_TVM_CROSS_LINKER", "").strip().lower()
    if choice not in ("", *LINKERS):
        raise CrossToolchainError(
            f"KOKORO_TVM_CROSS_LINKER={choice!r}: set it to gcc, zig or nothing"
        )
    for kind in (choice,) if choice else LINKERS:
        linker = find_linker(gnu, kind)
        if linker:
            return linker
    raise CrossToolchainError(
        f"no {choice or 'linker'} for {gnu} (target {target_spec.get('mtriple')!r}): run "
        f"`{SETUP_CMD}` (or `{_apt_hint(gnu)}`, or `pip install ziglang=={ZIGLANG_VERSION}`)"
    )


def find_linker(gnu: str, kind: str) -> CrossLinker | None:
    """The ``kind`` ("gcc" or "zig") linker for the GNU triple ``gnu``, if installed."""
    if kind == "gcc":
        gcc = _gcc(gnu)
        # Debian's gcc links with a sha1 build id (a hash of the output: reproducible); named
        # explicitly so that a toolchain configured with --build-id=uuid cannot make it random.
        return (
            CrossLinker(
                gnu,
                (gcc,),
                ("-Wl,--build-id=sha1",),
                f"{os.path.basename(gcc)} {_version((gcc, '-dumpversion'))}",
            )
            if gcc
            else None
        )
    if kind == "zig" and _has_ziglang():
        # zig's lld writes no build id and no paths: byte-identical output for identical objects.
        return CrossLinker(
            gnu,
            (sys.executable, "-m", "ziglang", "cc", "-target", gnu),
            (),
            f"zig {_version((sys.executable, '-m', 'ziglang', 'version'))}",
        )
    return None


class CrossLinker:
    """An ``fcompile``: ``tvm.support.cc.cross_compiler`` over a fixed command.

    A fresh ``cross_compiler`` is made per call: TVM's ``_fcompile`` appends each call's options to
    the list it was created with (``all_options = base_options; all_options += options``), so one
    reused across exports would accumulate flags. Plain attributes keep it picklable (MetaSchedule
    builders send ``fcompile`` to worker processes).
    """

    output_format = "so"

    def __init__(
        self, triple: str, command: Sequence[str], options: Sequence[str], description: str
    ):
        self.triple, self.command, self.options = triple, tuple(command), tuple(options)
        self.description = description  # e.g. "aarch64-linux-gnu-gcc 12": which bytes to expect

    def get_target_triple(self) -> str:
        return self.triple

    def __call__(
        self,
        output: str,
        objects: Sequence[str] | str,
        options: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        from tvm.support import cc

        compile_func = self.command[0] if len(self.command) == 1 else self._run
        fcompile = cc.cross_compiler(
            compile_func, options=list(self.options), get_target_triple=self.get_target_triple
        )
        fcompile(
            output,
            [objects] if isinstance(objects, str) else list(objects),
            options=list(options or []),
        )

    def _run(
        self, output: str, objects: Sequence[str], options: Sequence[str] | None = None
    ) -> None:
        """``create_shared`` for a multi-word command (TVM's takes one executable name)."""
        cmd = [*self.command, "-shared", "-fPIC", "-o", output, *(options or []), *objects]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Compilation error:\n{proc.stdout}\nCommand line: {' '.join(cmd)}")

    def __repr__(self) -> str:
        return f"CrossLinker({self.triple}: {self.description})"


def gnu_triple(triple: str) -> str:
    """``aarch64-unknown-linux-gnu`` -> ``aarch64-linux-gnu``: the name both Debian's cross
    packages and zig use."""
    parts = triple.split("-")
    if "linux" not in parts:
        raise CrossToolchainError(
            f"cross linking supports Linux targets only, not {triple!r} "
            "(Android: use tvm.support.ndk.create_shared)"
        )
    env = parts[-1] if parts[-1] != "linux" else "gnu"
    return f"{arch_of(parts[0])}-linux-{env}"


@functools.cache
def _gcc(gnu: str) -> str | None:
    """Debian's ``<triple>-gcc`` if it can link a shared object: it needs the target's ``crti.o``
    (``libc6-dev-<arch>-cross``), which the gcc package only recommends."""
    gcc = shutil.which(f"{gnu}-gcc")
    if not gcc:
        return None
    found = subprocess.run(
        [gcc, "-print-file-name=crti.o"], capture_output=True, text=True
    ).stdout.strip()
    return gcc if os.path.isabs(found) else None


def _has_ziglang() -> bool:
    return importlib.util.find_spec("ziglang") is not None


@functools.cache
def _version(cmd: tuple[str, ...]) -> str:
    out = subprocess.run(list(cmd), capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _apt_hint(gnu: str) -> str:
    arch = gnu.split("-", 1)[0]
    deb_arch = {"aarch64": "arm64", "x86_64": "amd64"}.get(arch, arch)
    return f"apt-get install gcc-{gnu} libc6-dev-{deb_arch}-cross"


def available(target_spec: dict[str, Any]) -> tuple[bool, str]:
    """(whether ``target_spec`` can be linked here, the linker or the fix) without raising."""
    try:
        linker = linker_for(target_spec)
    except CrossToolchainError as e:
        return False, str(e)
    return True, linker.description if linker else "host cc"
