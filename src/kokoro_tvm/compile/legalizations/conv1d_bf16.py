"""``relax.nn.conv1d`` with bf16 products (``compile/bf16.py``), for a library of precision bf16.

A stride-1 conv that ``bf16.method`` takes (the generator's convs of kernel 3, 7 and 11, known by
their weight parameter's name) becomes a call to ``bf16_fft``'s kernel on its weights' bf16
spectra, which ``LiftTransformParams`` moves to load time. Every other conv is legalized as a
float32 library legalizes it (``conv1d.conv1d_strided_space_to_depth``), so that, with
``precision`` fp32, nothing of this module is reached. ``compile.conv_epilogue`` calls the same
kernel with the conv's bias and residual adds before legalization.
"""

from __future__ import annotations

from .. import bf16, bf16_fft
from ..hand_written import find_made
from . import conv1d


def fft_sizes(call) -> dict[str, int] | None:
    """The sizes of the ``bf16_fft`` kernel that computes the ``relax.nn.conv1d`` ``call``, or
    None for a conv that stays float32."""
    attrs = call.attrs
    x, w = call.args
    try:
        c_out, c_in, taps = (int(v) for v in w.ty.shape)
        int(x.ty.shape[1])
    except TypeError:
        return None
    if (
        bf16.method(taps, c_in, c_out, int(attrs.groups), int(attrs.strides[0]), _name(w)) is None
        or attrs.data_layout != "NCW"
        or attrs.kernel_layout != "OIW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
        or str(call.ty.dtype) != "float32"
        or str(x.ty.dtype) != "float32"
    ):
        return None
    return dict(
        channels_in=c_in,
        channels_out=c_out,
        taps=taps,
        dilation=int(attrs.dilation[0]),
        pad_left=int(attrs.padding[0]),
    )


def fft_call(bb, call, sizes: dict[str, int], bias=None, residual=None):
    """``call`` (a conv ``fft_sizes`` took), plus ``bias`` ``[1, O, 1]`` and then ``residual``
    (its shape) where given, as one call of the kernel on its input rounded to bf16 (which
    ``FuseOps`` fuses into the kernel before); the kernel is added to ``bb``'s module once per
    shape and epilogue. With ``sizes["output_bf16"]``, the call's output is bf16 bits
    (``uint16``); with ``sizes["inplace"]`` and a ``residual``, the kernel writes its output over
    the residual (which no later binding may read: ``conv_epilogue``)."""
    from tvm import relax

    x, w = call.args
    sizes = dict(
        sizes, bias=int(bias is not None), residual=int(residual is not None), input_bf16=1
    )
    x = bb.emit_te(bf16.rounded_bits, x, primfunc_name_hint="bf16_bits")
    c_in, c_out, taps, d = (sizes[k] for k in ("channels_in", "channels_out", "taps", "dilation"))
    narrow, inplace = sizes.get("output_bf16", 0), sizes.get("inplace", 0) * sizes["residual"]
    suffix = "_bias" * sizes["bias"] + "_res" * sizes["residual"] + "_to_bf16" * narrow
    suffix += "_inplace" * inplace
    gv = find_made(bb.get(), bf16_fft.MAKER_NAME, **sizes) or bb.add_func(
        bf16_fft.kernel_for(**sizes), f"{bf16_fft.MAKER_NAME}_{c_in}x{c_out}_k{taps}_d{d}{suffix}"
    )
    weights = bf16_fft.weight_transform(bb, w)
    args = [x, weights, *(a for a in (bias, residual) if a is not None)]
    out = relax.TensorType(call.ty.shape, "uint16" if narrow else "float32")
    if inplace:  # the kernel writes over the residual, its last argument
        return relax.call_tir_inplace(gv, args, len(args) - 1, out)
    return relax.call_tir(gv, args, out)


def conv1d_bf16(bb, call):
    sizes = fft_sizes(call)
    if sizes is None:
        return conv1d.conv1d_strided_space_to_depth(bb, call)
    return fft_call(bb, call, sizes)


def _name(w) -> str:
    """The name of a weight that is a parameter of the function (torch.export's ``p_...``), else
    empty: a computed weight's provenance is unknown."""
    from tvm import relax

    return w.name if isinstance(w, relax.Var) and not isinstance(w, relax.DataflowVar) else ""


LEGALIZATIONS = {"relax.nn.conv1d": conv1d_bf16}
