"""The whole compile flow, phase by phase, as ``python -m kokoro_tvm.compile.pipeline`` prints it.

    import   torch.export (compile.export over model.components) -> from_exported_program with our
             converters (compile.convert_map, compile.lstm_lowering) -> detach_params (compile.importer)
    legalize compile.legalize.PASSES
    build    compile.build.PASSES -> tvm.compile (TVM's default Relax pipeline, MarkNoAlias)

Not imported by any stage: each stage imports only its own phase, so an edit to one phase reruns
only the stages that run it.
"""

from __future__ import annotations

from . import build, legalize, passes

IMPORT = ["torch.export", "from_exported_program", "detach_params"]
PHASES = {"legalize": legalize.PASSES, "build": build.PASSES}


def describe() -> str:
    """One line per pass, in order, with its phase and what it does."""
    from . import prepack, retarget, schedule, symbolic, tune  # noqa: F401  (they register the build passes)

    lines = [f"import    {' -> '.join(IMPORT)}"]
    for phase, names in PHASES.items():
        for name in names:
            lines.append(f"{phase:<9} {name:<26} {passes.REGISTRY[name].doc}")
    lines.append(
        f"{'build':<9} {'tvm.compile':<26} TVM's default Relax pipeline, then MarkNoAlias on every kernel."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
