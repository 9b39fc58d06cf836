"""kokoro's ``KModel`` as ``KModel.__init__`` builds it, without its download/load step, and the
seeded random weights that tests (and export: graphs do not depend on weight values) run with."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

#: ``KModel``'s submodules as ``KModel.__init__`` builds them (``construct``): the keys of kokoro's
#: checkpoints (``{submodule: state_dict}``), which every reader and writer of one walks
SUBMODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


@contextlib.contextmanager
def quiet_upstream() -> Iterator[None]:
    """Silence the warnings kokoro 0.9.4's constructors raise on every build, so that a stage's
    output shows the project's own. Each is upstream's and harmless here:

    - ``torch.nn.utils.weight_norm`` is deprecated (FutureWarning from torch >= 2.1): kokoro's
      ``istftnet``/``modules`` use the old API, and its checkpoints store ``weight_g``/``weight_v``.
    - ``nn.LSTM(..., dropout=0.2, num_layers=1)`` (UserWarning from ``torch.nn.modules.rnn``):
      kokoro's single-layer LSTMs pass a dropout that only applies between layers; eval ignores it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`torch\.nn\.utils\.weight_norm` is deprecated",
            category=FutureWarning,
        )
        warnings.filterwarnings(
            "ignore",
            message=r"dropout option adds dropout after all but last recurrent layer",
            category=UserWarning,
        )
        yield


def construct(cfg: dict[str, Any], seed: int, disable_complex: bool = False):
    """The submodules exactly as ``KModel.__init__`` builds them, without its download/load step."""
    with quiet_upstream():
        return _construct(cfg, seed, disable_complex)


def _construct(cfg: dict[str, Any], seed: int, disable_complex: bool):
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
        style_dim=cfg["style_dim"],
        d_hid=cfg["hidden_dim"],
        nlayers=cfg["n_layer"],
        max_dur=cfg["max_dur"],
        dropout=cfg["dropout"],
    )
    km.text_encoder = TextEncoder(
        channels=cfg["hidden_dim"],
        kernel_size=cfg["text_encoder_kernel_size"],
        depth=cfg["n_layer"],
        n_symbols=cfg["n_token"],
    )
    # kokoro's default path (TorchSTFT: torch.stft/istft), what KPipeline runs and the model was
    # trained with; the export wrapper computes it in real arithmetic (model/stft.py).
    km.decoder = Decoder(
        dim_in=cfg["hidden_dim"],
        style_dim=cfg["style_dim"],
        dim_out=cfg["n_mels"],
        disable_complex=disable_complex,
        **cfg["istftnet"],
    )
    return km


RANDOM_F0_HZ = 160.0
RANDOM_F0_GAIN = 200.0


def tame_random(km) -> None:
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


def random_kmodel(cfg: dict[str, Any], seed: int = 0, disable_complex: bool = False):
    """A ``KModel`` in eval mode with seeded random weights, tamed (``tame_random``)."""
    with torch.no_grad():  # weight_norm's cached weights stay leaves, so wrappers can deepcopy
        km = construct(cfg, seed, disable_complex)
    km.requires_grad_(False)
    tame_random(km)
    return km.eval()
