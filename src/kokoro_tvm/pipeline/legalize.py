"""Stage ``legalize@<component>-<bucket>``: lower Relax to TIR and fuse (target independent)."""

from __future__ import annotations

from .. import artifacts
from ..compile.phases import legalize
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    artifacts.save_ir(
        artifacts.legalized_file(component, bucket),
        legalize(
            artifacts.load_ir(artifacts.relax_file(component, bucket)), f"{component}-{bucket}"
        ),
    )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket")
