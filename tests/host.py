"""What this CPU can execute, for tests that run compiled code.

A library built for an ISA the host lacks (x86-64-v4's AVX-512 on an AVX2-only CPU) dies with
SIGILL, which kills the whole pytest process rather than failing one test: every test that runs
a target's code asks ``runs_here`` first and checks only structure where it says no."""

from __future__ import annotations

from typing import Any

from kokoro_tvm.devices import isa


def runs_here(target: dict[str, Any]) -> bool:
    """This CPU has every feature a library built for the TVM target ``target`` needs."""
    return not isa.missing(isa.requirements(target))


def asm_of(executable) -> str:
    """The assembly of a built module's LLVM code (a VM executable imports it): what tests
    search for libm calls and vector instructions."""
    mods = [executable.mod]
    while mods:
        m = mods.pop()
        if m.kind == "llvm":
            return m.inspect_source("asm")
        mods.extend(m.imports)
    raise AssertionError("no llvm module")
