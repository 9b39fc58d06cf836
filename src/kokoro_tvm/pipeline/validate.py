"""Stage ``validate@<component>-<bucket>-<target>``: the library at several lengths inside its
bucket against kokoro in float64 (and float32 kokoro's own distance to it) on the unpadded input,
on the device that runs the target (``devices.resolve``): this CPU, a board through an RPC
tracker, or qemu-user (at ``EMULATED_LENGTHS`` lengths). Writes the DVC metrics, bound to the
bytes of the library and weights it ran (their sha256), or fails (writing nothing) when the
library misses the criterion of ``eval.verdicts``. With no device, it records that the library
was not validated, and the manifest leaves the target out.

Beside the lengths, each of kokoro's nine languages' sentences that fits the bucket
(``eval.languages``; not under emulation), each verdict kept in the metrics. A narrower precision's
library (``validate_narrow``) is held to the listener's criterion; one its target could not build,
or whose ISA this CPU lacks, is recorded as not validated and stays out of the manifest.

A validated library's weights are also written as it took them (``kokoro_tvm.packed``: the
outputs of its ``main_transform_params``, computed here because that transform is the target's
own code, which runs only on the target's device), so the runtime maps the very values
validation ran instead of transforming the raw weights at every load."""

from __future__ import annotations

from typing import Any

from .. import artifacts, packed
from ..devices import isa
from ..devices.resolve import HOST, NONE
from ..devices.session import open_session
from ..eval import verdicts
from ..eval.case_files import cases_from_arrays
from ..eval.cases import lengths_for
from ..eval.languages import english_text
from ..params import Params
from ..runtime.built import Built, load_built
from ..spec import FP32


def run(prm: Params, component: str, bucket: int, target: str, precision: str = FP32) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    at = {"precision": precision}
    device = artifacts.read_json(artifacts.device_file(target), "device record")
    out = artifacts.validation_file(component, bucket, target, **at)
    packed_out = artifacts.packed_file(component, bucket, target, **at)
    not_run = _not_run(component, bucket, target, precision, device)
    if not_run is not None:
        packed.write(packed_out, [])  # nothing runs it: an empty file the manifest never lists
        artifacts.write_json(
            out,
            {"component": component, "bucket": bucket, "target": target}
            | ({} if precision == FP32 else {"precision": precision})
            | {"validated": False, **not_run},
        )
        return
    cfg = artifacts.read_json(artifacts.model_config_file(), "model config")
    with artifacts.load_array(artifacts.reference_file(component, bucket)) as z:  # an .npz
        cases = cases_from_arrays(component, bucket, dict(z), cfg)
    emulated = device["emulated"]
    lengths = lengths_for(component, bucket, emulated=emulated)
    # an emulated device runs the lengths' edges only; the languages' sentences run where the
    # target runs at full speed (the host or a board)
    named = {} if emulated else {k: c for k, c in cases.items() if isinstance(k, str)}
    with open_session(device) as session:
        lib = load_built(
            artifacts.ROOT, Built(component, bucket, target, precision), session=session
        )
        rows = verdicts.check_cases(lib, component, {n: cases[n] for n in lengths}, precision)
        languages = verdicts.check_cases(
            lib, component, named, precision, {k: english_text(k) for k in named}
        )
        weights = [p.numpy() for p in lib.params]  # as the validated library took them
    doc = verdicts.summary(component, bucket, target, rows, precision, languages or None)
    doc |= {
        "validated": True,
        "device": device["device"],
        "emulated": emulated,
        "library_sha256": lib.entry.sha256,
        "weights_sha256": lib.weights_sha256,
    }
    verdicts.raise_if_failed(doc)
    doc["packed_sha256"] = packed.write(packed_out, weights)
    artifacts.write_json(out, doc)


def _not_run(
    component: str, bucket: int, target: str, precision: str, device: dict[str, Any]
) -> dict[str, Any] | None:
    """Why nothing can validate the library (the record's ``device``, ``reason`` and ``fix``), or
    None: no device runs the target; or a narrower precision's library was not built for it (no
    ISA for it), or this CPU runs the target but lacks what that precision needs."""
    if device["device"] == NONE:
        return {"device": NONE, "reason": device["reason"], "fix": device["fix"]}
    if precision == FP32:
        return None
    info = artifacts.read_json(
        artifacts.build_info_file(component, bucket, target, precision=precision), "build info"
    )
    if not info["built"]:
        return {"device": NONE, "built": False, "reason": info["reason"], "fix": "none needed"}
    lacks = isa.missing(info["needs"]) if device["device"] == HOST else []
    if lacks:
        return {
            "device": NONE,
            "reason": f"this CPU runs {target} but lacks "
            f"{', '.join(lacks)}, which {precision} needs",
            "fix": f"run `dvc repro` on a CPU with it to validate the {precision} libraries",
        }
    return None


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target", "precision?")
