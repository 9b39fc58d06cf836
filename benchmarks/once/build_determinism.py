"""Is a library's build reproducible? Build it N times (default 2), each in a fresh process, and
compare.

usage: python benchmarks/once/build_determinism.py [--component decoder] [--bucket 1536]
           [--target x86_64_v4] [--precision fp32] [--builds 2] [--artifacts artifacts]

Each build runs what ``build@…`` (``build_narrow@…`` for ``--precision bf16``) runs
(``pipeline/build.py``: ``compile.phases.build`` on the legalize stage's output with the tune
stage's database, params.yaml's target, narrowed for the precision, the target's linker) in its
own interpreter, as two stages on two machines would, each writing to a path of another length
(with identical paths, identical processes lay out their heaps alike and hide an
address-dependent order). Prints each build's sha256 and, for a build that differs from the
first, the symbols whose sizes differ (``nm -S``) and the functions whose code differs: a
function compiled differently, rather than the same functions laid out in another order.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys
from pathlib import Path
from kokoro_tvm import artifacts, params
from kokoro_tvm.compile.phases import build
from kokoro_tvm.devices import cross
from kokoro_tvm.pipeline.build import narrow_target
component, bucket, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
root, out, precision = Path(sys.argv[4]), Path(sys.argv[5]), sys.argv[6]
spec = params.load().target(target)
if precision != "fp32":
    spec, why = narrow_target(precision, spec)
    if spec is None:
        raise SystemExit(f"{target} has no {precision} library: {why}")
legal = artifacts.load_ir(artifacts.legalized_file(component, bucket, root, precision=precision))
ex, _, _ = build(legal, spec, artifacts.tune_dir(component, bucket, target, root))
artifacts.export_library(ex, out, cross.linker_for(spec))
"""


def symbol_sizes(lib: Path) -> dict[str, str]:
    out = subprocess.run(["nm", "-S", str(lib)], check=True, capture_output=True, text=True).stdout
    return {f[3]: f[1] for f in (line.split() for line in out.splitlines()) if len(f) == 4}


def code_of(lib: Path) -> dict[str, bytes]:
    """Each function's machine code (``.text`` symbols), to name the functions that differ when
    their sizes do not."""
    sections = subprocess.run(
        ["readelf", "-SW", str(lib)], check=True, capture_output=True, text=True
    ).stdout
    lines = sections.splitlines()
    text = next(line.split("]", 1)[1].split() for line in lines if " .text " in line)
    addr, offset = int(text[2], 16), int(text[3], 16)
    data = lib.read_bytes()
    out = subprocess.run(["nm", "-S", str(lib)], check=True, capture_output=True, text=True).stdout
    code = {}
    for f in (line.split() for line in out.splitlines()):
        if len(f) == 4 and f[2] in "tT":
            start = int(f[0], 16) - addr + offset
            code[f[3]] = data[start : start + int(f[1], 16)]
    return code


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--component", default="decoder")
    ap.add_argument("--bucket", type=int, default=1536)
    ap.add_argument("--target", default="x86_64_v4")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--builds", type=int, default=2)
    ap.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # output paths of different lengths, as checkouts in different places have: the only
        # difference between the processes, it shifts where the heap puts TVM's objects
        libs = [Path(tmp, "d" * (i + 1), "lib.so") for i in range(a.builds)]
        for lib in libs:
            lib.parent.mkdir()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    a.component,
                    str(a.bucket),
                    a.target,
                    str(a.artifacts),
                    str(lib),
                    a.precision,
                ],
                check=True,
            )
        shas = [hashlib.sha256(lib.read_bytes()).hexdigest() for lib in libs]
        name = f"{a.component}-{a.bucket}" + ("" if a.precision == "fp32" else f"-{a.precision}")
        print(f"{name} {a.target}, {a.builds} builds in {a.builds} processes:")
        first = symbol_sizes(libs[0])
        for i, (lib, sha) in enumerate(zip(libs, shas)):
            line = f"  build {i + 1}: {sha}"
            if sha != shas[0]:
                other = symbol_sizes(lib)
                changed = sorted(s for s in first.keys() & other.keys() if first[s] != other[s])
                code, code1 = code_of(lib), code_of(libs[0])
                recoded = sorted(s for s in code.keys() & code1.keys() if code[s] != code1[s])
                line += (
                    " differs from build 1; symbols of another size: "
                    f"{', '.join(f'{s} ({first[s]} / {other[s]})' for s in changed) or 'none'}"
                    f"; functions with other code: {', '.join(recoded) or 'none'}"
                )
            print(line)
        print("identical" if len(set(shas)) == 1 else f"{len(set(shas))} different libraries")


if __name__ == "__main__":
    main()
