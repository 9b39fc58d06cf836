"""What does a bounded library hold live at its peak, for one input length?

usage: python benchmarks/once/activation_peak.py [--component decoder] [--bucket 1536]
           [--precision bf16] [--length 1077] [--top 12] [--artifacts artifacts] [--planned]

Walks ``main`` of the legalize stage's module binding by binding, with every symbolic length set
to ``--length`` (frames for the decoder; 510 phonemes took 1077 frames in ``bench_e2e``): a
tensor is live from the call that makes it to its last use (views, reshapes and tuple items own
no storage). Prints the peak's total, the binding where it happens and the largest tensors live
there. It reads the IR before ``tvm.compile``, so it bounds what the VM's memory plan can do
without reordering: fused kernels decide the lifetimes (a fused kernel that takes six inputs
keeps all six alive until it runs).

``--planned``: what the build's memory plan allocates instead, at the full bucket: TVM's Relax
passes up to ``StaticPlanBlockMemory`` (as ``phase_build.relax_pipeline``), then
``storage_plan.share_storage``, and the bytes of ``main``'s storages after each; beside them, the
bytes a call at ``--length`` touches (in each storage, the bytes its tensors at that length
cover), which is what the call adds to the process's resident memory under the pooled
allocator: the difference between two lengths is what the longer call costs over the shorter.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--component", default="decoder")
    ap.add_argument("--bucket", type=int, default=1536)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--length", type=int, default=1077)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--planned", action="store_true", help="the memory plan's storages")
    args = ap.parse_args()

    import tvm
    from tvm import relax, tirx

    from kokoro_tvm import artifacts

    path = artifacts.legalized_file(
        args.component, args.bucket, Path(args.artifacts), precision=args.precision
    )

    def value(expr) -> int:
        analyzer = tvm.sym.Analyzer()
        for var in tirx.analysis.undefined_vars(expr):
            analyzer.bind(var, tirx.IntImm(str(var.ty), args.length))
        return int(analyzer.simplify(expr))

    if args.planned:
        return planned(artifacts.load_ir(path), path, value, args.length)
    main_fn = artifacts.load_ir(path)["main"]

    def nbytes(ty) -> int:
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            n = 1
            for dim in ty.shape.values:
                n *= value(dim)
            return n * tvm.runtime.DataType(ty.dtype).bits // 8
        if isinstance(ty, relax.TupleType):
            return sum(nbytes(f) for f in ty.fields)
        return 0

    bindings = [b for block in main_fn.body.blocks for b in block.bindings]
    last_use: dict = {}
    for i, b in enumerate(bindings):
        relax.analysis.post_order_visit(
            b.value, lambda e, i=i: last_use.__setitem__(e, i) if isinstance(e, relax.Var) else None
        )
    relax.analysis.post_order_visit(
        main_fn.body.body,
        lambda e: last_use.__setitem__(e, len(bindings)) if isinstance(e, relax.Var) else None,
    )
    live: dict = {}
    total = peak = 0
    at, largest = 0, []
    for i, b in enumerate(bindings):
        op = getattr(b.value, "op", None)
        if isinstance(b.value, relax.Call) and getattr(op, "name", "") != "relax.reshape":
            live[b.var] = nbytes(b.var.ty)
            total += live[b.var]
        if total > peak:
            peak, at = total, i
            largest = sorted(((n, str(v.name)) for v, n in live.items()), reverse=True)
        for var in [v for v in live if last_use.get(v, -1) <= i]:
            total -= live.pop(var)
    mb = 2**20
    print(f"{path}, length {args.length}: peak {peak / mb:.0f} MB live at binding {at}:")
    print(f"  {bindings[at].var.name} = {str(bindings[at].value)[:160]}")
    for n, name in largest[: args.top]:
        if n >= mb // 10:
            print(f"  {n / mb:8.1f} MB  {name}")


def planned(mod, path: Path, value, length: int) -> None:
    import tvm

    from kokoro_tvm.compile import phase_build, storage_plan, symbolic

    passes = phase_build.memory_planning_passes()
    tvms = tvm.transform.Sequential(passes)(symbolic.reshapes_as_views(mod))
    for name, m in (("TVM's plan", tvms), ("shared", storage_plan.share_storage()(tvms))):
        sizes: dict = {}  # storage var -> bytes at the full bucket
        touched: dict = {}  # storage var -> the byte ranges a call at ``length`` writes into
        for block in m["main"].body.blocks:
            for b in block.bindings:
                op = getattr(getattr(b.value, "op", None), "name", "")
                if op == "relax.memory.alloc_storage":
                    sizes[b.var], touched[b.var] = int(b.value.args[0].values[0]), []
                elif op == "relax.memory.alloc_tensor" and b.value.args[0] in sizes:
                    storage, offset, shape, dtype = b.value.args[:4]
                    n = tvm.runtime.DataType(str(dtype.value)).bits // 8
                    for dim in shape.values:
                        n *= value(dim)
                    start = value(offset.values[0] if hasattr(offset, "values") else offset)
                    touched[storage].append((start, start + n))
        print(
            f"{path}: {name:<10} {sum(sizes.values()) / 1e6:8.1f} MB in {len(sizes)} storages,"
            f" {sum(map(_union, touched.values())) / 1e6:8.1f} MB touched at length {length}"
        )


def _union(ranges: list[tuple[int, int]]) -> int:
    """The bytes the byte ranges cover together (tensors at offsets of one storage)."""
    total, end = 0, 0
    for lo, hi in sorted(ranges):
        total += max(0, hi - max(lo, end))
        end = max(end, hi)
    return total


if __name__ == "__main__":
    main()
