"""DVC stages `code_<kind>`: see kokoro_tvm.pipeline.code."""

from _common import args, main
from kokoro_tvm.pipeline import code

if __name__ == "__main__":
    a = args(__doc__, "kind")
    main(lambda: code.run(a.kind))
