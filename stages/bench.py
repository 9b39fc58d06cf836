"""DVC stage `bench@<component>-<bucket>-<target>`: see kokoro_tvm.pipeline.bench."""

from _common import args, main

from kokoro_tvm.pipeline import bench
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket", "target")
    main(lambda: bench.run(setup(), a.component, a.bucket, a.target))
