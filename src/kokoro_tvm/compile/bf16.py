"""What the bfloat16 conv kernels share: pairs of bf16 products summed in float32 (``vdpbf16ps``).

``vdpbf16ps`` (AVX512_BF16) multiplies 32 bf16 pairs per instruction where an FMA multiplies 16
float32 ones: lane ``i`` of a float32 accumulator gains ``a[2i] b[2i] + a[2i+1] b[2i+1]``. The
kernels (``bf16_fft``; ``bf16_winograd``, measured and left out) keep each pair in one
``uint32`` (``pairs``: low half first), broadcast an activation pair to all lanes and multiply it
by 16 weight pairs, one per output channel.

TVM 0.27 cannot call the intrinsic itself: its LLVM codegen has no bfloat type
(``DTypeToLLVMType`` returns none for bf16, and a kernel using it crashes the codegen), while
``BF16ComputeLegalize`` turns any bf16 operand of an intrinsic call into float32 and
``BF16StorageLegalize`` bf16 reinterprets into ``uint16``, where LLVM's
``llvm.x86.avx512bf16.dpbf16ps.512`` takes ``<32 x bfloat>``. A kernel therefore calls ``DOT``,
an LLVM function (``LLVM_IR``) that bitcasts ``int32`` lanes and calls the intrinsic, which the
kernel imports with TVM's ``pragma_import_llvm`` (``helpers``); TVM marks imported functions
always-inline, so LLVM inlines it and no call remains.

Which kernel a conv takes (``method``): bf16 Winograd rounds the transformed operands, and the
larger F(m, r) the more its interpolation amplifies that rounding; a Fourier transform is
orthogonal and amplifies none (docs/precision.md).
"""

from __future__ import annotations

import numpy as np

#: LLVM target features a library with these kernels needs (``/proc/cpuinfo``: ``avx512_bf16``).
FEATURES = ("avx512f", "avx512bf16")
#: float32 lanes of an accumulator.
LANES = 16
#: Output channels below which a conv stays float32: narrow convs cost little, and ``conv_post``
#: (22 channels, padded to 32) feeds ``exp`` and ``sin`` directly.
MIN_CHANNELS_OUT = 64
#: Kernel sizes computed in bf16 (through ``bf16_fft``).
FFT_TAPS = (3, 7, 11)
#: Whose convs take bf16 products: kokoro's generator, by the name torch.export gives a conv's
#: weight (``p_`` and the module path). The prosody predictor's F0 and N blocks, compiled with the
#: decoder, turn bf16 products into pitch errors whatever the algorithm, and their kernel-3 convs
#: have shapes the generator's also have, so a shape alone cannot tell them apart
#: (docs/precision.md). A weight of no known name stays float32.
OWNER = "p_decoder_generator_"
#: Channels up to which a conv takes these kernels: their transformed weights take 2.9x (kernel 11),
#: 4.6x (7) and 10.7x (3) a conv's own float32 ones, too much for wider convs (as
#: ``winograd.MAX_CHANNELS``).
MAX_CHANNELS = 256

#: ``hand_written.MAKER`` names of the bf16 kernels (``compile/retarget.py`` checks their target).
MAKERS = ("bf16_fft_conv1d",)
DOT = "kokoro_dpbf16ps"
TRANSPOSE = "kokoro_transpose16"
#: ``TRANSPOSE`` from rows of bf16 (``uint16``), each widened to float32 as it is loaded
TRANSPOSE_BF16 = "kokoro_transpose16_bf16"
#: ``TRANSPOSE`` into rows of bf16, each rounded (as ``pairs`` rounds) as it is stored
TRANSPOSE_TO_BF16 = "kokoro_transpose16_to_bf16"


def _transpose_ir(name: str = TRANSPOSE, bf16_rows: bool = False, bf16_out: bool = False) -> str:
    """``name(src, src_stride, dst, dst_stride)``: 16 rows of 16 float32 read at ``src``
    (``src_stride`` elements apart; with ``bf16_rows``, rows of bf16 widened to float32) written
    transposed at ``dst`` (with ``bf16_out``, rounded to bf16), in registers: four rounds of
    swapping off-diagonal blocks (8, 4, 2, 1 wide) of row pairs, one two-vector shuffle each."""
    lines = [f"define i32 @{name}(ptr %src, i64 %ss, ptr %dst, i64 %ds) {{"]
    rows = []
    for r in range(16):
        lines += [
            f"  %so{r} = mul i64 %ss, {r}",
            f"  %sp{r} = getelementptr {'i16' if bf16_rows else 'float'}, ptr %src, i64 %so{r}",
        ]
        if bf16_rows:  # a bf16 is the high half of its float32: widen, shift, reinterpret
            lines += [
                f"  %h{r} = load <16 x i16>, ptr %sp{r}, align 2",
                f"  %w{r} = zext <16 x i16> %h{r} to <16 x i32>",
                f"  %u{r} = shl <16 x i32> %w{r}, splat (i32 16)",
                f"  %l{r} = bitcast <16 x i32> %u{r} to <16 x float>",
            ]
        else:
            lines.append(f"  %l{r} = load <16 x float>, ptr %sp{r}, align 4")
        rows.append(f"%l{r}")
    step = 0
    for s in (8, 4, 2, 1):
        for i in (i for i in range(16) if not i & s):
            lo = [c if not c & s else 16 + c - s for c in range(16)]
            hi = [c + s if not c & s else 16 + c for c in range(16)]
            for half, mask in (("a", lo), ("b", hi)):
                picks = ", ".join(f"i32 {k}" for k in mask)
                lines.append(
                    f"  %t{step}{half} = shufflevector <16 x float> {rows[i]}, "
                    f"<16 x float> {rows[i + s]}, <16 x i32> <{picks}>"
                )
            rows[i], rows[i + s] = f"%t{step}a", f"%t{step}b"
            step += 1
    for r in range(16):
        lines += [
            f"  %do{r} = mul i64 %ds, {r}",
            f"  %dp{r} = getelementptr {'i16' if bf16_out else 'float'}, ptr %dst, i64 %do{r}",
        ]
        if bf16_out:  # _rounded: the bits plus 0x7FFF plus the kept half's lowest bit
            lines += [
                f"  %b{r} = bitcast <16 x float> {rows[r]} to <16 x i32>",
                f"  %k{r} = lshr <16 x i32> %b{r}, splat (i32 16)",
                f"  %o{r} = and <16 x i32> %k{r}, splat (i32 1)",
                f"  %a{r} = add <16 x i32> %b{r}, splat (i32 32767)",
                f"  %n{r} = add <16 x i32> %a{r}, %o{r}",
                f"  %s{r} = lshr <16 x i32> %n{r}, splat (i32 16)",
                f"  %e{r} = trunc <16 x i32> %s{r} to <16 x i16>",
                f"  store <16 x i16> %e{r}, ptr %dp{r}, align 2",
            ]
        else:
            lines.append(f"  store <16 x float> {rows[r]}, ptr %dp{r}, align 4")
    return "\n".join([*lines, "  ret i32 0", "}"])


# a line ending in a backslash continues on the next one: one line of IR
LLVM_IR = f"""
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
define <16 x float> @{DOT}(<16 x float> %acc, <16 x i32> %a, <16 x i32> %b) {{
  %x = bitcast <16 x i32> %a to <32 x bfloat>
  %y = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> \
@llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %x, <32 x bfloat> %y)
  ret <16 x float> %r
}}
{_transpose_ir()}
{_transpose_ir(TRANSPOSE_BF16, bf16_rows=True)}
{_transpose_ir(TRANSPOSE_TO_BF16, bf16_out=True)}
"""


def method(
    taps: int,
    channels_in: int,
    channels_out: int,
    groups: int = 1,
    stride: int = 1,
    weight: str = "",
) -> str | None:
    """``"fft"`` for a conv computed in bf16, else None (float32); ``weight``: the name of the
    conv's weight parameter (``OWNER``)."""
    if (
        not weight.startswith(OWNER)
        or stride != 1
        or groups != 1
        or channels_in % 2
        or channels_out < MIN_CHANNELS_OUT
        or channels_out % (2 * LANES)
        or max(channels_in, channels_out) > MAX_CHANNELS
    ):
        return None
    return "fft" if taps in FFT_TAPS else None


def helpers(T):
    """The ``AttrStmt`` frame that imports ``LLVM_IR`` into a kernel (``T``: TIR's IR builder)."""
    from tvm import tirx

    return T.attr(tirx.const(0, "int32"), "pragma_import_llvm", LLVM_IR)


def dot(T, acc, a, b):
    """``acc + sum`` of the products of the bf16 pairs in ``a`` and ``b`` (``uint32`` x 16)."""
    from tvm import tirx

    pair = f"int32x{LANES}"
    return T.call_pure_extern(
        f"float32x{LANES}", DOT, acc, tirx.reinterpret(pair, a), tirx.reinterpret(pair, b)
    )


def transpose16(T, src, src_stride, dst, dst_stride, bf16_rows: bool = False, bf16_out=False):
    """The statement running ``TRANSPOSE`` (``TRANSPOSE_BF16`` for ``bf16_rows``,
    ``TRANSPOSE_TO_BF16`` for ``bf16_out``) from element ``src`` (a buffer load, whose address is
    taken) to element ``dst``, row strides in elements."""
    from tvm import tirx

    name = TRANSPOSE_BF16 if bf16_rows else TRANSPOSE_TO_BF16 if bf16_out else TRANSPOSE
    return T.evaluate(
        T.call_extern(
            "int32",
            name,
            T.address_of(src),
            tirx.Cast("int64", src_stride),
            T.address_of(dst),
            tirx.Cast("int64", dst_stride),
        )
    )


def u32(v: int):
    """A ``uint32`` constant: the bit pattern of a bf16 pair, or a mask or shift of one."""
    from tvm import tirx

    return tirx.const(v, "uint32")


def _rounded(x):
    """A float32 TIR value's bits with its bf16 (the high half) rounded to the nearest, ties to
    even, as ``vcvtne2ps2bf16`` rounds (finite values)."""
    from tvm import tirx

    b = tirx.reinterpret("uint32", x)
    return b + u32(0x7FFF) + ((b >> u32(16)) & u32(1))


def pairs(lo, hi):
    """Two float32 TIR values as one ``uint32`` pair of bf16 (``lo`` in the low half), each
    rounded (``_rounded``)."""
    return (_rounded(lo) >> u32(16)) | (_rounded(hi) & u32(0xFFFF0000))


def stored(x):
    """A float32 TIR value rounded to bf16 as ``pairs`` rounds, as ``uint16`` bits."""
    return (_rounded(x) >> u32(16)).astype("uint16")


def widened(bits):
    """The float32 value of a bf16's ``uint16`` bits (TIR): it is the high half of that float."""
    from tvm import tirx

    return tirx.reinterpret("float32", tirx.Cast("uint32", bits) << u32(16))


def rounded_bits(x):
    """TE: ``x`` (float32) rounded to bf16 as ``pairs`` rounds, as ``uint16`` bits. Emitted before
    an FFT conv, ``FuseOps`` fuses it into the kernel that makes the conv's input (the Snake), which
    then writes half the bytes."""
    from tvm import te

    return te.compute(x.shape, lambda *i: stored(x(*i)), name="bf16_bits")


def check_target(mod, target) -> None:
    """Refuse to build ``mod``'s bf16 kernels (``MAKERS``) for a target without ``FEATURES``: LLVM
    would stop in instruction selection with a message that names neither."""
    from tvm import tirx
    from tvm.target import codegen

    from .hand_written import maker_of

    kernels = [
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tirx.PrimFunc) and (maker_of(f) or ("", {}))[0] in MAKERS
    ]
    if not kernels:
        return
    with target:
        missing = [f for f in FEATURES if not codegen.target_has_features(f, target)]
    if missing:
        raise ValueError(
            f"{kernels[0]} and {len(kernels) - 1} more are bf16 kernels, and the target {target} "
            f"lacks {', '.join(missing)}: build a bf16 library for a target with them, e.g. "
            '{"kind": "llvm", "mcpu": "x86-64-v4", "mattr": ["+avx512bf16"]}, or legalize with '
            'precision "fp32"'
        )


def target_spec(spec: dict) -> tuple[dict | None, str]:
    """The TVM target a bf16 library of the target ``spec`` is built for: ``spec`` with
    ``FEATURES`` on, or None and why, when the target has no AVX-512 (the kernels' 32 vector
    registers and ``vdpbf16ps`` exist only there; an Arm bf16 path is not written yet)."""
    import tvm
    from tvm.target import codegen

    target = tvm.target.Target(dict(spec))
    with target:
        if not codegen.target_has_features("avx512f", target):
            return None, (
                f"the target {spec} has no AVX-512, which the bf16 kernels are written for; "
                "its libraries stay float32"
            )
    mattr = [*spec.get("mattr", [])]
    mattr += [f"+{f}" for f in FEATURES if f"+{f}" not in mattr and f != "avx512f"]
    return {**spec, "mattr": mattr}, "AVX-512 with AVX512_BF16"


def bits(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16 as ``pairs`` rounds, as ``uint16`` bits (numpy)."""
    wide = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16).astype(np.uint16)


def pack_pairs(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``pairs`` in numpy: the layout the weight transforms produce."""
    return bits(lo).astype(np.uint32) | (bits(hi).astype(np.uint32) << 16)
