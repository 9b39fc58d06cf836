"""Stage ``legalize@<component>-<bucket>``: lower Relax to TIR and fuse (target independent)."""

from __future__ import annotations

from .. import artifacts as A
from ..compile.phases import legalize
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    A.save_ir(
        A.legalized_file(component, bucket),
        legalize(A.load_ir(A.relax_file(component, bucket)), f"{component}-{bucket}"),
    )
