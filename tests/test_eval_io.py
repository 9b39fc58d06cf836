"""``eval/`` computes; the stage modules in ``pipeline/`` read their inputs and write their outputs.
An eval module that took the params or wrote a file would hide a stage's I/O where a reader
following one parameter through the stage has to climb back down for it."""

from __future__ import annotations

import ast
from pathlib import Path

EVAL = Path(__file__).resolve().parents[1] / "src" / "kokoro_tvm" / "eval"
#: modules an eval module may not import: the params, and the atomic writers
FORBIDDEN = {"params", "atomic"}
#: calls that write a file (the artifacts' and atomic's writers, pathlib's, numpy's, torch's)
WRITERS = {
    "write_json",
    "write_text",
    "write_bytes",
    "save_weights",
    "save_array",
    "save_ir",
    "export_library",
    "save",
    "savez",
    "savez_compressed",
}


def offences(path: Path) -> list[str]:
    """Imports of ``FORBIDDEN`` modules, ``WRITERS`` calls and ``open`` for writing in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(a.name for a in node.names)]
            parts = {p for n in names for p in n.split(".")}
            if node.level and parts & FORBIDDEN:
                found.append(f"{path.name}:{node.lineno} imports {sorted(parts & FORBIDDEN)}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("kokoro_tvm.") and set(a.name.split(".")) & FORBIDDEN:
                    found.append(f"{path.name}:{node.lineno} imports {a.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in WRITERS:
                found.append(f"{path.name}:{node.lineno} calls {name}")
            elif name == "open" and _writes(node):
                found.append(f"{path.name}:{node.lineno} opens a file for writing")
    return found


def _writes(call: ast.Call) -> bool:
    modes = list(call.args[1:2]) + [k.value for k in call.keywords if k.arg == "mode"]
    return any(
        isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+")
        for m in modes
    )


def test_eval_modules_take_no_params_and_write_no_file():
    found = [o for path in sorted(EVAL.glob("*.py")) for o in offences(path)]
    assert not found, found


def test_the_check_sees_each_kind_of_offence(tmp_path):
    """Negative control: each forbidden form in a module is reported, reads are not."""
    module = tmp_path / "m.py"
    module.write_text(
        "from ..params import Params\n"
        "from .. import atomic\n"
        "import kokoro_tvm.params\n"
        "open(path, 'wb')\n"
        "open(path, mode='a')\n"
        "artifacts.write_json(path, {})\n"
        "np.savez(path, x=x)\n"
        "open(path)\n"
        "open(path, 'rb')\n"
        "np.load(path)\n"
    )
    assert len(offences(module)) == 7, offences(module)
