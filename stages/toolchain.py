"""DVC stage `toolchain`: see kokoro_tvm.pipeline.toolchain."""

from _common import main

from kokoro_tvm.pipeline import toolchain
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    main(lambda: toolchain.run(setup()))
