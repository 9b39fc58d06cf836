"""Stage ``code``: one fingerprint per stage kind of the code its script runs.

Every stage depends on ``artifacts/code/<kind>.json`` instead of on source files. The fingerprint
holds the hash of each file ``stages/<kind>.py`` can import, so it changes exactly when one of
them does, and DVC reruns exactly the stages whose code changed. The file list is read from the
sources (``ast``), transitively, so nothing keeps it by hand: the ``code`` stage itself depends
on the whole ``stages/`` and package directories and reruns, in a second, on any edit. Imports
inside functions count too: a stage's deps must cover every code path it can take, so this
over-approximates the imports one run executes, never under-approximates them.

Why fingerprints rather than the files as DVC deps: after every stage DVC re-reads and rewrites
the whole ``dvc.lock`` through ruamel's round-trip YAML, and 30 deps times ~100 stages made most
of a stage's DVC time that YAML (docs/measurements.md, "One fingerprint per stage kind").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from .. import artifacts
from ..errors import KokoroTVMError

PACKAGE = "kokoro_tvm"
SRC = Path(__file__).resolve().parents[2]
#: data the package reads at run time, owed by the module that reads it
DATA = {"config.py": ["data"], "devices/qemu.py": ["data"]}


def _module_file(src: Path, module: str) -> Path | None:
    base = src.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _module_name(src: Path, path: Path) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imported(src: Path, path: Path) -> set[str]:
    """Absolute names of the package modules one file imports (and of their parent packages)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(src, path) if path.is_relative_to(src) else ""
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in _walk_run(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                parts = parts if is_pkg else parts[:-1]
                base = ".".join(
                    parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])
                )
            else:
                base = node.module or ""
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import submodule`
    out = set()
    for name in names:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            parts = name.split(".")
            out |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)}  # parents run first
    return {n for n in out if _module_file(src, n) is not None}


def _walk_run(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of ``tree`` but the body of a module-level ``__getattr__`` (PEP 562): it runs
    only when code reads a name the module lacks, and the package's lazy API names (``from
    kokoro_tvm import KokoroTVM``) are read by users, never by the package or its stages
    (tests/test_stage_deps.py checks that)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        yield from ast.walk(node)


def package_files(script: Path, src: Path) -> set[Path]:
    """Every file of ``src/kokoro_tvm`` that running ``script`` can import."""
    todo = [script]
    seen_mods: set[str] = set()
    files: set[Path] = set()
    while todo:
        path = todo.pop()
        for mod in _imported(src, path):
            if mod not in seen_mods:
                seen_mods.add(mod)
                f = _module_file(src, mod)
                files.add(f)
                todo.append(f)
    return files


def stage_files(script: Path, src: Path = SRC) -> list[Path]:
    """The files a stage script runs: itself, ``stages/_common.py``, every package module it can
    import, and the data those modules read (a data directory as the files under it)."""
    common = script.parent / "_common.py"
    modules = package_files(script, src) | package_files(common, src)
    files = {script, common} | modules
    pkg = src / PACKAGE
    for mod in modules:
        for data in DATA.get(mod.relative_to(pkg).as_posix(), []):
            files |= {
                p for p in (pkg / data).rglob("*") if p.is_file() and "__pycache__" not in p.parts
            }
    return sorted(files)


def fingerprint(kind: str, stages: Path = Path("stages"), src: Path = SRC) -> dict:
    script = stages / f"{kind}.py"
    if not script.is_file():
        raise KokoroTVMError(
            f"no stage script {script} for code fingerprint {kind!r}; "
            f"kinds are the names of the scripts in {stages}/"
        )
    root = stages.resolve().parent
    files = {}
    for path in stage_files(script.resolve(), src.resolve()):
        rel = (
            path.resolve().relative_to(root).as_posix()
            if path.resolve().is_relative_to(root)
            else str(path)
        )
        files[rel] = artifacts.sha256(path)
    return {"stage": kind, "files": files}


def kinds(stages: Path = Path("stages")) -> list[str]:
    """Every stage kind: the stage scripts, less the shared helper and this stage's own."""
    return sorted(p.stem for p in stages.glob("*.py") if p.stem not in ("_common", "code"))


def run() -> None:
    for kind in kinds():
        artifacts.write_json(artifacts.code_file(kind), fingerprint(kind))
