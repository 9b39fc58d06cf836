"""DVC stage `devices@<target>`: see kokoro_tvm.pipeline.devices."""

from _common import args, main

from kokoro_tvm.pipeline import devices
from kokoro_tvm.pipeline.common import setup

if __name__ == "__main__":
    a = args(__doc__, "target")
    main(lambda: devices.run(setup(), a.target))
