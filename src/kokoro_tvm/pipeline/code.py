"""Stage ``code``: one fingerprint per stage kind of the code that kind runs.

A stage kind is a module of this package that runs as a program through ``pipeline.entry``
(``python -m kokoro_tvm.pipeline.<kind> ARGS``, its stages' ``cmd`` in dvc.yaml). Every stage
depends on ``artifacts/code/<kind>.json`` instead of on source files. The fingerprint holds the
hash of each file the module can import (of a Python file, its syntax tree less docstrings:
``code_hash``), so it changes exactly when what one of them runs does, and DVC reruns exactly the
stages whose code changed; a comment, a docstring or a reformat reruns none. The file list is read
from the sources (``ast``), transitively, so nothing keeps it by hand and no code has to hide an
import from it: the ``code`` stage itself depends on the whole package and reruns, in a second, on
any edit. Imports inside functions count too: a stage's deps must cover every code path it can take,
so this over-approximates the imports one run executes, never under-approximates them.

One body is left out, and only because it never runs in a stage: the top package's PEP 562
``__getattr__`` (``from kokoro_tvm import KokoroTVM``). Python calls it for a name the package
lacks; an import of a submodule (``from .. import artifacts``) reaches it only for a name outside
its public list, where it raises before importing anything, and no stage or package module reads
the public names (tests/test_stage_deps.py checks that). Counting its imports would make every
stage depend on the runtime.

Why fingerprints rather than the files as DVC deps: after every stage DVC re-reads and rewrites
the whole ``dvc.lock`` through ruamel's round-trip YAML, and 30 deps times ~100 stages made most
of a stage's DVC time that YAML (docs/measurements.md, "One fingerprint per stage kind").
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from pathlib import Path

from .. import artifacts
from ..errors import KokoroTVMError

PACKAGE = "kokoro_tvm"
#: the package of the stage modules
STAGES = f"{PACKAGE}.pipeline"
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
    """Every node of ``tree`` but the body of a module-level ``__getattr__`` (PEP 562): no stage
    runs it (the module docstring says why)."""
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


def stage_files(kind: str, src: Path = SRC) -> list[Path]:
    """The files stage kind ``kind`` runs: its module ``kokoro_tvm.pipeline.<kind>``, the packages
    above it (Python runs their ``__init__`` first), every package module it can import, and the
    data those modules read (a data directory as the files under it)."""
    module = _stage_module(kind, src)
    modules = package_files(module, src) | {
        f for m in _parents(STAGES) if (f := _module_file(src, m)) is not None
    }
    files = {module} | modules
    pkg = src / PACKAGE
    for mod in modules:
        for data in DATA.get(mod.relative_to(pkg).as_posix(), []):
            files |= {
                p for p in (pkg / data).rglob("*") if p.is_file() and "__pycache__" not in p.parts
            }
    return sorted(files)


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:k]) for k in range(1, len(parts) + 1)}


def _stage_module(kind: str, src: Path) -> Path:
    path = _module_file(src, f"{STAGES}.{kind}")
    if kind not in kinds(src) or path is None:
        raise KokoroTVMError(
            f"no stage kind {kind!r} for a code fingerprint; kinds are the modules of "
            f"{STAGES} that run through {STAGES}.entry: {', '.join(kinds(src))}"
        )
    return path


def fingerprint(kind: str, src: Path = SRC) -> dict:
    """``kind``'s files (paths relative to the checkout, the directory above ``src``) with their
    hashes."""
    src = src.resolve()
    root = src.parent
    files = {path.relative_to(root).as_posix(): code_hash(path) for path in stage_files(kind, src)}
    return {"stage": kind, "files": files}


def code_hash(path: Path) -> str:
    """What of ``path`` a stage runs, hashed: a Python module's syntax tree without its
    docstrings, so that an edit to a comment, a docstring or the layout (``ruff format``, a
    wrapped line) reruns no stage, while any change to what runs does; any other file's bytes.
    Docstrings only reach a stage's ``--help``."""
    if path.suffix != ".py":
        return artifacts.sha256(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return "ast:" + hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def kinds(src: Path = SRC) -> list[str]:
    """Every stage kind: the modules of ``kokoro_tvm.pipeline`` that run as a stage (through
    ``pipeline.entry``), less this stage's own."""
    pkg = src / Path(*STAGES.split("."))
    return sorted(
        p.stem
        for p in pkg.glob("*.py")
        if p.stem != "code" and f"{STAGES}.entry" in _imported(src, p)
    )


def run() -> None:
    for kind in kinds():
        artifacts.write_json(artifacts.code_file(kind), fingerprint(kind))


if __name__ == "__main__":
    from .entry import args, main

    args(__doc__)
    main(run)
