"""Names to parameters: a node's TorchScript scope to module paths, a constant's name to the
parameter it denotes."""

from __future__ import annotations

import re

from torch import nn

from .target import SUBMODULES

CALL_INDEX = re.compile(r"_\d+$")


def scope(node_name: str) -> list[str]:
    """Module-scope segments of a TorchScript-exported node name ("" -> none, e.g. fused nodes)."""
    if not node_name.startswith("/"):
        return []
    segs = [s for s in node_name.split("/")[1:-1] if s]
    merged: list[str] = []
    for s in segs:  # "cnn.0" then "cnn.0.1": the child scope repeats its parent's path
        if merged and s.startswith(merged[-1] + "."):
            merged[-1] = s
        else:
            merged.append(s)
    return merged


def resolve(segs: list[str], modules: dict[str, nn.Module]) -> list[str]:
    """Module paths the scope can denote: the longest scope suffix equal to, or ending, a path.

    Scopes gain wrapper segments in front (``kmodel``, ``encoder``) and lose ancestors whose own
    forward never ran (``predictor``). A dropped segment with a dot (``resblocks.5``) is a module
    the target lacks, not a wrapper, so such a suffix is no match.
    """
    variants = [segs, [CALL_INDEX.sub("", s) for s in segs]]  # "attention_1": second call
    for v in variants:
        for i in range(len(v)):
            if any("." in s for s in v[:i]):
                break
            suffix = ".".join(v[i:])
            if suffix in modules:
                return [suffix]
            hits = [m for m in modules if m.endswith("." + suffix)]
            if hits:
                return hits
    return []


PARAM_LIKE = re.compile(
    r"(^|\.)(weight|bias|gamma|beta|alpha\d+\.\d+|(weight|bias)_(ih|hh)_l\d+(_reverse)?)$"
)


def param_key(name: str, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The parameter a constant's name denotes: its longest dotted suffix that is a parameter."""
    parts = name.split(".")
    for i in range(len(parts)):
        key = ".".join(parts[i:])
        if key in shapes:
            return key
    return None


def looks_like_kokoro_param(name: str) -> bool:
    parts = name.split(".")
    return bool(PARAM_LIKE.search(name)) and any(p in SUBMODULES for p in parts[:-1])
