"""Stage ``validate@<component>-<bucket>-<target>``: the library at several lengths inside its
bucket against kokoro in float64 (and float32 kokoro's own distance to it) on the unpadded input.
Writes the DVC metrics, bound to the bytes of the library and weights it ran (their sha256), or
fails (writing nothing) when the library misses the criterion of ``eval.validate``."""

from __future__ import annotations

from .. import artifacts as A
from ..eval import validate as V
from ..eval.reference import as_float64, load_kokoro
from ..params import Params
from ..runtime.library import load_built


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    lib = load_built(A.ROOT, component, bucket, target)  # before the slow part: fail fast
    cfg, km = load_kokoro(A.kokoro_checkpoint_file(), A.model_config_file())
    rows = V.check(lib, component, bucket, km, as_float64(km), cfg, A.load_array(A.voice_file()))
    doc = V.summary(component, bucket, target, rows)
    doc |= {"library_sha256": lib.entry["sha256"], "weights_sha256": lib.weights_sha256}
    V.raise_if_failed(doc)
    A.write_json(A.validation_file(component, bucket, target), doc)
