"""DVC stage `bench_summary@<target>`: see kokoro_tvm.bench.write_summary."""

import argparse

from _common import main
from kokoro_tvm import bench, stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target")
    a = ap.parse_args()
    main(lambda: bench.write_summary(a.target, stages.setup()))
