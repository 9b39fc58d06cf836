"""Kokoro model configurations shipped with the package.

``kokoro-82m`` is the real Kokoro-82M config (users have no ``../shared``). ``tiny`` keeps the
architecture but shrinks what kokoro lets us shrink, for fast pipeline tests. kokoro's ``Decoder``
hard-codes 512 ASR channels, 1024-wide blocks and a 512-channel generator input, so
``hidden_dim`` and ``upsample_initial_channel`` must stay 512; only depths shrink.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from .errors import KokoroTVMError
from .spec import MODEL_CONFIGS


class UnknownConfig(KokoroTVMError, ValueError):
    pass


def _kokoro_82m() -> dict[str, Any]:
    text = resources.files("kokoro_tvm").joinpath("data/kokoro_82m.json").read_text("utf-8")
    return json.loads(text)


def _tiny() -> dict[str, Any]:
    cfg = _kokoro_82m()
    cfg["n_layer"] = 1
    cfg["plbert"] = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 512,
        "num_hidden_layers": 2,
        "dropout": 0.1,
    }
    cfg["istftnet"].update(
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3, 5]],
    )
    return cfg


def load_model_config(name: str) -> dict[str, Any]:
    """Return a fresh copy of a named config; the name is validated by ``params``."""
    if name == "kokoro-82m":
        return _kokoro_82m()
    if name == "tiny":
        return _tiny()
    raise UnknownConfig(
        f"model.config: unknown config {name!r}; choose one of {list(MODEL_CONFIGS)}"
    )
