"""DVC stage `bench_e2e`: see kokoro_tvm.pipeline.bench_e2e."""

from _common import args, main

from kokoro_tvm.pipeline import bench_e2e
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    args(__doc__)
    main(lambda: bench_e2e.run(setup()))
