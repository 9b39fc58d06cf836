"""DVC stage `bench_e2e@<target>`: see kokoro_tvm.e2e.bench_stage."""

import argparse

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target")
    a = ap.parse_args()

    def run() -> None:
        from kokoro_tvm import artifacts, e2e

        e2e.bench_stage(stages.setup(), a.target, artifacts.ROOT)

    main(run)
