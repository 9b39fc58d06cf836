"""Stage ``validate@<component>-<bucket>-<target>``: the library at several lengths inside its
bucket against kokoro in float64 (and float32 kokoro's own distance to it) on the unpadded input,
on the device that runs the target (``devices.resolve``): this CPU, a board through an RPC
tracker, or qemu-user (at ``EMULATED_LENGTHS`` lengths). Writes the DVC metrics, bound to the
bytes of the library and weights it ran (their sha256), or fails (writing nothing) when the
library misses the criterion of ``eval.verdicts``. With no device, it records that the library
was not validated, and the manifest leaves the target out.

A validated library's weights are also written as it took them (``kokoro_tvm.packed``: the
outputs of its ``main_transform_params``, computed here because that transform is the target's
own code, which runs only on the target's device), so the runtime maps the very values
validation ran instead of transforming the raw weights at every load."""

from __future__ import annotations

from .. import artifacts, packed
from ..devices.resolve import NONE
from ..devices.session import open_session
from ..eval import verdicts
from ..eval.case_files import cases_from_arrays
from ..eval.cases import lengths_for
from ..params import Params
from ..runtime.built import load_built


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    device = artifacts.read_json(artifacts.device_file(target), "device record")
    out = artifacts.validation_file(component, bucket, target)
    packed_out = artifacts.packed_file(component, bucket, target)
    if device["device"] == NONE:
        packed.write(packed_out, [])  # nothing runs it: an empty file the manifest never lists
        artifacts.write_json(
            out,
            {
                "component": component,
                "bucket": bucket,
                "target": target,
                "validated": False,
                "device": NONE,
                "reason": device["reason"],
                "fix": device["fix"],
            },
        )
        return
    cfg = artifacts.read_json(artifacts.model_config_file(), "model config")
    with artifacts.load_array(artifacts.reference_file(component, bucket)) as z:  # an .npz
        cases = cases_from_arrays(component, bucket, dict(z), cfg)
    lengths = lengths_for(component, bucket, emulated=device["emulated"])
    with open_session(device) as session:
        lib = load_built(artifacts.ROOT, component, bucket, target, session=session)
        rows = verdicts.check_cases(lib, component, {n: cases[n] for n in lengths})
        weights = [p.numpy() for p in lib.params]  # as the validated library took them
    doc = verdicts.summary(component, bucket, target, rows)
    doc |= {
        "validated": True,
        "device": device["device"],
        "emulated": device["emulated"],
        "library_sha256": lib.entry.sha256,
        "weights_sha256": lib.weights_sha256,
    }
    verdicts.raise_if_failed(doc)
    doc["packed_sha256"] = packed.write(packed_out, weights)
    artifacts.write_json(out, doc)


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target")
