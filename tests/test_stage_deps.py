"""Every stage's deps in dvc.yaml are exactly the package files its script can import.

Too few and an edit leaves a stale artifact cached; too many and an edit reruns stages that never
run the edited code (a stage body's edit used to rebuild the whole pipeline).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from import_graph import package_files

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
CODE = "src/kokoro_tvm"
#: data the package reads at run time, owed by the module that reads it
DATA = {"config.py": ["data"]}
DATA_DIRS = {d for dirs in DATA.values() for d in dirs}


def _stages() -> dict[str, dict]:
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    return doc["stages"]


def _expected(script: Path) -> set[str]:
    files = package_files(script, SRC) | package_files(REPO / "stages/_common.py", SRC)
    rel = {f.relative_to(SRC / "kokoro_tvm").as_posix() for f in files}
    return rel | {d for f in rel for d in DATA.get(f, [])}


def _listed(deps: list[str]) -> set[str]:
    """Package entries of a stage's deps; a directory stands for every file under it."""
    out = set()
    for dep in deps:
        dep = dep.replace("${code}", CODE)
        if not dep.startswith(CODE + "/"):
            continue
        rel = dep[len(CODE) + 1:]
        path = SRC / "kokoro_tvm" / rel
        if path.is_dir() and rel not in DATA_DIRS:
            out |= {p.relative_to(SRC / "kokoro_tvm").as_posix() for p in path.rglob("*.py")}
        else:
            out.add(rel)
    return out


@pytest.mark.parametrize("name", sorted(_stages()))
def test_stage_deps_are_exactly_its_imports(name: str):
    stage = _stages()[name]
    script = REPO / stage["cmd"].split()[1]
    assert script.is_file(), f"{name}: cmd {stage['cmd']!r} does not run a stage script"
    assert f"stages/{script.name}" in stage["deps"] and "stages/_common.py" in stage["deps"]
    expected, listed = _expected(script), _listed(stage["deps"])
    missing, extra = sorted(expected - listed), sorted(listed - expected)
    assert not missing and not extra, (
        f"dvc.yaml stage {name!r}: deps miss {missing} and list {extra} that {script.name} never imports; "
        f"its package deps are {sorted(expected)} (`PYTHONPATH=src python tests/update_stage_deps.py` writes them)")


def test_import_graph_sees_lazy_and_relative_imports(tmp_path):
    """Negative control: the graph must follow imports inside functions and relative imports,
    or the test above would pass on deps that miss them."""
    script = tmp_path / "s.py"
    script.write_text("def f():\n    from kokoro_tvm.pipeline import manifest\n")
    got = {p.relative_to(SRC / "kokoro_tvm").as_posix() for p in package_files(script, SRC)}
    assert {"pipeline/manifest.py", "pipeline/__init__.py", "__init__.py", "artifacts.py", "atomic.py"} <= got
    assert not any(p.startswith(("compile/", "model/")) for p in got)
