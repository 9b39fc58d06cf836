"""Shared fixtures: a temp copy of the pipeline on the tiny config, driven by the real ``dvc``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY_PARAMS = {
    "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
    "buckets": {"tokens": [8], "frames": [12]},
    "lstm": {"strategy": "unroll"},
    "shapes": {"tokens": "padded", "frames": "padded"},  # test_bounded.py builds bounded ones
    "targets": {"generic": {"kind": "llvm"}},  # test_dvc_graph adds a second one
    "toolchain": {"llvm_major": 22, "kokoro": "0.9.4"},
    "runtime": {"num_threads": 0},
    "bench": {"repeats": 2, "onnxruntime": False},  # ORT is covered by test_bench.py
    "tune": {"trials": 0},  # a real search is covered by test_tune.py
}


class Project:
    """A git + DVC checkout of the pipeline in a temp dir."""

    def __init__(self, root: Path):
        self.root = root

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", DVC_NO_ANALYTICS="1",
                   PYTHONPATH=str(self.root / "src"), **(env or {}))  # stages import this copy, not the checkout
        p = subprocess.run(args, cwd=self.root, env=env, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def repro(self, *args: str, env: dict[str, str] | None = None) -> set[str]:
        """Run ``dvc repro`` and return the names of the stages it actually executed, but the
        ``devices@<target>`` stages: they run on every repro by design (``always_changed``: the CPU
        under a cache can change), and what matters is what they make rerun."""
        out = self.run("dvc", "repro", *args, env=env).stdout
        return {s for s in re.findall(r"Running stage '([^']+)'", out) if not s.startswith("devices@")}

    def changed(self, env: dict[str, str] | None = None) -> set[str]:
        """Stages ``dvc status`` sees out of date, but the ``devices@`` ones: they run on every
        repro (``always_changed``), whatever else their status lists."""
        out = self.run("dvc", "status", "--json", env=env).stdout
        return {s for s in json.loads(out) if not s.startswith("devices@")}

    def up_to_date(self) -> bool:
        return self.changed() == set()

    @property
    def params(self) -> dict:
        return yaml.safe_load((self.root / "params.yaml").read_text())

    def set_params(self, params: dict) -> None:
        (self.root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    def stages(self) -> set[str]:
        out = self.run("dvc", "stage", "list", "--name-only").stdout
        return set(out.split())


def make_project(root: Path, params: dict) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    for name in ("stages", "src"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "artifacts").mkdir()
    proj = Project(root)
    proj.set_params(params)
    proj.run("git", "init", "-q")
    proj.run("git", "config", "user.email", "ci@example.com")
    proj.run("git", "config", "user.name", "ci")
    proj.run("dvc", "init", "-q")
    proj.run("dvc", "config", "core.analytics", "false")
    return proj


@pytest.fixture(scope="session")
def built_project(tmp_path_factory) -> Project:
    """The tiny pipeline after one full ``dvc repro`` (shared: building takes minutes)."""
    proj = make_project(tmp_path_factory.mktemp("pipeline") / "repo", TINY_PARAMS)
    ran = proj.repro()
    every = {s for s in proj.stages() if not s.startswith("devices@")}
    assert ran == every, f"first repro should run every stage, ran {sorted(ran)}"
    proj.run("git", "add", "-A")
    proj.run("git", "commit", "-qm", "tiny pipeline")
    return proj
