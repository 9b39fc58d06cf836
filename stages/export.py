"""DVC stage `export@<component>-<bucket>`: see kokoro_tvm.pipeline.export."""

from _common import args, main

from kokoro_tvm.pipeline import export
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket")
    main(lambda: export.run(setup(), a.component, a.bucket))
