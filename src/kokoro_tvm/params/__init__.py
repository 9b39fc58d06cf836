"""Strict validation of ``params.yaml``: every stage calls ``load`` first, so a bad edit fails
before any work, naming the key at fault and the fix.

``schema`` is what stages read (``Params``, the validated tree), ``checks`` what a value must
satisfy beyond its type (the installed LLVM among them), ``messages`` pydantic's errors as the
line a user reads.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .checks import ParamsError
from .schema import Params, TrackerDevice, parse

__all__ = ["Params", "ParamsError", "TrackerDevice", "load", "parse"]


def load(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: not found; run from the repository root or pass --params")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: malformed YAML ({e}); fix the syntax") from e
    return parse(raw)
