"""DVC stage `tune@<component>-<bucket>-<target>`: see kokoro_tvm.pipeline.tune."""

from _common import args, main

from kokoro_tvm.pipeline import tune
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket", "target")
    main(lambda: tune.run(setup(), a.component, a.bucket, a.target))
