"""DVC stage `bench@<component>-<bucket>-<target>`: see kokoro_tvm.stages.bench."""

import argparse

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    ap.add_argument("target")
    a = ap.parse_args()
    main(lambda: stages.bench(stages.setup(), a.component, a.bucket, a.target))
