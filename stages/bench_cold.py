"""DVC stage `bench_cold`: see kokoro_tvm.pipeline.bench_cold."""

from _common import args, main

from kokoro_tvm.pipeline import bench_cold
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    args(__doc__)
    main(lambda: bench_cold.run(setup()))
