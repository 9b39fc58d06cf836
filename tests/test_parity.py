"""Compiled libraries at full (unpadded) bucket length match eager kokoro (tiny config)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import Project
from kokoro_tvm.config import load_model_config
from kokoro_tvm.library import load_component
from kokoro_tvm.model import build_kmodel
from kokoro_tvm.validate import full_length_parity


@pytest.fixture(scope="module")
def tiny(built_project: Project):
    """The eager model with the weights the project was built with (earlier tests may swap them)."""
    model = built_project.params["model"]
    cfg = load_model_config(model["config"])
    return cfg, build_kmodel(cfg, model["checkpoint"], model["seed"])


def test_full_length_parity(built_project: Project, tiny):
    cfg, km = tiny
    rows = full_length_parity(built_project.root / "artifacts", km, cfg)
    assert len(rows) >= 6 and {r["component"] for r in rows} == {"duration", "text_encoder", "decoder"}
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


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
