"""Stage ``build@<component>-<bucket>-<target>``: schedule, compile and export one library (linked
by the target's cross linker when its architecture is not the host's), with the CPU needs the
runtime checks before loading it. With a precision (``build_narrow``), the library of that
precision's legalized module for the target with the ISA it needs, or, for a target that cannot run
it, a record saying why (the runtime then keeps float32 there)."""

from __future__ import annotations

from .. import artifacts
from ..compile import bf16
from ..compile.phases import build
from ..devices import cross, isa
from ..params import Params
from ..spec import FP32, PRECISIONS


def run(prm: Params, component: str, bucket: int, target: str, precision: str = FP32) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    at = {"precision": precision}
    spec = prm.target(target)
    if precision != FP32:
        prm.check_precision(component, precision)
        spec, why = narrow_target(precision, spec)
        if spec is None:  # the folder DVC expects, holding only why this target has none
            artifacts.write_json(
                artifacts.build_info_file(component, bucket, target, **at),
                {"target": target, "precision": precision, "built": False, "reason": why},
            )
            artifacts.write_json(
                artifacts.build_time_file(component, bucket, target, **at), {"build_s": 0.0}
            )
            print(f"build: {target} has no {precision} library: {why}", flush=True)
            return
    ex, seconds, report = build(
        artifacts.load_ir(artifacts.legalized_file(component, bucket, **at)),
        spec,
        artifacts.tune_dir(component, bucket, target),
        f"{artifacts.library_name(component, bucket, precision)}-{target}",
    )
    lib = artifacts.library_file(component, bucket, target, **at)
    linker = cross.linker_for(spec)
    artifacts.export_library(ex, lib, linker)
    sig = artifacts.read_json(artifacts.signature_file(component, bucket), "signature")
    info = {
        "target": target,
        "target_spec": spec,
        "needs": isa.requirements(spec),
        "linker": linker.description if linker else "host",
        "signature": sig,
        "sha256": artifacts.sha256(lib),
        "bytes": lib.stat().st_size,
        "schedule": report.as_dict(),
    }
    if precision != FP32:  # float32's record stays the bytes it was before precision was an axis
        info |= {"precision": precision, "built": True}
    artifacts.write_json(artifacts.build_info_file(component, bucket, target, **at), info)
    # timings change from run to run: kept out of the build info, which the stages after depend on
    artifacts.write_json(
        artifacts.build_time_file(component, bucket, target, **at), {"build_s": round(seconds, 2)}
    )


def narrow_target(precision: str, spec: dict) -> tuple[dict | None, str]:
    """The TVM target a ``precision`` library of the target ``spec`` is built for, or None and
    why the target cannot run one. The tune database of the float32 library applies: the kernels
    a narrower precision replaces are hand-written, the rest are float32's own."""
    if precision == "bf16":
        return bf16.target_spec(spec)
    raise ValueError(f"no {precision} kernels; precisions: {PRECISIONS}")


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target", "precision?")
