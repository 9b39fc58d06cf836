"""DVC stage `reference@<component>-<bucket>`: see kokoro_tvm.pipeline.reference."""

from _common import args, main

from kokoro_tvm.pipeline import reference
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket")
    main(lambda: reference.run(setup(), a.component, a.bucket))
