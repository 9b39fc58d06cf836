"""``relax.nn.conv1d`` with bf16 products (``compile/bf16.py``), for a library of precision bf16.

A stride-1 conv that ``bf16.method`` takes (the generator's convs of kernel 3, 7 and 11, known by
their weight parameter's name) becomes a call to ``bf16_fft``'s kernel on its weights' bf16
spectra, which ``LiftTransformParams`` moves to load time. Every other conv is legalized as a
float32 library legalizes it (``conv1d.conv1d_strided_space_to_depth``), so that, with
``precision`` fp32, nothing of this module is reached.
"""

from __future__ import annotations

from .. import bf16, bf16_fft
from ..hand_written import find_made
from . import conv1d


def conv1d_bf16(bb, call):
    from tvm import relax

    attrs = call.attrs
    x, w = call.args
    try:
        c_out, c_in, taps = (int(v) for v in w.ty.shape)
        int(x.ty.shape[1])
    except TypeError:
        return conv1d.conv1d_strided_space_to_depth(bb, call)
    if (
        bf16.method(taps, c_in, c_out, int(attrs.groups), int(attrs.strides[0]), _name(w)) is None
        or attrs.data_layout != "NCW"
        or attrs.kernel_layout != "OIW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
        or str(call.ty.dtype) != "float32"
        or str(x.ty.dtype) != "float32"
    ):
        return conv1d.conv1d_strided_space_to_depth(bb, call)
    d = int(attrs.dilation[0])
    sizes = dict(
        channels_in=c_in,
        channels_out=c_out,
        taps=taps,
        dilation=d,
        pad_left=int(attrs.padding[0]),
    )
    gv = find_made(bb.get(), bf16_fft.MAKER_NAME, **sizes) or bb.add_func(
        bf16_fft.kernel_for(**sizes), f"{bf16_fft.MAKER_NAME}_{c_in}x{c_out}_k{taps}_d{d}"
    )
    weights = bf16_fft.weight_transform(bb, w)
    return relax.call_tir(gv, [x, weights], relax.TensorType(call.ty.shape, "float32"))


def _name(w) -> str:
    """The name of a weight that is a parameter of the function (torch.export's ``p_...``), else
    empty: a computed weight's provenance is unknown."""
    from tvm import relax

    return w.name if isinstance(w, relax.Var) and not isinstance(w, relax.DataflowVar) else ""


LEGALIZATIONS = {"relax.nn.conv1d": conv1d_bf16}
