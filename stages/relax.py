"""DVC stage `relax@<component>-<bucket>`: see kokoro_tvm.stages.relax."""

import argparse

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    a = ap.parse_args()
    main(lambda: stages.relax(stages.setup(), a.component, a.bucket))
