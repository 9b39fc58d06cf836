"""Which device runs a target's libraries for validate and bench, as a record DVC can track.

Every target builds on any host; executing its libraries needs a CPU that has its ISA. In order:

1. ``devices.<target>`` names a tracker: the board registered there under the key (real timings);
2. this CPU runs the target: the build host itself;
3. an aarch64 target and a usable qemu-user: an RPC server the pipeline starts under qemu
   (correctness only: emulated time means nothing);
4. otherwise none: the target is built but not validated, and the manifest leaves it out.

The record (``artifacts/devices/<target>.json``) is the validate and bench stages' dependency, so
it holds what identifies the device and nothing that varies between hosts giving the same
device: a host record lists the *target's* ISA needs, not this CPU's, so a cache moved to
another CPU reruns exactly the validations whose device changed (v4 on an AVX2-only host goes
from ``host`` to ``none``; v3 stays ``host``).
"""

from __future__ import annotations

from typing import Any

from . import isa

HOST, RPC, QEMU, NONE = "host", "rpc", "qemu", "none"


def resolve(
    target: str,
    needs: dict[str, Any],
    setting: Any,
    qemu_status: tuple[bool, str] | None = None,
    host: tuple[str, frozenset[str]] | None = None,
) -> dict[str, Any]:
    """The device record of ``target``; ``needs``: ``isa.requirements`` of its spec; ``setting``:
    ``devices.<target>`` (``auto``, ``qemu``, ``none`` or a ``TrackerDevice``). ``qemu_status`` and
    ``host`` (arch, features) default to this machine's; tests pass others."""
    base = {"target": target, "arch": needs["arch"], "isa": needs["isa"]}
    if hasattr(setting, "key"):
        return base | {
            "device": RPC,
            "key": setting.key,
            "tracker": setting.tracker,
            "timeout_s": setting.timeout_s,
            "emulated": False,
        }
    if setting == NONE:
        return base | _none(
            target,
            f"params.yaml sets 'devices.{target}: none'",
            f"remove 'devices.{target}' from params.yaml to validate it",
        )
    arch, features = host or (isa.host_arch(), None)
    lacks = isa.missing(needs, arch, features)
    if not lacks and setting != QEMU:
        return base | {"device": HOST, "emulated": False}
    if needs["arch"] == "aarch64":
        if qemu_status is None:
            from . import qemu

            qemu_status = qemu.status()
        usable, why = qemu_status
        if usable:
            return base | {"device": QEMU, "emulated": True}
        return base | _none(
            target,
            f"no aarch64 device: {why}",
            f"or attach a board: params.yaml 'devices.{target}: {{tracker: HOST:9190, key: NAME}}'",
        )
    if setting == QEMU:
        return base | _none(
            target,
            f"'devices.{target}: qemu' but qemu here emulates aarch64 only",
            f"set 'devices.{target}' to auto or a tracker",
        )
    return base | _none(
        target,
        f"this CPU lacks {', '.join(lacks)}",
        f"run `dvc repro` on a CPU that has them, or attach one: params.yaml "
        f"'devices.{target}: {{tracker: HOST:9190, key: NAME}}'",
    )


def _none(target: str, reason: str, fix: str) -> dict[str, Any]:
    return {"device": NONE, "emulated": False, "reason": reason, "fix": fix}


def describe(record: dict[str, Any]) -> str:
    """One line for ``dvc repro``'s log: where the target's libraries run, or why nowhere."""
    t, kind = record["target"], record["device"]
    if kind == HOST:
        return f"{t}: validated and timed on this CPU"
    if kind == QEMU:
        return f"{t}: validated under qemu-user (emulated: correctness only, no timings)"
    if kind == RPC:
        return (
            f"{t}: validated and timed on the tracker's device '{record['key']}' "
            f"({record['tracker']})"
        )
    return (
        f"{t}: built but NOT validated ({record['reason']}); the manifest leaves it out. "
        f"Fix: {record['fix']}"
    )
