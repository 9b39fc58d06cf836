"""DVC stage `weights`: see kokoro_tvm.stages.weights."""

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    main(lambda: stages.weights(stages.setup()))
