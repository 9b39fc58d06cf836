"""DVC stage `bench_cuts`: see kokoro_tvm.pipeline.bench_cuts."""

from _common import args, main

from kokoro_tvm.pipeline import bench_cuts
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    args(__doc__)
    main(lambda: bench_cuts.run(setup()))
