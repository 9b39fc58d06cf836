"""DVC stage `weights`: see kokoro_tvm.pipeline.weights."""

from _common import main

from kokoro_tvm.pipeline import weights
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    main(lambda: weights.run(setup()))
