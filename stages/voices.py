"""DVC stage `voices`: see kokoro_tvm.pipeline.voices."""

from _common import main

from kokoro_tvm.pipeline import voices
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    main(lambda: voices.run(setup()))
