"""What the build adds to TVM 0.27's own passes where TVM's output depends on the process (object
addresses, hash order) or cannot cross an RPC connection: each pass names the behaviour it works
around. ``phases`` puts them in the flow."""

from __future__ import annotations


def mark_noalias():
    """A PrimFunc pass giving every kernel without one the ``tirx.noalias`` attribute.

    Works around TVM 0.27's LLVM codegen, which reads the flag when it *declares* a function and
    declares every function of the module (sorted by symbol) before emitting any body: each
    kernel is emitted with the flag of the alphabetically last one. When that one lacks it (a
    symbolic-shape module's VM ``shape_func``; any kernel written without it), every kernel
    loses ``noalias`` and shares one "tvm-alias" TBAA tag, so LLVM reloads and stores
    accumulators around every store. Every buffer a kernel here gets is
    its own allocation or a view the kernel only reads, so the promise holds.
    tests/test_schedule.py::test_every_kernel_keeps_noalias shows the codegen behaviour.
    """
    import tvm

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="MarkNoAlias")
    def _pass(func, _mod, _ctx):
        return (
            func if "tirx.noalias" in (func.attrs or {}) else func.with_attr("tirx.noalias", True)
        )

    return _pass


def sorted_shape_stores():
    """A module pass putting the stores of each VM shape function in slot order.

    Works around TVM 0.27's ``VMShapeLower``, which emits a shape function's stores in the
    iteration order of an ``unordered_map`` keyed by each expression's ``StructuralHash``; tvm-ffi
    hashes a free symbolic variable by its address, so the same IR built in two processes gave
    the stores, and the library's bytes, in different orders (a rebuilt bounded decoder never
    matched its cache). Each store computes one slot from the shape variables' slots only, so
    any order is correct, and slot order does not depend on addresses. A body of any other form
    is left as it is.
    """
    import tvm
    import tvm_ffi
    from tvm import tirx
    from tvm.ir.expr import TensorLoad  # what ``tirx.BufferLoad`` (a constructor here) makes

    def slot(node) -> int | None:
        if (
            isinstance(node, (tirx.BufferStore, TensorLoad))
            and len(node.indices) == 1
            and isinstance(node.indices[0], tirx.IntImm)
        ):
            return int(node.indices[0])
        return None

    def in_slot_order(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
        stores = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else []
        slots = [slot(s) for s in stores]
        if not stores or None in slots or slots == sorted(slots):
            return None
        read: set[int | None] = set()
        for s in stores:
            tvm_ffi.structural_walk(
                s.value, [(TensorLoad, lambda e: read.add(slot(e)))], order="pre"
            )
        if read & set(slots):  # a store reads a slot another one writes: keep their order
            return None
        return func.with_body(tirx.SeqStmt(sorted(stores, key=slot)))

    @tvm.transform.module_pass(opt_level=0, name="SortShapeFuncStores")
    def _pass(mod, _ctx):
        for gv, func in list(mod.functions.items()):
            if isinstance(func, tirx.PrimFunc) and (func.attrs or {}).get("tirx.is_host_func"):
                ordered = in_slot_order(func)
                if ordered is not None:
                    mod.update_func(gv, ordered)
        return mod

    return _pass


def ordered_min_max():
    """A module pass giving every integer ``min``/``max`` its operands in one order.

    Works around TVM 0.27's ``LoopPartition``, which gathers a partitioned loop's conditions in a
    container ordered by object addresses: a symbolic loop's bound ``min(a, b)`` came out as
    ``min(b, a)`` in about one build in six, and the decoder library's bytes with it (LLVM
    computes the two differently). Integer ``min``/``max`` commute, so any order is correct;
    the order here is that of a digest of each operand's IR (kinds, names, literals: no
    addresses). TVM 0.27 has no Python expression mutator, so a PrimFunc holding an operand
    pair out of that order is rewritten through its JSON form, and only one that holds an integer
    ``min``/``max`` is serialized at all.
    """
    import hashlib
    import json

    import tvm
    import tvm_ffi
    from tvm import tirx

    def has_integer_min_max(func: tirx.PrimFunc) -> bool:
        kinds: set[bool] = set()
        tvm_ffi.structural_walk(
            func, [((tirx.Min, tirx.Max), lambda e: kinds.add(_is_integer(str(e.ty))))], order="pre"
        )
        return True in kinds

    def digest(nodes: list, index: int, memo: dict[int, str]) -> str:
        if index not in memo:
            node = nodes[index]
            data = node.get("data")
            if isinstance(data, dict):  # an object: its fields, each a reference but literals
                body = [
                    f"{k}={digest(nodes, v, memo) if type(v) is int else json.dumps(v)}"
                    for k, v in sorted(data.items())
                    if k != "span"
                ]
            elif isinstance(data, list):  # an array: references
                body = [digest(nodes, v, memo) for v in data]
            else:  # a literal
                body = [json.dumps(data)]
            memo[index] = hashlib.sha256(f"{node['type']}({','.join(body)})".encode()).hexdigest()
        return memo[index]

    def reordered(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
        graph = json.loads(tvm.ir.save_json(func))
        nodes, memo, swapped = graph["nodes"], {}, False
        for node in nodes:
            if node["type"] in ("prim.Min", "prim.Max"):
                data = node["data"]
                if not _is_integer(nodes[data["ty"]]["data"]["dtype"]):
                    continue  # a float min/max is left alone (NaN operands do not commute)
                if digest(nodes, data["a"], memo) > digest(nodes, data["b"], memo):
                    data["a"], data["b"], swapped = data["b"], data["a"], True
        return tvm.ir.load_json(json.dumps(graph)) if swapped else None

    @tvm.transform.module_pass(opt_level=0, name="OrderMinMaxOperands")
    def _pass(mod, _ctx):
        for gv, func in list(mod.functions.items()):
            if isinstance(func, tirx.PrimFunc) and has_integer_min_max(func):
                ordered = reordered(func)
                if ordered is not None:
                    mod.update_func(gv, ordered)
        return mod

    return _pass


def _is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


#: ``main_transform_params`` with one argument per weight instead of one tuple of them.
FLAT_TRANSFORM = "main_transform_params_flat"


def with_flat_transform_params(mod):
    """Add ``FLAT_TRANSFORM``: ``main_transform_params`` called on its arguments packed in a tuple.

    Works around TVM 0.27's RPC, which passes no ``ffi.Array`` argument ("Cannot pass argument
    0, type ffi.Array"), while ``LiftTransformParams`` makes the weight transform take one tuple:
    a library on an RPC device (a board, qemu) binds its weights through this entry instead
    (``runtime.vm.bind_params``). No-op for a module without the transform.
    """
    from tvm import relax

    names = {gv.name_hint for gv in mod.get_global_vars()}
    if "main_transform_params" not in names or FLAT_TRANSFORM in names:
        return mod
    gv = mod.get_global_var("main_transform_params")
    (packed,) = mod[gv].params
    flat = [relax.Var(f"w{i}", ty) for i, ty in enumerate(packed.ty.fields)]
    bb = relax.BlockBuilder(mod)
    with bb.function(FLAT_TRANSFORM, flat, attrs={"num_input": 0}):
        out = bb.emit(relax.Call(gv, [relax.Tuple(flat)]))
        bb.emit_func_output(out)
    return bb.get()
