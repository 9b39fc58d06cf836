"""Stage ``bench@<component>-<bucket>-<target>``: the validated library against kokoro eager and
ONNX Runtime on one thread count, interleaved; medians and ratios as DVC metrics plus a plot row.

What is measured depends on the target's device (``devices.resolve``): on this CPU, the three
runtimes side by side; on a board through a tracker, the library's own time there (kokoro and
ONNX Runtime do not run on the board); under qemu, no time at all (emulated time means nothing),
only the validation verdict on that device, marked ``emulated``; with no device, a record that
nothing ran."""

from __future__ import annotations

from typing import Any

from .. import artifacts
from ..devices.resolve import HOST, NONE, QEMU
from ..eval import latency
from ..params import Params


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    device = artifacts.read_json(artifacts.device_file(target), "device record")
    if device["device"] == HOST:
        result = latency.measure(component, bucket, target, prm, artifacts.ROOT)
    elif device["device"] == NONE:
        result = _untimed(component, bucket, target, device, reason=device["reason"])
    elif device["device"] == QEMU:
        check = artifacts.read_json(
            artifacts.validation_file(component, bucket, target), "validation metrics"
        )
        result = _untimed(
            component, bucket, target, device, reason="emulated device: correctness only"
        )
        result |= {
            "validation_ok": check["ok"],
            "validated_lengths": sorted(int(n) for n in check["lengths"]),
            **{k: v for k, v in check.items() if k.startswith("worst_")},
        }
    else:
        result = latency.measure_on_board(component, bucket, target, prm, device, artifacts.ROOT)
    latency.write_outputs(result)


def _untimed(
    component: str, bucket: int, target: str, device: dict[str, Any], reason: str
) -> dict[str, Any]:
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": False,
        "device": device["device"],
        "emulated": device["emulated"],
        "reason": reason,
    }
