"""Exhaustive check of the sin lowering (``compile.legalizations.sin.sin_poly``) over every float32
|x| <= LIMIT on one target.

usage: python benchmarks/sin_accuracy.py '{"kind": "llvm", "mcpu": "x86-64-v3"}' [limit] [--neg]
Prints the max abs error against float64 np.sin of the float32 input, for |x| <= 1e6 and for
|x| <= limit, and where it occurs. Negative inputs are checked for exact oddness
(f(-x) == -f(x) bitwise) on every 7th chunk unless --neg checks them all.
"""

import json
import sys
import time

import numpy as np
import tvm
import tvm.s_tir as s_tir
from tvm import te

from kokoro_tvm.compile.legalizations.sin import sin_poly

CH = 1 << 24


def build(target):
    x = te.placeholder((CH,), "float32", name="x")
    sch = s_tir.Schedule(te.create_prim_func([x, sin_poly(x)]))
    (loop,) = sch.get_loops(sch.get_sblock("sin_poly"))
    o, i = sch.split(loop, [None, 8])
    sch.parallel(o)
    sch.vectorize(i)
    return tvm.compile(sch.mod, target=tvm.target.Target(target))


def main():
    target = json.loads(sys.argv[1])
    limit = (
        float(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 1.647e6
    )
    allneg = "--neg" in sys.argv
    lib = build(target)
    end = int(np.float32(limit).view(np.uint32)) + 1
    b1e6 = int(np.float32(1e6).view(np.uint32))
    out = tvm.runtime.tensor(np.zeros(CH, np.float32))
    worst = {"1e6": (0.0, 0.0), "limit": (0.0, 0.0)}
    odd_bad = 0
    t0 = time.time()
    for k, start in enumerate(range(0, end, CH)):
        bits = np.arange(start, start + CH, dtype=np.uint32)
        x = bits.view(np.float32)
        lib(tvm.runtime.tensor(x), out)
        y = out.numpy()
        valid = bits < end
        err = np.abs(y.astype(np.float64) - np.sin(x.astype(np.float64)))
        err[~valid] = 0
        e6 = np.where(bits <= b1e6, err, 0)
        for key, e in (("1e6", e6), ("limit", err)):
            j = int(np.argmax(e))
            if e[j] > worst[key][0]:
                worst[key] = (float(e[j]), float(x[j]))
        if allneg or k % 7 == 0:
            lib(tvm.runtime.tensor(-x), out)
            yn = out.numpy()
            # sin(-0) comes out +0 (documented), so zeros are left out of the oddness check
            odd_bad += int(
                np.count_nonzero(
                    (yn.view(np.uint32) != (-y).view(np.uint32))[valid]
                    & ~np.isnan(y[valid])
                    & (x[valid] != 0)
                )
            )
    print(
        json.dumps(
            {
                "target": target,
                "max_err_abs_le_1e6": worst["1e6"][0],
                "at": worst["1e6"][1],
                "limit": limit,
                "max_err_abs_le_limit": worst["limit"][0],
                "at_limit": worst["limit"][1],
                "odd_mismatches": odd_bad,
                "neg_checked": "all" if allneg else "every 7th chunk",
                "seconds": round(time.time() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
