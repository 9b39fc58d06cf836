"""DVC stage `code`: the code fingerprint of every stage kind (kokoro_tvm.pipeline.code)."""

from _common import args, main

from kokoro_tvm.pipeline import code

if __name__ == "__main__":
    args(__doc__)
    main(code.run)
