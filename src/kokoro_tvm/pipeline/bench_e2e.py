"""Stage ``bench_e2e@<target>``: the whole runtime against eager kokoro, from the manifest.

``e2e.measure_rtf`` on the validated libraries at ``e2e.default_lengths`` of the token buckets,
with the thread count and rounds of params (``runtime.num_threads``, ``bench.repeats``).
"""

from __future__ import annotations

from .. import artifacts as A
from ..eval import e2e
from ..eval.timing import apply_threads, cpu_name
from ..model.checkpoint import load
from ..params import Params
from ..runtime.synthesizer import KokoroTVM


def run(prm: Params, target: str) -> None:
    prm.check_target(target)
    threads = apply_threads(prm.num_threads)  # before the first TVM call
    tts = KokoroTVM.from_manifest(A.ROOT, target=target, num_threads=threads)
    _, km = load(prm.model_config, prm.checkpoint, prm.seed)
    rows = e2e.measure_rtf(tts, km, e2e.default_lengths(list(prm.tokens)), prm.bench_repeats)
    A.write_json(A.bench_e2e_file(target), {"target": target, "threads": threads, "repeats": prm.bench_repeats,
                                            "cpu": cpu_name(), **rows})
