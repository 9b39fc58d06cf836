"""Stage ``export@<component>-<bucket>``: ``torch.export`` of one component at one bucket.

Graphs do not depend on weight values, so export uses seeded random weights: a new checkpoint
then reruns only ``weights`` and what reads it, never a compile. The ``.pt2`` keeps the graph and
buffers, not the parameter values (``weights`` has those). With ``shapes.<axis>: bounded`` the
export is ``model.bounded``'s: kokoro unmasked, its length a ``Dim`` up to the bucket.
"""

from __future__ import annotations

import torch

from .. import artifacts as A
from ..compile.export import export, without_parameter_values
from ..config import load_model_config
from ..model import bounded
from ..model.kmodel import random_kmodel
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    cfg = load_model_config(prm.model_config)
    km = random_kmodel(cfg, seed=0)
    exporter = bounded.export if prm.shapes(component) == "bounded" else export
    ep = without_parameter_values(exporter(component, bucket, km, cfg))
    with A.atomic_path(A.export_file(component, bucket), suffix=".pt2") as tmp:
        torch.export.save(ep, tmp)
