"""Calling a Relax VM: its load-time weight transform, and calls over RPC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def has_transform_params(vm) -> bool:
    try:
        vm["main_transform_params"]
    except Exception:
        return False
    return True


def invoke_stateful(vm, name: str, args: Sequence[Any]) -> tuple:
    """``vm[name](*args)`` for a VM over RPC, which can pass no tuple: arguments set one by one,
    outputs fetched one by one."""
    vm.set_input(name, *args)
    vm.invoke_stateful(name)
    out = vm.get_outputs(name)
    return out if isinstance(out, tuple) else (out,)


def bind_params(vm, weights: Sequence[Any], stateful: bool = False) -> list:
    """What ``vm["main"]`` takes after its inputs, given the raw weights in signature order.

    Libraries built with ``LiftTransformParams`` carry ``main_transform_params`` (weight
    transposes, LSTM bias sums, weight-norm, conv_transpose kernel rearrangement): run it once
    here and pass its outputs on every call. Weights it passes through unchanged come back as
    the very objects given (so weights shared by several buckets stay shared). Without that
    function (libraries built before it existed), the raw weights are the arguments.
    ``weights``: ``tvm.runtime.Tensor`` or numpy arrays.
    """
    import tvm

    raw = [w if isinstance(w, tvm.runtime.Tensor) else tvm.runtime.tensor(w) for w in weights]
    if not has_transform_params(vm):
        return raw
    if stateful:  # over RPC: the flat entry (``compile.tvm_fixes.with_flat_transform_params``)
        return list(invoke_stateful(vm, "main_transform_params_flat", raw))
    out = vm["main_transform_params"](raw)
    by_ptr = {(w.data_ptr(), tuple(w.shape), str(w.dtype)): w for w in raw}
    return [by_ptr.get((t.data_ptr(), tuple(t.shape), str(t.dtype)), t) for t in out]
