"""Functions in ``runtime/`` and ``server/`` take at most ``MAX_PARAMETERS``: options that travel
together are one value (``runtime.options``, ``admission.Newcomer``, ``built.Built``), not a
row of positional arguments that every layer passes along again."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kokoro_tvm"
MAX_PARAMETERS = 6


def too_long(source: str, name: str) -> list[str]:
    """``name:line function (count)`` for each function in ``source`` with more than
    ``MAX_PARAMETERS`` parameters, ``self`` and ``cls`` not counted, nor ``*args`` and
    ``**kwargs`` (a pass-through such as kokoro-onnx's ``create(..., **fields)`` is no row of
    arguments a caller must carry)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            count = len([p for p in params if p not in ("self", "cls")])
            if count > MAX_PARAMETERS:
                found.append(f"{name}:{node.lineno} {node.name} ({count})")
    return found


def test_runtime_and_server_functions_take_at_most_six_parameters():
    folders = [PACKAGE / "runtime", PACKAGE / "server"]
    paths = [p for folder in folders for p in sorted(folder.rglob("*.py"))]
    assert len(paths) > 20  # the folders are where this test looks
    found = [
        hit
        for path in paths
        for hit in too_long(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    ]
    assert not found, found


def test_the_check_finds_a_long_signature():
    """Negative control: the signature ``admission.fits`` had, and a method's ``self`` aside."""
    long = "def fits(streams, chars, speed, now, model, config, first_chars=0): pass\n"
    method = "class S:\n    def f(self, a, b, c, d, e, f): pass\n"
    assert too_long(long, "admission.py") == ["admission.py:1 fits (7)"]
    assert too_long(method, "s.py") == []
