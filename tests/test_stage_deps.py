"""Every stage depends on exactly the code its module runs, with the imports as the one source of
truth (stage ``code``, pipeline/code.py), and the package's import graph has no cycle.

Too few files in a fingerprint and an edit leaves a stale artifact cached; too many and an edit
reruns stages that never run the edited code. ``tests/test_dvc_graph.py`` shows the same through
DVC itself, on a built project.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import yaml

from kokoro_tvm.errors import KokoroTVMError
from kokoro_tvm.pipeline.code import (
    STAGES,
    _imported,
    _module_file,
    _module_name,
    fingerprint,
    kinds,
    package_files,
)

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PKG = SRC / "kokoro_tvm"
CODE = "src/kokoro_tvm"


def _stages() -> dict[str, dict]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def test_every_stage_depends_on_its_kinds_fingerprint_and_no_source():
    stages = _stages()
    code = stages.pop("code")
    stage_kinds = kinds(SRC)
    assert code["cmd"] == f"python -m {STAGES}.code"
    assert code["deps"] == ["${code}"]
    assert code["outs"] == [f"artifacts/code/{k}.json" for k in stage_kinds]  # one per stage kind
    ran = set()
    for name, st in stages.items():
        python, flag, module, *_ = st["cmd"].split()
        assert (python, flag) == ("python", "-m") and module.startswith(f"{STAGES}."), name
        kind = module.removeprefix(f"{STAGES}.")
        assert kind in stage_kinds, f"{name}: cmd {st['cmd']!r} does not run a stage module"
        ran.add(kind)
        listed = [d for d in st["deps"] if d.startswith(("artifacts/code/", "${code}", "src/"))]
        assert listed == [f"artifacts/code/{kind}.json"], (
            f"{name} depends on {listed}, not on its fingerprint alone"
        )
    assert ran == set(stage_kinds)  # no fingerprint is written for a module no stage runs


def test_a_stage_kind_is_a_module_that_runs_through_the_entry(tmp_path):
    """Kinds are read from the code (a module that imports ``pipeline.entry``), so a new stage
    module gets its fingerprint without a list to update; ``ci`` and ``lockfile``, commands of
    their own, are not kinds."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    assert "ci" not in kinds(src) and "legalize" in kinds(src)
    new = src / "kokoro_tvm" / "pipeline" / "fresh.py"
    new.write_text(
        "from ..errors import KokoroTVMError\n\ndef run(prm):\n    pass\n\n"
        'if __name__ == "__main__":\n    from .entry import stage\n\n    stage(None, run)\n'
    )
    assert "fresh" in kinds(src)
    assert f"{CODE}/errors.py" in fingerprint("fresh", src)["files"]
    with pytest.raises(KokoroTVMError, match="no stage kind 'ci'.*legalize"):
        fingerprint("ci", src)


def test_fingerprint_changes_with_exactly_the_files_a_stage_runs(tmp_path):
    """An edit to a module the stage imports changes its kind's fingerprint; an edit elsewhere in
    the package does not (each half is the other's negative control)."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    before = fingerprint("legalize", src)
    assert {
        f"{CODE}/pipeline/legalize.py",
        f"{CODE}/pipeline/entry.py",
        f"{CODE}/pipeline/__init__.py",
        f"{CODE}/compile/phase_legalize.py",
        # the phases run through compile.phases, which knows every pass name a dump may give
        f"{CODE}/compile/phase_build.py",
    } <= set(before["files"])
    assert not any(f.endswith(("runtime/synthesizer.py", "bench.py")) for f in before["files"])
    for rel, changes in [
        ("eval/latency.py", False),
        ("compile/torch_export.py", False),
        ("runtime/synthesizer.py", False),
        ("pipeline/build.py", False),
        ("compile/legalizations/conv1d.py", True),
        ("compile/schedule/conv.py", True),
        ("pipeline/entry.py", True),
        ("errors.py", True),
        ("__init__.py", True),
    ]:
        path = src / "kokoro_tvm" / rel
        old = path.read_text()
        path.write_text(old + "\n_AN_EDIT = 1\n")
        try:
            assert (fingerprint("legalize", src) != before) == changes, rel
        finally:
            path.write_text(old)
    assert fingerprint("legalize", src) == before


def test_comments_docstrings_and_layout_rerun_nothing(tmp_path):
    """A Python file is hashed as it runs (its syntax tree less docstrings): a comment, a docstring
    and a reformatted line leave the fingerprint as it was; the same file with one constant
    changed does not (the control)."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    before = fingerprint("legalize", src)
    path = src / "kokoro_tvm" / "pipeline" / "legalize.py"
    old = path.read_text()
    assert '"""Stage ``legalize@' in old and "    prm.check_bucket(component, bucket)\n" in old
    for edited in (
        old.replace('"""Stage ``legalize@', '"""Stage, reworded: ``legalize@'),
        old.replace(
            "    prm.check_bucket(component, bucket)\n",
            "    # why\n    prm.check_bucket(\n        component, bucket\n    )\n",
        ),
    ):
        path.write_text(edited)
        assert fingerprint("legalize", src) == before
    path.write_text(
        old.replace(
            "prm.check_bucket(component, bucket)", "prm.check_bucket(component, bucket + 0)"
        )
    )
    assert fingerprint("legalize", src) != before
    path.write_text(old)


def _hidden_imports(path: Path) -> list[str]:
    """Imports by name (``importlib.import_module``, ``__import__``) outside the top package's
    PEP 562 hook: code the fingerprint cannot see."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hook = {
        id(n)
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
        for n in ast.walk(f)
    }
    return [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(tree)
        if id(node) not in hook
        and (
            (isinstance(node, ast.Attribute) and node.attr == "import_module")
            or (isinstance(node, ast.Name) and node.id in ("__import__", "import_module"))
        )
    ]


def test_no_code_hides_an_import_from_the_fingerprint(tmp_path):
    """The fingerprint reads ``import`` statements; an import by name would run code it does not
    see, and the stage would keep a stale artifact after an edit to that code."""
    assert not [h for path in PKG.rglob("*.py") for h in _hidden_imports(path)]
    # negative control: the detour compile/passes.py once took to reach the other phase
    detour = tmp_path / "passes.py"
    detour.write_text(
        "import importlib\n\ndef check():\n"
        '    return importlib.import_module(f"{__package__}.phases").PHASES\n'
    )
    assert _hidden_imports(detour) == ["passes.py:4"]


def test_only_the_package_api_hook_is_left_out(tmp_path):
    """The top package's PEP 562 ``__getattr__`` (``from kokoro_tvm import KokoroTVM``) is not a
    stage's code: leaving it out keeps runtime edits from rebuilding every library. It is sound
    only while no stage or package module reads those names; a function of any other name counts."""
    script = tmp_path / "s.py"
    script.write_text("import kokoro_tvm\n")
    assert {p.relative_to(PKG).as_posix() for p in package_files(script, SRC)} == {"__init__.py"}
    script.write_text(
        "def __getattr__(name):\n    from kokoro_tvm.runtime import synthesizer\n"
        "def g():\n    from kokoro_tvm.runtime import voices\n"
    )
    got = {p.relative_to(PKG).as_posix() for p in package_files(script, SRC)}
    assert "runtime/voices.py" in got and "runtime/synthesizer.py" not in got
    import kokoro_tvm

    api = set(kokoro_tvm._PUBLIC)
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "kokoro_tvm" and not node.level:
                assert not api & {a.name for a in node.names}, f"{path} imports the lazy API names"
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "kokoro_tvm"
            ):
                assert node.attr not in api, f"{path} reads kokoro_tvm.{node.attr}"


def _unresolved(path: Path, src: Path = SRC) -> list[str]:
    """The package modules ``path`` imports from that do not exist (a relative import one level
    off, as after moving a module into a subpackage): the fingerprints would silently miss them."""
    here = _module_name(src, path).split(".")
    parts = here if path.name == "__init__.py" else here[:-1]
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(
                    parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])
                )
            else:
                base = node.module or ""
            if base.split(".")[0] == "kokoro_tvm" and _module_file(src, base) is None:
                bad.append(f"{path.relative_to(src)}:{node.lineno} imports from {base}")
    return bad


def test_every_package_import_resolves(tmp_path):
    bad = [b for path in PKG.rglob("*.py") for b in _unresolved(path)]
    assert not bad, bad
    # negative control: the slip this test was written for (model/onnx_checkpoint/target.py's
    # ``from .kmodel import`` after the module moved one level down) is found
    slip = tmp_path / "kokoro_tvm" / "model" / "onnx_checkpoint" / "target.py"
    slip.parent.mkdir(parents=True)
    slip.write_text("def f():\n    from .kmodel import construct\n")
    assert _unresolved(slip, tmp_path) == [
        f"{slip.relative_to(tmp_path)}:2 imports from kokoro_tvm.model.onnx_checkpoint.kmodel"
    ]


def _import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in it), its own ancestors aside (a
    package's ``__init__`` runs before its modules, and importing it is no cycle)."""
    graph = {}
    for path in PKG.rglob("*.py"):
        mod = _module_name(SRC, path)
        ancestors = {".".join(mod.split(".")[:k]) for k in range(1, mod.count(".") + 1)}
        graph[mod] = {
            m
            for m in _imported(SRC, path)
            if m != mod and m not in ancestors and _module_file(SRC, m)
        }
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_in_the_package():
    assert _cycle(_import_graph()) is None, " -> ".join(_cycle(_import_graph()))
    # negative control: the cycle this test was written for (registry <-> voices) is found
    graph = {"a.registry": {"a.voices"}, "a.voices": {"a.errors", "a.registry"}, "a.errors": set()}
    assert _cycle(graph) == ["a.registry", "a.voices", "a.registry"]


def test_the_stages_after_the_libraries_are_read_from_dvc_yaml(tmp_path):
    """CI's ``gather`` job runs the manifest stage and every stage that reads the manifest
    (``pipeline.ci.after_libraries``, from dvc.yaml, no list kept by hand): a new reader is
    one of them as soon as dvc.yaml says it reads the manifest."""
    from kokoro_tvm.pipeline import ci

    assert ci.after_libraries(REPO) == {"manifest", "bench_e2e", "bench_cold", "bench_cuts"}
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    doc["stages"]["bench_new"] = {"cmd": "true", "deps": [{ci.MANIFEST: {"hash": "md5"}}]}
    doc["stages"]["unrelated"] = {"cmd": "true", "deps": ["artifacts/toolchain.json"]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(doc))
    after = ci.after_libraries(tmp_path)
    assert "bench_new" in after and "unrelated" not in after
    assert "bench_new" not in ci.shared(["bench_new", "unrelated"], [], tmp_path)
