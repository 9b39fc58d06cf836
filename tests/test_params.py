"""Bad params fail before any work, naming the key; outputs are written atomically."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, TINY_PARAMS

from kokoro_tvm import artifacts, params
from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.spec import Shapes
from kokoro_tvm.toolchain import ToolchainError, check_installed, versions


def _with(path: str, value):
    raw = copy.deepcopy(TINY_PARAMS)
    *parents, leaf = path.split(".")
    node = raw
    for k in parents:
        node = node.setdefault(k, {})
    if value is KeyError:
        del node[leaf]
    else:
        node[leaf] = value
    return raw


def test_repo_params_are_valid():
    prm = params.load(REPO / "params.yaml")
    assert prm.model.config == "kokoro-82m" and prm.model.checkpoint == "kokoro-onnx-int8"


@pytest.mark.parametrize(
    "path,value,key",
    [
        ("buckets.tokens", [], "buckets.tokens"),
        ("buckets.tokens", [0, 8], "buckets.tokens"),
        ("buckets.frames", [-4], "buckets.frames"),
        ("buckets.frames", [12.5], "buckets.frames"),
        ("buckets.frames", ["64"], "buckets.frames"),
        ("buckets.tokens", [8, 16, 8], "buckets.tokens"),
        ("buckets.tokens", [600], "buckets.tokens"),
        ("buckets.frames", KeyError, "buckets.frames"),
        ("lstm.strategy", "scan", "lstm.strategy"),
        ("model.config", "huge", "model.config"),
        ("targets", {"gpu": {"kind": "cuda"}}, "targets.gpu.kind"),
        ("targets", {"bad name": {"kind": "llvm"}}, "bad name"),
        ("targets", {}, "targets"),
        ("toolchain", {"llvm_major": "22"}, "toolchain.llvm_major"),
        ("toolchain", {"tvm": "1"}, "toolchain.tvm"),
        ("runtime.num_threads", -1, "runtime.num_threads"),
        ("tune.trials", -8, "tune.trials"),
        ("tune.trials", "many", "tune.trials"),
        ("bench.phonemes", [], "bench.phonemes"),
        ("bench.phonemes", [0, 30], "bench.phonemes"),
        ("bench.phonemes", [30, 30], "bench.phonemes"),
        ("bench.phonemes", "all", "bench.phonemes"),
        ("precision.decoder", ["fp16"], "precision.decoder"),
        ("precision.decoder", ["bf16", "bf16"], "precision.decoder"),
        ("precision.decoder", "bf16", "precision.decoder"),
        ("precision.text_encoder", ["bf16"], "precision.text_encoder"),
    ],
)
def test_bad_params_name_the_key(path, value, key):
    with pytest.raises(params.ParamsError, match=key.replace(".", r"\.")):
        params.parse(_with(path, value))


@pytest.mark.parametrize(
    "path,value,message",
    [
        ("tune.trial", 4, r"unknown key 'tune\.trial'; did you mean 'tune\.trials'\?"),
        ("bench.repeat", 4, r"unknown key 'bench\.repeat'; did you mean 'bench\.repeats'\?"),
        ("modle", {}, r"unknown key 'modle'; did you mean 'model'\?"),
        (
            "targets.generic.mcpuu",
            "x86-64-v3",
            r"unknown key 'targets\.generic\.mcpuu'; did you mean 'targets\.generic\.mcpu'\?",
        ),
        (
            "lstm.strategy",
            "lop",
            r"'lstm\.strategy' is 'lop'; choose one of \['unroll', 'loop'\]; did you mean 'loop'\?",
        ),
        (
            "shapes.tokens",
            "bounde",
            r"'shapes\.tokens' is 'bounde'; choose one of \['padded', 'bounded'\]; did you mean",
        ),
        (
            "shapes.frames",
            "masked",
            r"'shapes\.frames' is 'masked'; choose one of \['padded', 'bounded'\]",
        ),
        (
            "shapes.token",
            "bounded",
            r"unknown key 'shapes\.token'; did you mean 'shapes\.tokens'\?",
        ),
    ],
)
def test_unknown_keys_and_typos_suggest_the_valid_spelling(path, value, message):
    with pytest.raises(params.ParamsError, match=message):
        params.parse(_with(path, value))


def test_bench_lengths_are_auto_or_phoneme_counts():
    assert params.parse(_with("bench.phonemes", "auto")).bench.lengths is None
    assert params.parse(_with("bench.phonemes", [510, 30])).bench.lengths == (30, 510)
    with pytest.raises(
        params.ParamsError,
        match=r"'bench\.phonemes' has phoneme count\(s\) \[6000\] outside 1\.\.5100",
    ):
        params.parse(_with("bench.phonemes", [30, 6000]))


def test_bounded_shapes_need_the_loop_lstm():
    raw = _with("lstm.strategy", "unroll")
    raw["shapes"]["tokens"] = "bounded"
    with pytest.raises(
        params.ParamsError,
        match=r"'shapes\.tokens' is 'bounded' but 'lstm\.strategy' is 'unroll': only the loop LSTM",
    ):
        params.parse(raw)
    raw["lstm"]["strategy"] = "loop"  # the same params with the loop LSTM pass
    assert params.parse(raw).shapes.of("duration") is Shapes.BOUNDED


@pytest.mark.parametrize(
    "spec,message",
    [
        (
            {"kind": "llvm", "mcpu": "x86-64-v9"},
            r"mcpu 'x86-64-v9' is not a CPU LLVM 22 knows.*did you mean 'x86-64-v4'",
        ),
        ({"kind": "llvm", "mcpu": "znver9"}, r"mcpu 'znver9' is not a CPU LLVM"),
        (
            {"kind": "llvm", "mattr": ["+avx2", "+avx513f"]},
            r"mattr '\+avx513f': LLVM does not know the feature",
        ),
        (
            {"kind": "llvm", "mattr": ["avx2"]},
            r"mattr entry 'avx2' must be '\+feature' or '-feature'",
        ),
        (
            {"kind": "llvm", "mtriple": "x86_65-linux-gnu"},
            r"mtriple 'x86_65-linux-gnu': LLVM 22 has no target 'x86_65'; did you mean 'x86_64'",
        ),
        (
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "znver3"},
            r"mcpu 'znver3' is not a CPU",
        ),
    ],
)
def test_targets_are_checked_against_the_installed_llvm(spec, message):
    """LLVM only warns about a CPU or feature it does not know, then builds for a generic CPU;
    the params check refuses instead, naming the target."""
    with pytest.raises(params.ParamsError, match=r"'targets\.generic': " + message):
        params.parse(_with("targets", {"generic": spec}))


def test_known_targets_pass():
    for spec in (
        {"kind": "llvm", "mcpu": "x86-64-v4"},
        {"kind": "llvm", "mattr": ["+avx2", "-fma"]},
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-v1"},
    ):
        assert params.parse(_with("targets", {"t": spec})).target("t") == spec


def test_unknown_component():
    from kokoro_tvm.spec import UnknownComponent, lookup

    with pytest.raises(UnknownComponent, match="unknown component 'vocoder'"):
        lookup("vocoder")


def test_malformed_yaml(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("model: {config: tiny\nbuckets: [")
    with pytest.raises(params.ParamsError, match="malformed YAML"):
        params.load(f)


def test_stage_fails_before_work_on_bad_params(tmp_path):
    """A stage run with a bad params.yaml exits 1 with the key, and writes nothing."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_with("lstm.strategy", "scan")))
    p = subprocess.run(
        [sys.executable, "-m", "kokoro_tvm.pipeline.export", "duration", "8"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1
    assert "lstm.strategy" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / artifacts.ROOT).exists()


def test_toolchain_versions_are_normalised():
    """``2.13.0+cpu`` and ``2.13.0`` are one release: a wheel from another index must not
    rebuild everything, and the record says what params.yaml pins."""
    from kokoro_tvm.toolchain import public_version

    found = versions()
    assert public_version("2.13.0+cpu") == "2.13.0" and "+" not in found["torch"]
    assert {"numpy", "python", "apache-tvm", "llvm_major"} <= set(found)


def test_declared_llvm_major_must_match_installed():
    found = versions()
    check_installed({"llvm_major": found["llvm_major"], "torch": "2.13.0"}, found)
    with pytest.raises(ToolchainError, match=r"toolchain\.llvm_major.*is 17.*LLVM.*22"):
        check_installed({"llvm_major": 17}, found)


def test_atomic_dir_keeps_the_old_directory_on_failure(tmp_path):
    from kokoro_tvm.atomic import atomic_dir

    dest = tmp_path / "db"
    with atomic_dir(dest) as tmp:
        (tmp / "records.json").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(dest) as tmp:
            (tmp / "records.json").write_text("half")
            raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["db"]
    assert (dest / "records.json").read_text() == "old"


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    dest = tmp_path / "out.so"
    with pytest.raises(RuntimeError):
        with atomic_path(dest, suffix=".so") as tmp:
            tmp.write_bytes(b"half a library")
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_precision_lists_what_is_built_beside_float32():
    """Absent or empty: float32 only (every older params.yaml); the decoder may add bf16; the text
    side has no narrower kernels, so naming it is an unknown key, not a silent float32 build."""
    assert params.parse(_with("precision", KeyError)).precision.of("decoder") == ()
    assert params.parse(_with("precision", {})).precision.of("decoder") == ()
    assert params.parse(TINY_PARAMS).precision.of("decoder") == ()
    prm = params.parse(_with("precision.decoder", ["bf16"]))
    assert prm.precision.of("decoder") == ("bf16",)
    assert prm.precision.of("duration") == ()
    prm.check_precision("decoder", "bf16")
    with pytest.raises(
        params.ParamsError, match=r"precision 'bf16' is not in .*precision\.text_encoder"
    ):
        prm.check_precision("text_encoder", "bf16")
