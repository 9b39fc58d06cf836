"""Install what cross targets need: ``python -m kokoro_tvm.devices.setup [--check]``.

- qemu-user for aarch64 (``qemu-user-static``, apt, root only);
- a cross linker: Debian's ``gcc-aarch64-linux-gnu`` + ``libc6-dev-arm64-cross`` (apt, as root) or
  the ``ziglang`` wheel (pip, anyone);
- the aarch64 sysroot ``qemu.py`` runs (no root: a private apt state downloads the arm64 .debs).

Idempotent and quick when everything is in place (it runs only the cross gcc's
``-print-file-name`` and ``-dumpversion``).
``--check`` changes nothing: one line per missing thing with the command that installs it, exit 1.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import KokoroTVMError
from . import cross, qemu

AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
# Host (amd64) packages, bookworm versions; superseded ones fall back to the candidate with a
# warning.
APT_QEMU = {"qemu-user-static": "1:7.2+dfsg-7+deb12u18+b3"}
APT_GCC = {"gcc-aarch64-linux-gnu": "4:12.2.0-3", "libc6-dev-arm64-cross": "2.36-8cross1"}


class SetupError(KokoroTVMError, RuntimeError):
    pass


def missing() -> list[tuple[str, str]]:
    """(what is missing, the command that installs it), one per missing piece."""
    out = []
    if qemu.emulator() is None:
        out.append(
            (
                "qemu-user for aarch64 (qemu-aarch64-static)",
                f"`{qemu.SETUP_CMD}` as root, or `apt-get install qemu-user-static`",
            )
        )
    if not cross.available(AARCH64)[0]:
        out.append(
            (
                "a linker for aarch64-linux-gnu",
                f"`{qemu.SETUP_CMD}` (as root: gcc), or "
                f"`pip install ziglang=={cross.ZIGLANG_VERSION}`",
            )
        )
    ok, why = qemu.sysroot_status()
    if not ok:
        out.append((why.split(": run")[0], f"`{qemu.SETUP_CMD}` (no root needed)"))
    return out


def install(linker: str = "auto") -> None:
    """Install what is missing. ``linker``: ``auto`` installs one only when none is available (gcc
    as root, else zig); ``gcc`` or ``zig`` install that one whatever else is there."""
    root_user = os.geteuid() == 0 and shutil.which("apt-get") is not None
    want = dict(APT_QEMU) if qemu.emulator() is None else {}
    have = {name: _linker_available(name) for name in ("gcc", "zig")}
    if linker == "auto" and not any(have.values()):
        linker = "gcc" if root_user else "zig"
    if linker == "gcc" and not have["gcc"]:
        want |= APT_GCC
    if linker == "zig" and not have["zig"]:
        _pip_install(f"ziglang=={cross.ZIGLANG_VERSION}")
    if want:
        if not root_user:
            raise SetupError(
                f"installing {', '.join(want)} needs root and apt-get: run `{qemu.SETUP_CMD}` "
                "as root, or `sudo apt-get install " + " ".join(want) + "`"
            )
        _apt_install(want)
    cross._gcc.cache_clear()
    if not qemu.sysroot_status()[0]:
        build_sysroot(qemu.sysroot())


def _linker_available(kind: str) -> bool:
    return cross.find_linker(cross.gnu_triple(AARCH64["mtriple"]), kind) is not None


def _pip_install(req: str) -> None:
    _run([sys.executable, "-m", "pip", "install", "-q", req])


def _apt_install(pins: dict[str, str]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get"]
    if not _madison(apt, next(iter(pins))):  # fresh image: no package lists yet
        _run([*apt, "update", "-q"], env=env)
    _run([*apt, "install", "-y", "-q", "--no-install-recommends", *_pinned(apt, pins)], env=env)


def _madison(apt: list[str], package: str) -> list[str]:
    """Versions of ``package`` the archive offers, newest first (``apt-cache`` shares ``apt-get``'s
    options)."""
    cache = ["apt-cache", *apt[1:]]
    out = subprocess.run([*cache, "madison", package], capture_output=True, text=True).stdout
    return [line.split("|")[1].strip() for line in out.splitlines() if line.count("|") >= 2]


def _pinned(apt: list[str], pins: dict[str, str]) -> list[str]:
    """``name=version`` for each pin, or the archive's newest version when Debian has dropped the
    pinned one (it keeps only the latest of each release)."""
    out = []
    for name, version in pins.items():
        offered = _madison(apt, name)
        if version not in offered:
            if not offered:
                raise SetupError(f"{name} is not in the apt sources; check /etc/apt/sources.list*")
            print(
                f"warning: {name}={version} is no longer in the archive; using {offered[0]} "
                f"(update the pin in kokoro_tvm/devices)",
                file=sys.stderr,
            )
            version = offered[0]
        out.append(f"{name}={version}")
    return out


def _private_apt(state: Path) -> list[str]:
    """``apt-get`` with its own state for arm64 only: it reads the host's sources and keys but
    neither needs root nor changes the host's package database or architectures."""
    for d in ("lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    opts = {
        "Dir::State::Lists": state / "lists",
        "Dir::Cache": state / "cache",
        "Dir::State::status": state / "status",
        "Dir::State::extended_states": state / "extended",
        "APT::Architecture": "arm64",
        "APT::Architectures::": "arm64",
        "Debug::NoLocking": "1",
        "Acquire::Languages": "none",
    }
    if os.geteuid() == 0:
        opts["APT::Sandbox::User"] = "root"  # the _apt user cannot write into our temp dir
    return ["apt-get", *(a for k, v in opts.items() for a in ("-o", f"{k}={v}"))]


def build_sysroot(root: Path) -> None:
    """Download and unpack the pinned arm64 .debs and aarch64 wheels into ``root`` (replacing it),
    check that the emulated Python imports TVM, then write the manifest that marks it complete."""
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            raise SetupError(
                f"building the aarch64 sysroot needs Debian's {tool} (apt); on another "
                f"system, point {qemu.ENV_SYSROOT} at a sysroot built on Debian"
            )
    root = root.absolute()
    root.parent.mkdir(parents=True, exist_ok=True)
    print(f"building the aarch64 sysroot in {root} (~130 MB download)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix=f".{root.name}-build-", dir=root.parent) as tmp:
        work = Path(tmp)
        new = work / "sysroot"
        apt = _private_apt(work / "apt")
        _run([*apt, "update", "-q"])
        debs = work / "debs"
        debs.mkdir()
        _run([*apt, "download", *_pinned(apt, qemu.DEBIAN_PACKAGES)], cwd=debs)
        debian = {}
        for deb in sorted(debs.glob("*.deb")):
            _run(["dpkg-deb", "-x", str(deb), str(new)])
            fields = subprocess.run(
                ["dpkg-deb", "-f", str(deb), "Package", "Version"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            name, version = re.findall(r"^\w+: (.+)$", fields, re.M)
            debian[name] = version
        wheels = _unpack_wheels(work / "wheels", new / qemu.SITE)
        _hide_host_paths(new)
        # Debian's .debs ship no bytecode (their postinst compiles it) and the environment may set
        # PYTHONDONTWRITEBYTECODE: compile here, on the host (3.11 bytecode is arch-independent),
        # or every emulated start spends seconds compiling (docs/measurements.md, "Sysroot
        # bytecode on the host").
        for d in (new / "usr/lib/python3.11", new / qemu.SITE):
            compileall.compile_dir(d, quiet=2, workers=0)
        old = work / "old"
        if root.exists():
            os.replace(root, old)
        os.replace(new, root)
    _smoke_test(root)
    manifest = {
        "format": qemu.FORMAT,
        "debian_suite": qemu.DEBIAN_SUITE,
        "debian_pins": qemu.DEBIAN_PACKAGES,
        "debian": debian,
        "wheels": qemu.WHEELS,
        "wheel_files": wheels,
    }
    (root / qemu.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"aarch64 sysroot ready: {root}", file=sys.stderr)


def _unpack_wheels(download: Path, site: Path) -> list[str]:
    reqs = [f"{name}=={version}" for name, version in qemu.WHEELS.items()]
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            qemu.WHEEL_PLATFORM,
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "-d",
            str(download),
            *reqs,
        ]
    )
    files = sorted(download.glob("*.whl"))
    for whl in files:
        with zipfile.ZipFile(whl) as z:
            for member in z.infolist():
                if member.filename not in qemu.WHEEL_EXCLUDE:
                    z.extract(member, site)
    return [f.name for f in files]


def _hide_host_paths(new: Path) -> None:
    """qemu's -L falls back to the host's file when the sysroot lacks one: give the guest empty
    stand-ins for the host files it would otherwise read (x86 Python packages on Debian's default
    sys.path; the x86 ld.so.cache, which the aarch64 loader would parse and skip entry by entry)."""
    for d in ("usr/lib/python3/dist-packages", "usr/local/lib/python3/dist-packages"):
        (new / d).mkdir(parents=True, exist_ok=True)
    (new / "etc").mkdir(exist_ok=True)
    (new / "etc/ld.so.cache").write_bytes(b"")


def _smoke_test(root: Path) -> None:
    code = (
        "import platform, numpy, tvm; print(platform.machine(), tvm.__version__, numpy.__version__)"
    )
    proc = subprocess.run(
        [str(qemu.python_wrapper(root)), "-c", code], capture_output=True, text=True
    )
    want = f"aarch64 {qemu.WHEELS['apache-tvm']} {qemu.WHEELS['numpy']}"
    if proc.returncode != 0 or proc.stdout.strip() != want:
        raise SetupError(
            f"the aarch64 sysroot at {root} does not import TVM under qemu:\n"
            f"{proc.stdout}{proc.stderr[-2000:]}"
        )


def _run(cmd: list[str], **kwargs) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise SetupError(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=qemu.SETUP_CMD, description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only report what is missing (exit 1 if any)"
    )
    parser.add_argument(
        "--linker",
        choices=("auto", "gcc", "zig"),
        default="auto",
        help="auto: install one only when none is there (gcc as root, else zig); "
        "gcc, zig: install that one",
    )
    args = parser.parse_args(argv)
    try:
        if not args.check:
            install(args.linker)
        gaps = missing()
    except KokoroTVMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for what, fix in gaps:
        print(f"missing: {what}; fix: {fix}")
    if not gaps:
        print(f"ok: aarch64 linker {cross.available(AARCH64)[1]}; {qemu.status()[1]}")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
