"""DVC stage `bench_e2e@<target>`: see kokoro_tvm.pipeline.bench_e2e."""

from _common import args, main
from kokoro_tvm.pipeline import bench_e2e
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "target")
    main(lambda: bench_e2e.run(setup(), a.target))
