"""DVC stage `build@<component>-<bucket>-<target>`: see kokoro_tvm.pipeline.build."""

from _common import args, main

from kokoro_tvm.pipeline import build
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket", "target")
    main(lambda: build.run(setup(), a.component, a.bucket, a.target))
