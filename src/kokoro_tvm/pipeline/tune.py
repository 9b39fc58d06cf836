"""Stage ``tune@<component>-<bucket>-<target>``: optional MetaSchedule search.

``tune.trials`` trials per kernel; only the records that beat the rules are kept. ``trials: 0``
(the default) writes an empty database without loading anything. Candidates are measured where
the target's libraries run (``artifacts/devices/<target>.json``): on every core of this machine,
or on every free device of the RPC tracker that ``devices.<target>`` names, several at once. A
database is tuned once and reused, so the runtime's thread count (``runtime.num_threads``) is not
an input of it.
"""

from __future__ import annotations

import os

from .. import artifacts
from ..atomic import atomic_dir
from ..compile import metaschedule
from ..params import Params


def run(prm: Params, component: str, bucket: int, target: str) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    threads = os.cpu_count() or 1
    if prm.tune.trials:
        os.environ["TVM_NUM_THREADS"] = str(threads)  # before the first TVM call
    with atomic_dir(artifacts.tune_dir(component, bucket, target)) as tmp:
        device = (
            artifacts.read_json(artifacts.device_file(target), f"the device record of {target}")
            if prm.tune.trials
            else None
        )
        report = metaschedule.tune(
            lambda: artifacts.load_ir(artifacts.legalized_file(component, bucket)),
            prm.target(target),
            prm.tune.trials,
            tmp,
            threads,
            seed=prm.model.seed,
            device=device,
        )
        artifacts.write_json(tmp / artifacts.TUNE_REPORT, {"target": target, **report})


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target")
