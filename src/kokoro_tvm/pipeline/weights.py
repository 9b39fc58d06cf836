"""Stage ``weights``: materialize the checkpoint once for every bucket and target.

Writes one ``.npz`` per component: what its libraries take after their inputs.
"""

from __future__ import annotations

from .. import artifacts as A
from ..model.checkpoint import load
from ..model.components import component_weights
from ..params import Params
from ..spec import COMPONENTS


def run(prm: Params) -> None:
    cfg, km = load(prm.model_config, prm.checkpoint, prm.seed)
    for component in COMPONENTS:
        arrays = {k: v.numpy() for k, v in component_weights(component, km).items()}
        A.save_weights(A.weights_file(component), arrays)
    A.write_json(A.weights_dir() / "weights.json",
                 {"config": prm.model_config, "checkpoint": prm.checkpoint, "seed": prm.seed})
