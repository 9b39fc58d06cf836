"""Stage ``bench@<component>-<bucket>-<target>``: the validated library against kokoro eager and
ONNX Runtime on one thread count, interleaved; medians and ratios as DVC metrics plus a plot row."""

from __future__ import annotations

from .. import artifacts as A
from ..eval import bench
from ..params import Params


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    bench.write_outputs(bench.measure(component, bucket, target, prm, A.ROOT))
