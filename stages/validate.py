"""DVC stage `validate@<component>-<bucket>-<target>`: see kokoro_tvm.pipeline.validate."""

from _common import args, main

from kokoro_tvm.pipeline import validate
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "component", "bucket", "target")
    main(lambda: validate.run(setup(), a.component, a.bucket, a.target))
