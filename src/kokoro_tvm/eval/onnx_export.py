"""Export one component to ONNX, the runtime Kokoro users pick today, as a speed bar for TVM.

ONNX has no ``kokoro_tvm::lstm``. At full bucket length the length-aware LSTM equals a plain
``nn.LSTM`` call, so the export swaps ``lstm_with_lengths`` for ``module(x)[0]`` while it traces
(``plain_lstms``), and ONNX gets its native LSTM node. The swap patches the name the length
policies (``model.lengths``) look up at call time instead of editing ``lengths.py`` /
``lstm_op.py``: those files are in every export stage's code fingerprint, and a benchmark-only
flag in them would rebuild everything.

An exported model is therefore exact only at full bucket length (what the benchmark feeds it);
on padded input its backward LSTM direction would read the padding.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import KokoroTVMError
from ..model import components, lengths
from ..spec import lookup

OPSET = 18  # the dynamo exporter's native opset; ORT 1.31 runs up to 23


class OnnxExportError(KokoroTVMError, RuntimeError):
    pass


def _full_length_lstm(module: nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """``lstm_with_lengths`` when every length equals T: one plain ``nn.LSTM`` call."""
    return module(x)[0]


@contextlib.contextmanager
def plain_lstms() -> Iterator[None]:
    """Within the block, component wrappers run plain ``nn.LSTM`` instead of the custom op, and
    their harmonic source in float32 (as kokoro's own ONNX export does: ONNX Runtime's CPU convs
    take float32 only)."""
    original = lengths.lstm_with_lengths, components.SOURCE_DTYPE
    lengths.lstm_with_lengths, components.SOURCE_DTYPE = _full_length_lstm, torch.float32
    try:
        yield
    finally:
        lengths.lstm_with_lengths, components.SOURCE_DTYPE = original


@contextlib.contextmanager
def quiet_export(what: str) -> Iterator[None]:
    """Around ``torch.onnx.export``: no grad, its log and warnings muted, and any failure an
    ``OnnxExportError`` that names ``what`` (a missing exporter dependency names the extra)."""
    log = logging.getLogger("torch.onnx")  # "torchvision is not installed" lines: irrelevant here
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation chatter
            yield
    except ImportError as e:
        raise OnnxExportError(
            f"ONNX export needs the bench extra ({e}); run `pip install -e '.[bench]'`"
        ) from e
    except Exception as e:
        raise OnnxExportError(f"ONNX export of {what} failed ({type(e).__name__}: {e})") from e
    finally:
        log.setLevel(level)


def export_onnx(component: str, km, args: tuple[Tensor, ...], dynamo: bool = False) -> bytes:
    """ONNX bytes of ``component`` traced on ``args``, its signature's inputs at one bucket: the
    graph takes their static shapes, not their values (tests/test_bench.py), so the inputs ORT is
    then timed on serve.

    ``dynamo=False`` (default) is the TorchScript exporter (deprecated, still in torch 2.13):
    ``torch.onnx.export``'s default until torch 2.9, and so what kokoro-onnx's ``scripts/export.py``
    ran (it passes no ``dynamo``). ``True`` is the dynamo exporter (needs ``onnxscript``). Both map
    ``nn.LSTM`` to ONNX's LSTM node, give the same parity (tests/test_bench.py) and run alike on
    ONNX Runtime, but TorchScript exports several times sooner, time every bench stage pays
    (docs/measurements.md, "TorchScript ONNX exporter").
    """
    with plain_lstms():
        module = components.build_component(component, km)
    names = lookup(component).input_names
    shapes = ", ".join(str(list(a.shape)) for a in args)
    with quiet_export(f"{component} on inputs of shapes {shapes}"), plain_lstms():
        if dynamo:
            program = torch.onnx.export(
                module, args, dynamo=True, opset_version=OPSET, input_names=names, verbose=False
            )
            data = program.model_proto.SerializeToString()
        else:
            buf = io.BytesIO()
            torch.onnx.export(
                module, args, buf, dynamo=False, opset_version=OPSET, input_names=names
            )
            data = buf.getvalue()
    return data


def ort_session(model: bytes | str, num_threads: int):
    """An ORT CPU session with ``num_threads`` intra-op threads (the benchmark's thread count), of
    a model's bytes or file path."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = num_threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def ort_feeds(session, component: str, inputs) -> dict[str, Any]:
    """Name the inputs for ``session.run``; drops those the graph does not read.

    Only the LSTMs read the lengths; with plain LSTMs the exporter prunes ``frame_lengths``.
    """
    wanted = {i.name for i in session.get_inputs()}
    named = dict(zip(lookup(component).input_names, inputs))
    missing = wanted - set(named)
    if missing:
        raise OnnxExportError(
            f"ONNX model wants inputs {sorted(missing)} that {component} does not have; "
            "re-export it with this version of kokoro_tvm"
        )
    return {k: (v.numpy() if isinstance(v, Tensor) else v) for k, v in named.items() if k in wanted}
