"""DVC stage `bench_summary@<target>`: see kokoro_tvm.pipeline.bench_summary."""

from _common import args, main

from kokoro_tvm.pipeline import bench_summary
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "target")
    main(lambda: bench_summary.run(setup(), a.target))
