"""A conv's bias and residual adds, computed by its hand-written kernel as it stores.

torch.export gives a conv with bias as ``add(conv1d(x, w), reshape(b, [1, O, 1]))``, and a
resblock's second conv adds its input after that. The conv kernels (``winograd``; ``bf16_fft`` in
a bf16 library) are opaque ``call_tir``s, so ``FuseOps`` cannot take those adds into them. Each
then ran as a kernel of its own, one more read and write of the conv's output, which at the
generator's last stage is larger than the caches; worse, ``FuseOps`` fused each resblock's last
adds into the elementwise kernel that sums the three resblocks, so every resblock's conv output
and residual stayed live until the third had run (seven tensors of the stage's size at the peak,
five with the adds folded). Here, before ``LegalizeOps``, ``add(conv, b)`` and ``add(add(conv,
b), r)`` of a conv a kernel takes become one call of that kernel with its epilogue; the adds are
rounded as before ((conv + b) + r), so the outputs do not change.

In a bf16 library, an FFT conv whose output (bias added) an instance norm alone reads (each
generator resblock pair's first conv, read by AdaIN) stores that output in bf16 and the norm's
kernel reads it widened: the tensor live at the generator's memory peak takes half the bytes.
That is one rounding more than a float32 output (docs/precision.md), so ``fold`` of a float32
library does not make it.
An FFT conv whose residual no later binding reads (a resblock pair's second conv but the first
pair's, whose residual, the stage's input, every resblock of the stage reads) writes its output
over the residual (``relax.call_tir_inplace``): no new tensor of the stage's size is live beside
it.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import winograd
from .legalizations import conv1d_bf16, instance_norm
from .symbolic import same_shape, static_dim

_ADD = tvm.ir.Op.get("relax.add")
_CONV1D = tvm.ir.Op.get("relax.nn.conv1d")
_INSTANCE_NORM = tvm.ir.Op.get("relax.nn.instance_norm")
_RESHAPE = tvm.ir.Op.get("relax.reshape")


def kernel_of(conv: relax.Call, bf16: bool) -> tuple[dict, Callable[..., relax.Expr]] | None:
    """The sizes of the kernel that legalizing computes ``conv`` with (in a bf16 library when
    ``bf16``) and the function that calls it with an epilogue, or None for a conv of no kernel."""
    if bf16 and (sizes := conv1d_bf16.fft_sizes(conv)) is not None:
        return sizes, conv1d_bf16.fft_call
    if (sizes := winograd.sizes_of(conv)) is not None:
        return sizes, winograd.call_with
    return None


def _same_shape(a: relax.Expr, b: relax.Expr) -> bool:
    """The two tensors' shapes are provably equal, symbolic axes included."""
    shapes = [getattr(e.ty, "shape", None) for e in (a, b)]
    return None not in shapes and same_shape(list(shapes[0]), list(shapes[1]))


def _is_bias(bias: relax.Expr, channels: int) -> bool:
    """``bias`` is ``[1, channels, 1]``."""
    shape = getattr(bias.ty, "shape", None)
    return shape is not None and [static_dim(v) for v in shape] == [1, channels, 1]


class _Chains:
    """The function's foldable adds, found before rewriting: per ``add`` call, the conv it
    follows and its epilogue operands."""

    def __init__(self, func: relax.Function, bf16: bool) -> None:
        self.bf16 = bf16
        self.bindings = relax.analysis.get_var2val(func)
        self.uses: dict[relax.Var, int] = {}
        self.users: dict[relax.Var, list[relax.Var]] = {}
        self.order: dict[relax.Var, int] = {}  # a dataflow var -> its binding's place
        for block in func.body.blocks:
            if isinstance(block, relax.DataflowBlock):
                for var, users in relax.analysis.udchain(block).items():
                    self.uses[var] = len(users)
                    self.users[var] = list(users)
                self.order.update((b.var, len(self.order)) for b in block.bindings)
        var_of = {value: var for var, value in self.bindings.items()}
        #: add (or instance norm) call -> (conv call, (its kernel's sizes, caller), bias,
        #: residual or None, whether the call is the instance norm that reads the conv's output)
        self.folds: dict[relax.Call, tuple] = {}
        absorbed = []
        for value in self.bindings.values():
            if (biased := self._biased(value)) is not None:
                self.folds.setdefault(value, (*biased, None, False))
            if (normed := self._normed(value)) is not None:
                self.folds[value] = (*normed[1:], None, True)
                absorbed.append(normed[0])
            for inner, residual in self._operands(value):
                add = self._only_use(inner)
                if (biased := self._biased(add)) is not None and all(
                    _same_shape(biased[0], e) for e in (value, residual)
                ):  # the residual neither broadcasts nor is broadcast
                    conv, (sizes, caller), bias = biased
                    if caller is conv1d_bf16.fft_call and self._last_use(residual, var_of[value]):
                        sizes = dict(sizes, inplace=1)
                    self.folds[value] = (conv, (sizes, caller), bias, residual, False)
                    absorbed.append(add)
        for add in absorbed:  # folded into the residual add that is its one use
            self.folds.pop(add, None)

    def _only_use(self, var) -> relax.Call | None:
        """The value of ``var`` where only one binding uses it inside its block."""
        if not isinstance(var, relax.DataflowVar) or self.uses.get(var) != 1:
            return None
        return self.bindings.get(var)

    def _last_use(self, residual, at: relax.Var) -> bool:
        """``at`` is the last binding to use ``residual`` or a reshape of it, which is a fresh
        tensor (an ``add``'s: a parameter or a view is not), so that ``at``'s kernel may
        overwrite it (``inplace``)."""
        value = self.bindings.get(residual)
        if at not in self.order or not (
            isinstance(residual, relax.DataflowVar)
            and isinstance(value, relax.Call)
            and value.op.same_as(_ADD)
        ):
            return False
        seen, views = set(), [residual]
        while views:
            for user in self.users.get(views.pop(), []):
                if user in seen:
                    continue
                seen.add(user)
                if self.order.get(user, -1) > self.order[at] or user not in self.order:
                    return False
                used = self.bindings.get(user)
                if isinstance(used, relax.Call) and used.op.same_as(_RESHAPE):
                    views.append(user)
        return True

    def _normed(self, value) -> tuple | None:
        """``(add, conv, kernel_of(conv), bias)`` where ``value`` is an instance norm over rows
        (``instance_norm.over_rows``) of ``add(conv, bias)`` (or of its reshape to its own shape),
        used only there, of a conv the bf16 FFT kernel takes."""
        if not (
            self.bf16
            and isinstance(value, relax.Call)
            and value.op.same_as(_INSTANCE_NORM)
            and instance_norm.over_rows(value)
        ):
            return None
        add = self._only_use(value.args[0])
        if (
            isinstance(add, relax.Call)
            and add.op.same_as(_RESHAPE)
            and _same_shape(add, add.args[0])
        ):  # the importer reshapes an instance norm's input to its own shape
            add = self._only_use(add.args[0])
        biased = self._biased(add)
        if biased is None or biased[1][1] is not conv1d_bf16.fft_call:
            return None
        return add, *biased

    @staticmethod
    def _operands(value) -> list[tuple[relax.Expr, relax.Expr]]:
        """``(a, b)`` and ``(b, a)`` of an ``add(a, b)``, else none."""
        if not (isinstance(value, relax.Call) and value.op.same_as(_ADD)):
            return []
        a, b = value.args
        return [(a, b), (b, a)]

    def _biased(self, value) -> tuple | None:
        """``(conv, kernel_of(conv), bias)`` where ``value`` is ``add(conv, bias)`` of a conv a
        kernel takes, used only there, and a ``[1, O, 1]`` bias."""
        for conv_var, bias in self._operands(value):
            conv = self._only_use(conv_var)
            if not (isinstance(conv, relax.Call) and conv.op.same_as(_CONV1D)):
                continue
            kernel = kernel_of(conv, self.bf16)
            if kernel is not None and _is_bias(bias, kernel[0]["channels_out"]):
                return conv, kernel, bias
        return None


@mutator
class _Fold(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, chains: _Chains) -> None:
        super().__init__(mod)
        self.chains = chains

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        fold = self.chains.folds.get(call)
        if fold is None:
            return super().visit_call_(call)
        conv, (sizes, caller), bias, residual, norm = fold
        conv = relax.Call(conv.op, [self.visit_expr(a) for a in conv.args], conv.attrs)
        conv = self.builder_.normalize(conv)
        out = caller(
            self.builder_,
            conv,
            {**sizes, "output_bf16": 1} if norm else sizes,
            self.visit_expr(bias),
            None if residual is None else self.visit_expr(residual),
        )
        if not norm:
            return out
        call = relax.Call(call.op, [self.visit_expr(a) for a in call.args], call.attrs)
        bits = self.builder_.emit(out)
        return instance_norm.instance_norm_two_pass(self.builder_, call, bits=bits)


def fold(mod: tvm.IRModule, bf16: bool) -> tvm.IRModule:
    """``mod`` with each foldable add of ``main`` computed by its conv's kernel (a bf16 library's
    when ``bf16``); the convs and adds it replaced are dropped."""
    chains = _Chains(mod["main"], bf16)
    if not chains.folds:
        return mod
    folder = _Fold(mod, chains)
    main = folder.visit_expr(mod["main"])
    added = folder.builder_.get()  # the kernels the folds added; a copy is changed, never ``mod``
    out = tvm.IRModule(dict(added.functions.items()), attrs=mod.attrs)
    out["main"] = main
    return relax.transform.DeadCodeElimination()(out)
