"""DVC stage `manifest`: see kokoro_tvm.pipeline.manifest."""

from _common import main

from kokoro_tvm.pipeline import manifest
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    main(lambda: manifest.run(setup()))
