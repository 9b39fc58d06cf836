"""Stage ``weights``: materialize the checkpoint once for every bucket and target.

Writes one ``.npz`` per component (what its libraries take after their inputs); the whole
checkpoint in kokoro's own format with its config (``kokoro.pth``, ``config.json``), which the
eager reference loads through kokoro's ``KModel``; and the voice pack that validation and
benchmarks use (``voice.npy``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import artifacts
from ..atomic import atomic_path, write_json
from ..model.checkpoint import load
from ..model.components import component_weights
from ..model.kmodel import SUBMODULES
from ..params import Params
from ..runtime.voices import VoiceError, random_style, resolve
from ..spec import COMPONENTS


def run(prm: Params) -> None:
    cfg, km = load(prm.model.config, prm.model.checkpoint, prm.model.seed)
    for component in COMPONENTS:
        arrays = {k: v.numpy() for k, v in component_weights(component, km).items()}
        artifacts.save_weights(artifacts.weights_file(component), arrays)
    save_checkpoint(km, cfg, artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    voice, name = reference_voice(prm.model.checkpoint, prm.model.seed, 2 * cfg["style_dim"])
    artifacts.save_array(artifacts.voice_file(), voice)
    artifacts.write_json(
        artifacts.weights_info_file(),
        {
            "config": prm.model.config,
            "checkpoint": prm.model.checkpoint,
            "seed": prm.model.seed,
            "voice": name,
        },
    )


def save_checkpoint(km, cfg: dict[str, Any], pth: Path, config: Path) -> None:
    """``km`` as kokoro's own checkpoint (``{submodule: state_dict}``) and config, what
    ``eval.eager.load_kokoro`` and kokoro's ``KModel(config=..., model=...)`` read."""
    import torch

    # Saved through a file object: given a path, torch.save names the zip's records after the file
    # (here the atomic temporary's random name), so the same weights were other bytes every run.
    with atomic_path(pth, suffix=".pth") as tmp, open(tmp, "wb") as f:
        torch.save({k: getattr(km, k).state_dict() for k in SUBMODULES}, f)
    write_json(config, cfg)


#: The registry voice used to validate and benchmark trained weights.
REFERENCE_VOICE = "jf_alpha"


def reference_voice(checkpoint: str, seed: int, style_width: int):
    """The voice pack validation and benchmarks run with, and its name.

    Random weights get a seeded random style. Trained weights get a real voice from the
    registry voices when they are installed (voices are part of the registry checkpoint), so the
    inputs are what users run; otherwise the seeded style, which still exercises every path.
    """
    if checkpoint != "random":
        try:
            return resolve(REFERENCE_VOICE, style_width), REFERENCE_VOICE
        except VoiceError:
            pass
    return random_style(seed, style_width), f"random(seed={seed})"


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
