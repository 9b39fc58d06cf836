"""DVC stage `relax@<component>-<bucket>`: see kokoro_tvm.pipeline.relax."""

from _common import args, main

from kokoro_tvm.pipeline import relax
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket")
    main(lambda: relax.run(setup(), a.component, a.bucket))
