"""Stage ``devices@<target>``: where the target's libraries run for validate and bench.

It runs on every ``dvc repro`` (``always_changed``: the CPU under a cache can change between
runs) and rewrites the same bytes while the device stays the same, so DVC reruns the stages
after it only when the device changed (``devices.resolve`` says what the record holds). It
prints one line per target: where it is validated, or that it is not and how to fix that.
"""

from __future__ import annotations

from .. import artifacts
from ..devices import isa, resolve
from ..params import Params


def run(prm: Params, target: str) -> dict:
    record = resolve.resolve(target, isa.requirements(prm.target(target)), prm.device(target))
    artifacts.write_json(artifacts.device_file(target), record)
    print(resolve.describe(record), flush=True)
    return record


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "target")
