"""Stage ``legalize@<component>-<bucket>``: lower Relax to TIR and fuse (target independent).
With a precision (``legalize_narrow``, params ``precision``), the same module legalized with that
precision's kernels (``phase_legalize.legalize``), beside the float32 one."""

from __future__ import annotations

from .. import artifacts
from ..compile.phases import legalize
from ..params import Params
from ..spec import FP32


def run(prm: Params, component: str, bucket: int, precision: str = FP32) -> None:
    prm.check_bucket(component, bucket)
    if precision != FP32:
        prm.check_precision(component, precision)
    artifacts.save_ir(
        artifacts.legalized_file(component, bucket, precision=precision),
        legalize(
            artifacts.load_ir(artifacts.relax_file(component, bucket)),
            artifacts.library_name(component, bucket, precision),
            precision=precision,
        ),
    )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "precision?")
