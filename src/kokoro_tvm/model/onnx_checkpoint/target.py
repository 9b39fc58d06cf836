"""The target: kokoro's modules for a config, built on the meta device (shapes and types only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..kmodel import SUBMODULES
from .graph import OnnxCheckpointError


def skeleton(cfg: dict[str, Any]) -> nn.Module:
    """KModel's five submodules as ``KModel.__init__`` builds them, without weights or downloads.

    ``disable_complex=False`` (TorchSTFT) because kokoro's checkpoints were saved with it: it has
    no buffers, so the state dict holds exactly the trained parameters.
    """
    from ..kmodel import construct

    try:
        with torch.device("meta"):
            root = construct(cfg, seed=0)
    except (KeyError, TypeError) as e:
        raise OnnxCheckpointError(
            f"config is not a Kokoro KModel config ({type(e).__name__}: {e})"
        ) from e
    return root


def weight_norm_dims(root: nn.Module) -> dict[str, int]:
    """Module path -> ``dim`` of its ``nn.utils.weight_norm`` hook (0 for Conv1d and
    ConvTranspose1d)."""
    from torch.nn.utils.weight_norm import WeightNorm

    dims = {}
    for name, mod in root.named_modules():
        for hook in mod._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == "weight":
                dims[name] = hook.dim
    return dims


@dataclass
class Target:
    """Effective parameters to recover: weight-normed ``weight_g``/``weight_v`` appear as
    ``weight``."""

    modules: dict[str, nn.Module]
    shapes: dict[str, tuple[int, ...]]  # "predictor.F0.0.conv1.weight" -> effective shape
    wn_dims: dict[str, int]
    state_keys: dict[str, list[str]]  # submodule -> its state-dict keys, in order

    @classmethod
    def build(cls, cfg: dict[str, Any]) -> Target:
        root = skeleton(cfg)
        wn = weight_norm_dims(root)
        shapes: dict[str, tuple[int, ...]] = {}
        for name, p in root.named_parameters():
            mod, _, leaf = name.rpartition(".")
            if mod in wn and leaf == "weight_g":
                continue
            if mod in wn and leaf == "weight_v":
                name = f"{mod}.weight"
            shapes[name] = tuple(p.shape)
        keys = {s: list(getattr(root, s).state_dict().keys()) for s in SUBMODULES}
        return cls(dict(root.named_modules()), shapes, wn, keys)
