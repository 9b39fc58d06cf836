"""DVC stage `toolchain`: see kokoro_tvm.stages.toolchain."""

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    main(lambda: stages.toolchain(stages.setup()))
