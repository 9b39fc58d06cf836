"""Build a kokoro ``KModel`` from a shipped config and a checkpoint choice.

``random`` gives seeded weights (the offline default); anything else must load, or we raise:
a requested checkpoint never silently becomes random weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import KokoroTVMError


class CheckpointError(KokoroTVMError, RuntimeError):
    """A checkpoint that cannot be loaded; never replaced by random weights."""


def _construct(cfg: dict[str, Any], seed: int):
    """The submodules exactly as ``KModel.__init__`` builds them, without its download/load step."""
    from kokoro.istftnet import Decoder
    from kokoro.model import KModel
    from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
    from transformers import AlbertConfig

    torch.manual_seed(seed)
    km = KModel.__new__(KModel)
    nn.Module.__init__(km)
    km.repo_id = None
    km.vocab = cfg["vocab"]
    km.bert = CustomAlbert(AlbertConfig(vocab_size=cfg["n_token"], **cfg["plbert"]))
    km.bert_encoder = nn.Linear(km.bert.config.hidden_size, cfg["hidden_dim"])
    km.context_length = km.bert.config.max_position_embeddings
    km.predictor = ProsodyPredictor(
        style_dim=cfg["style_dim"], d_hid=cfg["hidden_dim"], nlayers=cfg["n_layer"],
        max_dur=cfg["max_dur"], dropout=cfg["dropout"],
    )
    km.text_encoder = TextEncoder(
        channels=cfg["hidden_dim"], kernel_size=cfg["text_encoder_kernel_size"],
        depth=cfg["n_layer"], n_symbols=cfg["n_token"],
    )
    # CustomSTFT (conv based): the complex torch.stft path exports ops TVM cannot import.
    km.decoder = Decoder(
        dim_in=cfg["hidden_dim"], style_dim=cfg["style_dim"], dim_out=cfg["n_mels"],
        disable_complex=True, **cfg["istftnet"],
    )
    return km


def _tame_random(km) -> None:
    """Make seeded random weights behave like a trained model where the pipeline cares.

    - ``exp(spec)`` overflows with random weights (waveforms ~1e10 were seen): shrink the last
      conv so magnitudes stay O(1) and metrics compare signal with signal.
    - Random ``duration_proj`` predicts ~25 frames per token; a negative bias gives ~4 (nearly
      uniform), close to real speech, so frame buckets hold realistically sized utterances.
    """
    with torch.no_grad():
        km.decoder.generator.conv_post.weight_g.mul_(0.1)
        km.predictor.duration_proj.linear_layer.bias.fill_(-2.5)


def _resolve_checkpoint(checkpoint: str) -> Path:
    path = Path(checkpoint)
    if path.suffix == ".pth" or path.exists():
        if not path.is_file():
            raise CheckpointError(f"model.checkpoint: {checkpoint} does not exist; give a .pth path, "
                                  "a Hugging Face repo id, or 'random'")
        return path
    from kokoro.model import KModel

    if checkpoint not in KModel.MODEL_NAMES:
        raise CheckpointError(f"model.checkpoint: {checkpoint!r} is neither a file nor a known repo id "
                              f"({sorted(KModel.MODEL_NAMES)}); use 'random' for offline seeded weights")
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=checkpoint, filename=KModel.MODEL_NAMES[checkpoint]))
    except Exception as e:  # network, auth, missing file: all fatal
        raise CheckpointError(f"model.checkpoint: could not download {checkpoint} ({type(e).__name__}: {e}); "
                              "download the .pth yourself and set model.checkpoint to its path") from e


def _load_state(km, path: Path) -> None:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"model.checkpoint: {path} is not a loadable torch checkpoint ({e})") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"model.checkpoint: {path} must hold a dict of submodule state dicts")
    expected = {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"}
    missing = expected - set(state)
    if missing:
        raise CheckpointError(f"model.checkpoint: {path} lacks {sorted(missing)}; is it a Kokoro checkpoint?")
    for key in sorted(expected):
        sd = state[key]
        if sd and all(k.startswith("module.") for k in sd):  # DataParallel-saved checkpoints
            sd = {k[len("module."):]: v for k, v in sd.items()}
        load_submodule(getattr(km, key), sd, f"{path}[{key}]")


def load_submodule(module: nn.Module, sd: dict[str, torch.Tensor], where: str) -> None:
    """Load every parameter or fail; buffers may be absent.

    Kokoro's checkpoints were saved with TorchSTFT, so CustomSTFT's constant DFT buffers (and
    transformers' ``position_ids``) are not in them; those are computed at construction. A
    missing *parameter* or an unknown key means the wrong checkpoint, and is an error.
    """
    params = {name for name, _ in module.named_parameters()}
    buffers = {name for name, _ in module.named_buffers()}
    missing = sorted(params - set(sd))
    unexpected = sorted(k for k in set(sd) - params - buffers if not k.endswith("position_ids"))
    if missing or unexpected:
        raise CheckpointError(f"model.checkpoint: {where} does not match model.config: missing "
                              f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}")
    try:
        module.load_state_dict({k: v for k, v in sd.items() if k in params | buffers}, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise CheckpointError(f"model.checkpoint: {where} does not match model.config: "
                              f"{str(e).splitlines()[-1].strip()}") from e


def build_kmodel(cfg: dict[str, Any], checkpoint: str = "random", seed: int = 0):
    """A ``KModel`` in eval mode with the requested weights. It stays the eager reference."""
    with torch.no_grad():  # weight_norm's cached weights stay leaves, so wrappers can deepcopy
        km = _construct(cfg, seed)
    km.requires_grad_(False)
    if checkpoint == "random":
        _tame_random(km)
    else:
        _load_state(km, _resolve_checkpoint(checkpoint))
    return km.eval()


def load(config: str, checkpoint: str = "random", seed: int = 0) -> tuple[dict[str, Any], Any]:
    """``(cfg, km)`` for a named config: what params.yaml ``model`` and the manifest describe."""
    from ..config import load_model_config

    cfg = load_model_config(config)
    return cfg, build_kmodel(cfg, checkpoint, seed)
