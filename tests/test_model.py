"""Checkpoint loading: real-checkpoint layouts load, wrong checkpoints fail loudly."""

from __future__ import annotations

import pytest
import torch

from kokoro_tvm.config import load_model_config
from kokoro_tvm.model.checkpoint import CheckpointError, build_kmodel

PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


@pytest.fixture(scope="module")
def tiny_state():
    km = build_kmodel(load_model_config("tiny"), "random", seed=3)
    return {k: getattr(km, k).state_dict() for k in PARTS}


def _save(tmp_path, state):
    path = tmp_path / "kokoro.pth"
    torch.save(state, path)
    return str(path)


def test_kokoro_layout_loads(tiny_state, tmp_path):
    """As hexgrad saved it: DataParallel 'module.' prefixes, no CustomSTFT buffers."""
    state = {k: {f"module.{n}": v for n, v in sd.items() if "stft" not in n} for k, sd in tiny_state.items()}
    km = build_kmodel(load_model_config("tiny"), _save(tmp_path, state))
    w = tiny_state["decoder"]["generator.conv_post.weight_v"]
    assert torch.equal(km.decoder.generator.conv_post.weight_v, w)


def test_missing_parameter_is_an_error(tiny_state, tmp_path):
    state = {k: dict(sd) for k, sd in tiny_state.items()}
    del state["text_encoder"]["embedding.weight"]
    with pytest.raises(CheckpointError, match=r"text_encoder.*missing \['embedding.weight'\]"):
        build_kmodel(load_model_config("tiny"), _save(tmp_path, state))


def test_wrong_config_is_an_error(tiny_state, tmp_path):
    with pytest.raises(CheckpointError, match="does not match model.config"):
        build_kmodel(load_model_config("kokoro-82m"), _save(tmp_path, tiny_state))


@pytest.mark.parametrize("checkpoint,match", [
    ("missing/kokoro.pth", "does not exist"),
    ("someone/unknown-repo", "neither a file nor a known repo id"),
])
def test_unloadable_checkpoint_never_falls_back(checkpoint, match):
    with pytest.raises(CheckpointError, match=match):
        build_kmodel(load_model_config("tiny"), checkpoint)


def test_garbage_file_is_an_error(tmp_path):
    path = tmp_path / "bad.pth"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a loadable torch checkpoint"):
        build_kmodel(load_model_config("tiny"), str(path))
