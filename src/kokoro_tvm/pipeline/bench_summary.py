"""Stage ``bench_summary@<target>``: one file per component with every bucket's ratios, the
lines of the speedup plot (stages cannot share an output file, so rows are gathered here)."""

from __future__ import annotations

from .. import artifacts
from ..params import Params
from ..spec import COMPONENTS


def run(prm: Params, target: str) -> None:
    prm.check_target(target)
    for component in COMPONENTS:
        rows = [
            artifacts.read_json(artifacts.bench_plot_file(component, b, target), "bench plot row")[
                0
            ]
            for b in prm.buckets.of(component)
        ]
        artifacts.write_json(
            artifacts.bench_summary_file(component, target), sorted(rows, key=lambda r: r["bucket"])
        )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "target")
