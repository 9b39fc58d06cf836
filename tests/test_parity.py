"""Compiled libraries at full (unpadded) bucket length match eager kokoro (tiny config)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import Project
from kokoro_tvm import components
from kokoro_tvm.config import load_model_config
from kokoro_tvm.library import load_component
from kokoro_tvm.metrics import log_mel_snr, rel_err
from kokoro_tvm.model import build_kmodel
from kokoro_tvm.reference import reference


@pytest.fixture(scope="module")
def tiny():
    cfg = load_model_config("tiny")
    return cfg, build_kmodel(cfg, "random", seed=0)


def test_full_length_parity(built_project: Project, tiny):
    cfg, km = tiny
    root = built_project.root / "artifacts"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["model"]["config"] == "tiny"
    checked = 0
    for entry in manifest["libraries"]:
        comp, bucket = entry["component"], entry["bucket"]
        lib = load_component(root, manifest, comp, bucket, entry["target"])
        inputs = components.example_inputs(comp, bucket, cfg, seed=bucket)
        got = lib(*[x.numpy() for x in inputs])
        ref = [r.numpy() for r in reference(comp, km, inputs, bucket, cfg)]
        assert len(got) == len(ref)
        if comp == "decoder":
            assert np.isfinite(got[0]).all()
            snr = log_mel_snr(ref[0], got[0])
            assert snr >= 40, f"{comp}-{bucket}-{entry['target']}: log-mel SNR {snr:.1f} dB"
        else:
            for r, g in zip(ref, got):
                err = rel_err(r, g)
                assert err <= 1e-4, f"{comp}-{bucket}-{entry['target']}: rel err {err:.2e}"
        checked += 1
    assert checked == len(manifest["libraries"]) >= 6


def test_tampered_library_is_refused(built_project: Project, tmp_path):
    root = built_project.root / "artifacts"
    manifest = json.loads((root / "manifest.json").read_text())
    entry = dict(manifest["libraries"][0], sha256="0" * 64)
    manifest["libraries"] = [entry]
    with pytest.raises(Exception, match="sha256"):
        load_component(root, manifest, entry["component"], entry["bucket"], entry["target"])


def test_bad_lengths_are_refused(built_project: Project):
    root = built_project.root / "artifacts"
    manifest = json.loads((root / "manifest.json").read_text())
    entry = next(e for e in manifest["libraries"] if e["component"] == "text_encoder")
    lib = load_component(root, manifest, "text_encoder", entry["bucket"], entry["target"])
    ids = np.zeros((1, entry["bucket"]), np.int64)
    for bad in (0, entry["bucket"] + 1):
        with pytest.raises(ValueError, match=f"length {bad} is outside"):
            lib(ids, np.array([bad]))
    with pytest.raises(ValueError, match="shape"):
        lib(np.zeros((1, entry["bucket"] + 1), np.int64), np.array([1]))
