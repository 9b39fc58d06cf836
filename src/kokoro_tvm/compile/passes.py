"""The compile flow as named passes in phases, each registered where it is defined, with IR dumps.

A phase is an ordered list of pass names (``legalize.PASSES``, ``build.PASSES``;
``compile.pipeline`` shows the whole flow). Running a phase applies its passes in order, exactly
as a ``tvm.transform.Sequential`` of them would, and can dump the module after any of them:

    KOKORO_TVM_DUMP_IR=LegalizeOps,schedule_rules dvc repro -f build_tokens@duration-64-x86_64_v3
    KOKORO_TVM_DUMP_IR=all python stages/legalize.py decoder 512

writes ``<phase>-<NN>-<pass>.py`` (TVMScript) under ``$KOKORO_TVM_DUMP_DIR`` (default
``ir-dump/<component>-<bucket>`` or ``ir-dump``). A dump never changes what is built.

A pass takes the module and the ``Context`` of the run (target, tuning database, and what
earlier passes found: the tuned kernels, the schedule report) and returns the module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DUMP_ENV, DUMP_DIR_ENV = "KOKORO_TVM_DUMP_IR", "KOKORO_TVM_DUMP_DIR"


@dataclass
class Context:
    """What the passes of one run share."""

    target: Any = None  # tvm.target.Target (build phase)
    tune_db: Path | None = None
    label: str = ""  # component-bucket, names the dump directory
    found: dict[str, Any] = field(default_factory=dict)  # results passes hand on (tuned, report)


@dataclass(frozen=True)
class Pass:
    name: str
    phase: str
    run: Callable[[Any, Context], Any]
    doc: str


REGISTRY: dict[str, Pass] = {}


def register(phase: str, name: str | None = None) -> Callable:
    """Decorator: register ``fn(mod, ctx) -> mod`` as pass ``name`` (default: the function's)."""

    def wrap(fn: Callable[[Any, Context], Any]) -> Callable[[Any, Context], Any]:
        add(Pass(name or fn.__name__, phase, fn, _first_line(fn.__doc__)))
        return fn

    return wrap


def register_tvm(phase: str, factory: Callable[[], Any], doc: str, name: str | None = None) -> None:
    """Register one of TVM's own module passes (``factory()`` makes it), by its TVM name."""
    name = name or factory.__name__
    add(Pass(name, phase, lambda mod, _ctx: factory()(mod), doc))


def add(p: Pass) -> None:
    if p.name in REGISTRY and REGISTRY[p.name].run.__qualname__ != p.run.__qualname__:
        raise ValueError(f"two passes named {p.name!r}")
    REGISTRY[p.name] = p


def run(phase: str, names: Iterable[str], mod, ctx: Context):
    """Apply ``names`` in order, dumping the module after those ``$KOKORO_TVM_DUMP_IR`` names."""
    names = list(names)
    wanted = _dump_names()
    unknown = wanted - set(REGISTRY) - {"all"}
    if unknown:
        raise ValueError(
            f"{DUMP_ENV} names no pass {sorted(unknown)}; passes are {sorted(REGISTRY)}"
        )
    for i, name in enumerate(names):
        p = REGISTRY[name]
        if p.phase != phase:
            raise ValueError(f"pass {name!r} belongs to phase {p.phase!r}, not {phase!r}")
        mod = p.run(mod, ctx)
        if "all" in wanted or name in wanted:
            _dump(mod, ctx, f"{phase}-{i:02d}-{name}")
    return mod


def _dump_names() -> set[str]:
    return {n.strip() for n in os.environ.get(DUMP_ENV, "").split(",") if n.strip()}


def _dump(mod, ctx: Context, stem: str) -> None:
    root = Path(os.environ.get(DUMP_DIR_ENV) or Path("ir-dump") / (ctx.label or "module"))
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.py").write_text(mod.script(), encoding="utf-8")


def _first_line(doc: str | None) -> str:
    return re.sub(r"\s+", " ", (doc or "").strip().split("\n\n")[0])
