"""pydantic's validation errors as the one line a user reads: the key at fault and the fix (an
unknown key gets the closest valid spelling, a wrong choice the valid ones)."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel

from .checks import suggest

#: what a type error's kind says a value must be, as YAML spells it
_WANTS = {
    "int": "an integer",
    "bool": "true or false",
    "string": "a string",
    "list": "a list",
    "dict": "a mapping",
}


def message(err: dict[str, Any], root: type[BaseModel]) -> str:
    """One of pydantic's errors (``ValidationError.errors()``) in a schema whose root is
    ``root``."""
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc)
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        valid = keys_at(root, loc[:-1])
        parent = "".join(f"{p}." for p in loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = (
            f"; did you mean '{parent}{close[0]}'?"
            if close
            else (f"; valid keys here: {valid}" if valid else "")
        )
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return f"missing key '{key}'"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", err["msg"])
        return f"'{key}' is {value!r}; choose one of {choices}" + suggest(value, choices)
    if kind == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
        return msg if msg.startswith("'") or not key else f"'{key}': {msg}"
    if kind in ("greater_than_equal", "greater_than"):
        return f"'{key}' must be {err['msg'].removeprefix('Input should be ')}, got {value!r}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        want = kind.removesuffix("_type").removesuffix("_parsing")
        want = _WANTS.get(want, want.replace("_", " "))
        return f"'{key}' must be {want}, got {value!r}"
    return f"'{key}': {err['msg']} (got {value!r})"


def keys_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid keys of the mapping at ``loc`` in the schema (for "did you mean")."""
    node: Any = root
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = next((f for n, f in node.model_fields.items() if (f.alias or n) == part), None)
            if field is None:
                return []
            node = field.annotation
        elif getattr(node, "__origin__", None) is dict:
            node = node.__args__[1]
        else:
            return []
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [f.alias or n for n, f in node.model_fields.items()]
    return []
