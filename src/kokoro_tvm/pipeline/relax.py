"""Stage ``relax@<component>-<bucket>``: import the exported program into Relax."""

from __future__ import annotations

from .. import artifacts
from ..compile.importer import load_export, to_relax
from ..config import load_model_config
from ..model import lstm_op  # noqa: F401  (registers kokoro_tvm::lstm for load_export)
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    path = artifacts.export_file(component, bucket)
    if not path.exists():
        raise artifacts.ArtifactError(f"{path} is missing; run `dvc repro`")
    ep = load_export(path)
    mod, sig = to_relax(
        ep, component, bucket, load_model_config(prm.model.config), prm.lstm.strategy
    )
    artifacts.save_ir(artifacts.relax_file(component, bucket), mod)
    artifacts.write_json(artifacts.signature_file(component, bucket), sig.as_dict())


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket")
