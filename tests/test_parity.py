"""Compiled libraries are exact on padded input: the validation stage, seen through DVC (tiny
config)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import Project

from kokoro_tvm import artifacts as A
from kokoro_tvm.eval import verdicts
from kokoro_tvm.eval.cases import lengths_for
from kokoro_tvm.runtime.built import load_component
from kokoro_tvm.runtime.manifest import parse_manifest, read_manifest

pytestmark = (
    pytest.mark.pipeline
)  # the DVC-built project (conftest.built_project): `make test`, not `make test-fast`


def test_validation_metrics_cover_every_library_at_padded_lengths(built_project: Project):
    shown = json.loads(built_project.run("dvc", "metrics", "show", "--json").stdout)
    # {revision ("" = workspace): {"data": {path: {"data": metrics}}}}; bench metrics are there too
    docs = [f["data"] for path, f in shown[""]["data"].items() if "/validate/" in path]
    manifest = json.loads(A.manifest_file(built_project.root / A.ROOT).read_text())
    libs = {(l["component"], l["bucket"], l["target"]) for l in manifest["libraries"]}
    assert {(d["component"], d["bucket"], d["target"]) for d in docs} >= libs
    for d in docs:
        lengths = sorted(int(n) for n in d["lengths"])
        assert lengths == lengths_for(d["component"], d["bucket"])
        assert any(
            n
            not in (
                built_project.params["buckets"]["tokens"]
                + built_project.params["buckets"]["frames"]
            )
            for n in lengths
        ), "validation must include lengths that are not bucket sizes"
        assert d["ok"] and all(r["ok"] for r in d["lengths"].values()), d
    for lib in manifest["libraries"]:
        assert lib["validation"]["lengths"] == lengths_for(lib["component"], lib["bucket"])


def test_validation_fails_a_library_that_reads_padding(built_project: Project):
    """The check can fail: a library whose output depends on padding misses the criterion."""
    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.eager import as_float64, load_kokoro

    root = built_project.root / A.ROOT
    manifest = read_manifest(root)
    entry = next(e for e in manifest.libraries if e.component == "text_encoder")
    lib = load_component(root, manifest, "text_encoder", entry.bucket, entry.target)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    pack = artifacts.load_array(artifacts.voice_file(root))

    def leaky(ids, lengths):  # as if the LSTM ran over the whole bucket
        return lib(ids, np.full_like(lengths, entry.bucket))

    rows = verdicts.check(leaky, "text_encoder", entry.bucket, km, as_float64(km), cfg, pack)
    doc = verdicts.summary("text_encoder", entry.bucket, entry.target, rows)
    assert rows[entry.bucket]["ok"] and not doc["ok"]
    with pytest.raises(verdicts.ValidationError, match="not kokoro's computation on padded input"):
        verdicts.raise_if_failed(doc)


def test_tampered_library_is_refused(built_project: Project):
    root = built_project.root / A.ROOT
    manifest = json.loads(A.manifest_file(root).read_text())
    entry = dict(manifest["libraries"][0], sha256="0" * 64)
    manifest["libraries"] = [entry]
    parsed = parse_manifest(manifest)
    with pytest.raises(Exception, match="sha256"):
        load_component(root, parsed, entry["component"], entry["bucket"], entry["target"])


def test_bad_lengths_are_refused(built_project: Project):
    root = built_project.root / A.ROOT
    manifest = read_manifest(root)
    entry = next(e for e in manifest.libraries if e.component == "text_encoder")
    lib = load_component(root, manifest, "text_encoder", entry.bucket, entry.target)
    ids = np.zeros((1, entry.bucket), np.int64)
    for bad in (0, entry.bucket + 1):
        with pytest.raises(ValueError, match=f"length {bad} is outside"):
            lib(ids, np.array([bad]))
    with pytest.raises(ValueError, match="shape"):  # a valid length: only the shape is wrong
        lib(np.zeros((1, entry.bucket + 1), np.int64), np.array([3]))
