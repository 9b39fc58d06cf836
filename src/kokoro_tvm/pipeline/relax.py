"""Stage ``relax@<component>-<bucket>``: import the exported program into Relax."""

from __future__ import annotations

from .. import artifacts as A
from ..compile.importer import load_export, to_relax
from ..config import load_model_config
from ..model import lstm_op  # noqa: F401  (registers kokoro_tvm::lstm for load_export)
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    path = A.export_file(component, bucket)
    if not path.exists():
        raise A.ArtifactError(f"{path} is missing; run `dvc repro`")
    ep = load_export(path)
    mod, sig = to_relax(
        ep, component, bucket, load_model_config(prm.model_config), prm.lstm_strategy
    )
    A.save_ir(A.relax_file(component, bucket), mod)
    A.write_json(A.signature_file(component, bucket), sig.as_dict())
