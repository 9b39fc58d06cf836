"""DVC stage `legalize@<component>-<bucket>`: see kokoro_tvm.pipeline.legalize."""

from _common import args, main

from kokoro_tvm.pipeline import legalize
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket")
    main(lambda: legalize.run(setup(), a.component, a.bucket))
