"""DVC stage `bench@<component>-<bucket>-<target>`: see kokoro_tvm.bench.stage."""

import argparse

from _common import main
from kokoro_tvm import bench, stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    ap.add_argument("target")
    a = ap.parse_args()
    main(lambda: bench.stage(stages.setup(), a.component, a.bucket, a.target))
