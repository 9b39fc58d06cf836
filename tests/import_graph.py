"""The package files a script imports, read from its source (``ast``), transitively.

Imports inside functions count too: a stage's deps must cover every code path it can take,
so this over-approximates the imports one run executes, never under-approximates them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "kokoro_tvm"


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
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                parts = parts if is_pkg else parts[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
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
