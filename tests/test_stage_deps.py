"""Every stage depends on exactly the package files its script can import, through dvc.yaml.

Too few and an edit leaves a stale artifact cached; too many and an edit reruns stages that never
run the edited code (a stage body's edit used to rebuild the whole pipeline). A per-library stage
gets them through its kind's fingerprint (stage ``code_<kind>``, pipeline/code.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kokoro_tvm.pipeline.code import DATA, fingerprint, package_files, stage_files

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PKG = SRC / "kokoro_tvm"
CODE = "src/kokoro_tvm"
DATA_DIRS = {d for dirs in DATA.values() for d in dirs}


def _stages() -> dict[str, dict]:
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    return doc["stages"]


def _scripts(stage: dict) -> list[Path]:
    """The stage scripts a stage's code is: its own, and for ``code_<kind>`` that kind's."""
    argv = stage["cmd"].split()
    own = REPO / argv[1]
    return [own, REPO / f"stages/{argv[2]}.py"] if own.name == "code.py" else [own]


def _expected(scripts: list[Path]) -> set[str]:
    files = {f for s in scripts for f in stage_files(s, SRC)}
    out = set()
    for f in files:
        if f.is_relative_to(PKG):
            rel = f.relative_to(PKG).as_posix()
            out.add(next((d for d in DATA_DIRS if rel.startswith(d + "/")), rel))
        else:
            out.add(f.relative_to(REPO).as_posix())
    return out


def _listed(deps: list[str]) -> set[str]:
    """Code entries of a stage's deps; a directory stands for every file under it."""
    out = set()
    for dep in deps:
        dep = dep.replace("${code}", CODE)
        if dep.startswith("stages/"):
            out.add(dep)
        if not dep.startswith(CODE + "/"):
            continue
        rel = dep[len(CODE) + 1:]
        path = PKG / rel
        if path.is_dir() and rel not in DATA_DIRS:
            out |= {p.relative_to(PKG).as_posix() for p in path.rglob("*.py")}
        else:
            out.add(rel)
    return out


@pytest.mark.parametrize("name", sorted(_stages()))
def test_stage_deps_are_exactly_its_imports(name: str):
    stage = _stages()[name]
    scripts = _scripts(stage)
    assert all(s.is_file() for s in scripts), f"{name}: cmd {stage['cmd']!r} does not run a stage script"
    fingerprints = [d for d in stage["deps"] if d.startswith("artifacts/code/")]
    if fingerprints:  # a per-library stage: its code is its kind's fingerprint, and nothing else
        assert fingerprints == [f"artifacts/code/{scripts[0].stem}.json"], fingerprints
        assert f"code_{scripts[0].stem}" in _stages(), f"{name}: no stage writes {fingerprints[0]}"
        assert not _listed(stage["deps"]), f"{name} lists code besides its fingerprint"
        return
    expected, listed = _expected(scripts), _listed(stage["deps"])
    missing, extra = sorted(expected - listed), sorted(listed - expected)
    assert not missing and not extra, (
        f"dvc.yaml stage {name!r}: deps miss {missing} and list {extra} that {scripts[-1].name} never imports; "
        f"its code deps are {sorted(expected)} (`PYTHONPATH=src python tests/update_stage_deps.py` writes them)")


def test_per_library_stages_use_fingerprints():
    """The ~100 per-bucket stages must not list code themselves, or dvc.lock grows 4x again."""
    per_library = [n for n, st in _stages().items() if "matrix" in st and "bucket" in st["matrix"]]
    assert per_library
    for name in per_library:
        assert any(d.startswith("artifacts/code/") for d in _stages()[name]["deps"]), name


def test_fingerprint_changes_with_exactly_the_files_a_stage_runs(tmp_path):
    """An edit to a module the stage imports changes its kind's fingerprint; an edit elsewhere in
    the package does not (each half is the other's negative control)."""
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    shutil.copytree(SRC, tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    stages, src = tmp_path / "stages", tmp_path / "src"
    before = fingerprint("legalize", stages, src)
    assert {"stages/legalize.py", "stages/_common.py", f"{CODE}/compile/legalize.py"} <= set(before["files"])
    for rel, changes in [("eval/bench.py", False), ("compile/export.py", False), ("compile/legalize_ops.py", True),
                         ("errors.py", True)]:
        path = src / "kokoro_tvm" / rel
        old = path.read_text()
        path.write_text(old + "\n# an edit\n")
        try:
            assert (fingerprint("legalize", stages, src) != before) == changes, rel
        finally:
            path.write_text(old)
    assert fingerprint("legalize", stages, src) == before


def test_import_graph_sees_lazy_and_relative_imports(tmp_path):
    """Negative control: the graph must follow imports inside functions and relative imports,
    or the test above would pass on deps that miss them."""
    script = tmp_path / "s.py"
    script.write_text("def f():\n    from kokoro_tvm.pipeline import manifest\n")
    got = {p.relative_to(PKG).as_posix() for p in package_files(script, SRC)}
    assert {"pipeline/manifest.py", "pipeline/__init__.py", "__init__.py", "artifacts.py", "atomic.py"} <= got
    assert not any(p.startswith(("compile/", "model/")) for p in got)
