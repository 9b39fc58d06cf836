"""``runtime.manifest``: the manifest's JSON parsed once into frozen records, on documents the
pipeline's own writer makes (``manifest_entry.library_entry``): what the records hold, that they
cannot be changed, and the error each bad field gives (the runtime-level cases, on built
libraries, are in tests/test_bad_input.py and tests/test_fuzz.py)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.manifest_entry import library_entry, validation_entry
from kokoro_tvm.runtime.manifest import Tensor, parse_library, parse_manifest, thawed
from kokoro_tvm.spec import Shapes

SIGNATURE = {
    "inputs": [
        {"name": "input_ids", "shape": [1, 6], "dtype": "int64"},
        {"name": "input_lengths", "shape": [1], "dtype": "int64", "range": [3, 6]},
    ],
    "outputs": [{"shape": [1, "s0", 64], "dtype": "float32"}],
    "params": ["w.weight", "w.bias"],
    "info": {"shapes": "bounded", "length_axes": {"input_ids": [1, 1]}},
}
CHECK = {
    "library_sha256": "a" * 64,
    "weights_sha256": "b" * 64,
    "packed_sha256": "c" * 64,
    "worst_rel_err": 1.5e-6,
    "lengths": {"6": {"ok": True}, "3": {"ok": True}},
    "device": "host",
    "emulated": False,
    "ok": True,
}


def document() -> dict:
    """A manifest as ``pipeline/manifest.py`` writes it: one bounded text-encoder library."""
    lib = library_entry(
        "text_encoder",
        6,
        "generic",
        "build/generic/text_encoder-6.so",
        "a" * 64,
        SIGNATURE,
        bytes=1234,
        lstm_strategy="loop",
        validation=validation_entry(CHECK),
        packed={"path": "packed/generic/text_encoder-6.bin", "sha256": "c" * 64, "bytes": 99},
    )
    return {
        "format": 3,
        "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
        "toolchain": {"apache-tvm": "0.27.0", "llvm_major": 22},
        "buckets": {"tokens": [6], "frames": [16]},
        "targets": {"generic": {"kind": "llvm", "mattr": ["+avx2"]}},
        "target_needs": {"generic": {"arch": "x86_64", "isa": ["avx2"]}},
        "unvalidated": {"v4": "no device; fix: add one"},
        "weights": {"text_encoder": {"path": "weights/te.npz", "sha256": "b" * 64, "bytes": 7}},
        "libraries": [lib],
        "voices": {
            "path": "voices/voices.npy",
            "sha256": "d" * 64,
            "shape": [2, 510, 1, 128],
            "source": "test",
            "voices": [{"name": "af_a", "row": 0, "lang": "a"}, {"name": "x", "row": 1}],
        },
    }


def test_the_records_hold_what_the_writer_wrote():
    m = parse_manifest(json.loads(json.dumps(document())))
    assert (m.model.config, m.model.checkpoint, m.model.seed, m.model.random) == (
        "tiny",
        "random",
        0,
        True,
    )
    assert m.buckets == {"tokens": (6,), "frames": (16,)} and m.built_targets == ["generic"]
    assert m.weights["text_encoder"].bytes == 7 and m.needs("generic").isa == ("avx2",)
    (lib,) = m.of_target("generic")
    assert lib is m.library("text_encoder", 6, "generic")
    assert lib.bounded and lib.shapes is Shapes.BOUNDED and lib.length_axes == {"input_ids": (1, 1)}
    assert lib.input("input_lengths") == Tensor("input_lengths", (1,), "int64", (3, 6))
    assert lib.input("input_lengths").is_length and not lib.input("input_ids").is_length
    assert lib.outputs[0].shape == (1, "s0", 64) and lib.outputs[0].name is None
    assert lib.params == ("w.weight", "w.bias") and lib.packed.bytes == 99
    assert lib.validation.lengths == (3, 6) and lib.validation.worst == {"rel_err": 1.5e-6}
    assert lib.validation.as_dict() == document()["libraries"][0]["validation"]
    assert [v.name for v in m.voices.voices] == ["af_a", "x"] and m.voices.voices[1].lang is None
    # what `kokoro-tvm info --json` prints of them is plain JSON again
    assert thawed(m.targets) == document()["targets"] and m.model.as_dict() == document()["model"]


def test_records_cannot_be_changed():
    m = parse_manifest(document())
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.model.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.libraries[0].sha256 = "0" * 64
    with pytest.raises(TypeError):
        m.weights["decoder"] = m.weights["text_encoder"]
    with pytest.raises(TypeError):
        m.targets["generic"]["mattr"] += ("+avx512f",)


def test_a_missing_library_or_needs_names_the_fix():
    m = parse_manifest(document())
    with pytest.raises(ArtifactError, match=r"no library for decoder bucket 16 .*dvc repro"):
        m.library("decoder", 16, "generic")
    doc = document()
    del doc["target_needs"]
    with pytest.raises(ArtifactError, match="records no CPU needs for target 'generic'"):
        parse_manifest(doc).needs("generic")


def _edited(path: str, value, delete: bool = False) -> dict:
    doc = copy.deepcopy(document())
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if delete:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("model.seed", "0", r"'model.seed' should be a int"),
        ("buckets.frames", [16, True], "buckets.frames should be bucket sizes"),
        ("weights.text_encoder.bytes", None, r"'weights.text_encoder.bytes' should be a int"),
        ("target_needs.generic.isa", [1], "target_needs.generic.isa should be names"),
        ("libraries.0.shapes", "ragged", r"libraries\[0\].shapes should be bounded or padded"),
        ("libraries.0.length_axes", {"input_ids": [1]}, r"length_axes.input_ids should be \["),
        ("libraries.0.inputs", [{"name": "x", "shape": [-1]}], r"inputs\[0\] is not a tensor"),
        ("libraries.0.outputs", [{"shape": [1], "dtype": 3}], r"outputs\[0\] is not a tensor"),
        ("libraries.0.params", ["w", 2], r"libraries\[0\].params should be weight names"),
        ("libraries.0.validation", {"worst_rel_err": "small"}, "worst_rel_err is not a number"),
        ("libraries.0.validation", {"languages": {"a": "yes"}}, "languages is not a number"),
        ("libraries.0.packed", {"path": "p.bin"}, r"'libraries\[0\].packed.sha256' should be"),
        ("libraries.0.component", "decoder", "component 'decoder' has no weights entry"),
        ("voices.voices", [{"name": ["a"], "row": 0}], "'voices' entry is malformed"),
        ("voices.shape", "wide", "'voices' entry is malformed"),
    ],
)
def test_each_bad_field_is_named_with_the_fix(path, value, message):
    with pytest.raises(ArtifactError, match=message) as caught:
        parse_manifest(_edited(path, value), "art/manifest.json")
    assert "dvc repro" in str(caught.value)


def test_a_library_made_of_build_outputs_needs_no_size():
    entry = library_entry("text_encoder", 6, "generic", "t.so", "a" * 64, SIGNATURE)
    assert parse_library(entry, "build info", sized=False).bytes is None
    with pytest.raises(ArtifactError, match=r"'bytes' should be a int"):
        parse_library(entry, "build info")


def test_the_runtime_takes_components_and_axes_from_spec():
    """``Libraries`` groups buckets by the axis ``spec`` gives each component: a token bucket is
    one every token component was built for; a manifest whose token components share none is
    refused naming the axis (it was an IndexError at the first call)."""
    from kokoro_tvm.runtime.libraries import Libraries
    from kokoro_tvm.spec import COMPONENTS, Axis

    def built(buckets: dict[str, list[int]]) -> dict:
        doc = document()
        lib = doc["libraries"][0]
        doc["libraries"] = [
            lib | {"component": c, "bucket": b} for c, bs in buckets.items() for b in bs
        ]
        doc["weights"] = {c: doc["weights"]["text_encoder"] for c in COMPONENTS}
        return parse_manifest(doc)

    libs = Libraries(
        ".", built({"duration": [6, 12], "text_encoder": [12, 24], "decoder": [16]}), "generic"
    )
    assert libs.buckets == {Axis.TOKENS: [12], Axis.FRAMES: [16]}
    assert libs.bucket("tokens", 7) == 12 and libs.bucket(Axis.FRAMES, 16) == 16
    with pytest.raises(ArtifactError, match="has no tokens bucket that every component"):
        Libraries(".", built({"duration": [6], "text_encoder": [12], "decoder": [16]}), "generic")
    with pytest.raises(ArtifactError, match=r"has no library for \['decoder'\]"):
        Libraries(".", built({"duration": [6], "text_encoder": [6]}), "generic")


def test_each_languages_verdict_reaches_info():
    """The validate stage's per-language rows become one verdict per language code in the manifest
    (``validation_entry``), which the record keeps and ``info`` prints, naming any that failed."""
    from kokoro_tvm.runtime.cli import _validation

    check = CHECK | {"languages": {"lang_a": {"ok": True}, "lang_j": {"ok": False}}}
    entry = validation_entry(check)
    assert entry["languages"] == {"a": True, "j": False}
    doc = document()
    doc["libraries"][0]["validation"] = entry
    (lib,) = parse_manifest(doc, "art/manifest.json").libraries
    assert lib.validation.languages == {"a": True, "j": False}
    shown = _validation(lib.validation.as_dict())
    assert "2 languages (a, j; failed: j)" in shown
    assert "languages" not in validation_entry(CHECK)  # an emulated or older validation: none
