"""DVC stage `bench_summary@<target>`: see kokoro_tvm.stages.bench_summary."""

import argparse

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target")
    a = ap.parse_args()
    main(lambda: stages.bench_summary(stages.setup(), a.target))
