"""Bad params fail before any work, naming the key; outputs are written atomically."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, TINY_PARAMS
from kokoro_tvm import params as P
from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.toolchain import ToolchainError, check_installed, versions


def _with(path: str, value):
    raw = copy.deepcopy(TINY_PARAMS)
    *parents, leaf = path.split(".")
    node = raw
    for k in parents:
        node = node[k]
    if value is KeyError:
        del node[leaf]
    else:
        node[leaf] = value
    return raw


def test_repo_params_are_valid():
    prm = P.load(REPO / "params.yaml")
    assert prm.model_config == "kokoro-82m" and prm.checkpoint == "random"


@pytest.mark.parametrize("path,value,key", [
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
])
def test_bad_params_name_the_key(path, value, key):
    with pytest.raises(P.ParamsError, match=key.replace(".", r"\.")):
        P.parse(_with(path, value))


def test_unknown_component():
    with pytest.raises(P.ParamsError, match="unknown component 'vocoder'"):
        P.check_component("vocoder")


def test_malformed_yaml(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("model: {config: tiny\nbuckets: [")
    with pytest.raises(P.ParamsError, match="malformed YAML"):
        P.load(f)


def test_stage_fails_before_work_on_bad_params(tmp_path):
    """A stage script run with a bad params.yaml exits 1 with the key, and writes nothing."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_with("lstm.strategy", "scan")))
    p = subprocess.run([sys.executable, str(REPO / "stages/export.py"), "duration", "8"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 1
    assert "lstm.strategy" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "artifacts").exists()


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
