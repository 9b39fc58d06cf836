"""DVC stage `manifest`: see kokoro_tvm.stages.manifest."""

from _common import main
from kokoro_tvm import stages

if __name__ == "__main__":
    main(lambda: stages.manifest(stages.setup()))
