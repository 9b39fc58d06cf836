"""Stage ``export@<component>-<bucket>``: ``torch.export`` of one component at one bucket.

Graphs do not depend on weight values, so export uses seeded random weights: a new checkpoint
then reruns only ``weights`` and what reads it, never a compile. The ``.pt2`` keeps the graph and
buffers, not the parameter values (``weights`` has those). ``shapes.<axis>`` picks the
library shape (``compile.torch_export``): bounded (the default) or padded.
"""

from __future__ import annotations

import io

import torch

from .. import artifacts
from ..compile.torch_export import export, without_parameter_values, without_source_locations
from ..config import load_model_config
from ..model.kmodel import random_kmodel
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    cfg = load_model_config(prm.model.config)
    km = random_kmodel(cfg, seed=0)
    ep = export(component, bucket, km, cfg, prm.shapes.of(component))
    ep = without_source_locations(without_parameter_values(ep))
    # saved through a buffer: given a path, torch names the archive's root folder after the file,
    # and the atomic write's random temp name made every export's bytes differ
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    with artifacts.atomic_path(artifacts.export_file(component, bucket), suffix=".pt2") as tmp:
        tmp.write_bytes(buf.getvalue())


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket")
