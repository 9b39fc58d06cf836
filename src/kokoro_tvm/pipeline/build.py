"""Stage ``build@<component>-<bucket>-<target>``: schedule, compile and export one library (linked
by the target's cross linker when its architecture is not the host's), with the CPU needs the
runtime checks before loading it."""

from __future__ import annotations

from .. import artifacts
from ..compile.phases import build
from ..devices import cross, isa
from ..params import Params


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    ex, seconds, report = build(
        artifacts.load_ir(artifacts.legalized_file(component, bucket)),
        prm.target(target),
        artifacts.tune_dir(component, bucket, target),
        f"{component}-{bucket}-{target}",
    )
    lib = artifacts.library_file(component, bucket, target)
    linker = cross.linker_for(prm.target(target))
    artifacts.export_library(ex, lib, linker)
    sig = artifacts.read_json(artifacts.signature_file(component, bucket), "signature")
    artifacts.write_json(
        artifacts.build_info_file(component, bucket, target),
        {
            "target": target,
            "target_spec": prm.target(target),
            "needs": isa.requirements(prm.target(target)),
            "linker": linker.description if linker else "host",
            "signature": sig,
            "sha256": artifacts.sha256(lib),
            "bytes": lib.stat().st_size,
            "schedule": report.as_dict(),
        },
    )
    # timings change from run to run: kept out of the build info, which the stages after depend on
    artifacts.write_json(
        artifacts.build_time_file(component, bucket, target), {"build_s": round(seconds, 2)}
    )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target")
