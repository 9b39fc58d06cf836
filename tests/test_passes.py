"""The compile flow as TVM pass sequences (``compile.phases``): the phases run their passes in
order, ``KOKORO_TVM_DUMP_IR`` dumps the module after any of them without changing the result,
and what the schedule rules chose reaches the build's report through the module; the build ends
with passes that make its bytes the same in every process."""

from __future__ import annotations

import pytest
import torch

from kokoro_tvm.compile import phases
from kokoro_tvm.compile.importer import import_params_as_inputs
from kokoro_tvm.compile.phases import build, legalize

TARGET = {"kind": "llvm"}


class _Snake(torch.nn.Module):
    """A linear layer and a Snake-style sin: our matmul packing and sin legalization both act."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 32)

    def forward(self, x):
        y = self.lin(x)
        return y + torch.sin(y) ** 2


def _imported():
    torch.manual_seed(0)
    ep = torch.export.export(_Snake().eval(), (torch.randn(4, 16),), strict=False)
    mod, _ = import_params_as_inputs(ep, "loop")
    return mod


def _index(name: str) -> int:
    return phases.pass_names()["legalize"].index(name)


def _all_names() -> list[str]:
    return sorted(n for names in phases.pass_names().values() for n in names)


def test_dumps_follow_the_named_passes_and_change_nothing(tmp_path, monkeypatch):
    plain = legalize(_imported()).script()
    monkeypatch.setenv(phases.DUMP_ENV, "LegalizeOps,FuseTIR")
    monkeypatch.setenv(phases.DUMP_DIR_ENV, str(tmp_path))
    assert legalize(_imported()).script() == plain
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps == [
        f"legalize-{_index('LegalizeOps'):02d}-LegalizeOps.py",
        f"legalize-{_index('FuseTIR'):02d}-FuseTIR.py",
    ]
    after_legalize = (tmp_path / dumps[0]).read_text()
    assert "def sin(" in after_legalize  # our sin legalization (``legalizations.sin``) ran there
    assert (
        "fused_" not in after_legalize and "fused_" in (tmp_path / dumps[1]).read_text()
    )  # ... and fusion after


def test_every_pass_of_both_phases_can_be_dumped(tmp_path, monkeypatch):
    monkeypatch.setenv(phases.DUMP_ENV, "all")
    monkeypatch.setenv(phases.DUMP_DIR_ENV, str(tmp_path))
    ex, _, report = build(legalize(_imported()), TARGET)
    names = sorted(p.stem.split("-", 2)[2] for p in tmp_path.iterdir())
    assert names == _all_names()
    assert report.functions and "sin" in "".join(report.functions)
    assert ex is not None


def test_a_dump_naming_no_pass_is_refused(monkeypatch):
    monkeypatch.setenv(phases.DUMP_ENV, "LegalizeOp")
    with pytest.raises(
        ValueError, match=r"names no pass \['LegalizeOp'\]; passes are .*'LegalizeOps'"
    ):
        legalize(_imported())


def test_a_dump_may_name_the_other_phases_pass(tmp_path, monkeypatch):
    """``dvc repro`` runs legalize and build stages under one ``KOKORO_TVM_DUMP_IR``: a build pass
    named there is no error in legalize, which then dumps nothing. The phase runner knows the
    other phase only because ``phases`` hands it every phase's names (the control: with the
    legalize phase's alone, the same name is refused)."""
    from kokoro_tvm.compile import passes, phase_legalize

    monkeypatch.setenv(phases.DUMP_ENV, "ScheduleRules")
    monkeypatch.setenv(phases.DUMP_DIR_ENV, str(tmp_path / "dump"))
    legalize(_imported())
    assert not (tmp_path / "dump").exists()
    with pytest.raises(ValueError, match=r"names no pass \['ScheduleRules'\]"):
        passes.run(phase_legalize.phase(), _imported(), phases.pass_names()["legalize"])


def test_a_pass_run_inside_another_is_not_dumped_as_the_phases(tmp_path, monkeypatch):
    """TVM passes run passes inside themselves, some with the name of one of the phase's own
    (``DeadCodeElimination`` runs inside several): the dump of a name is the module after the
    phase's own pass of that name, not after a namesake run later inside another pass."""
    import tvm
    from tvm import relax

    from kokoro_tvm.compile import passes

    @tvm.transform.module_pass(opt_level=0, name="MarkThenClean")
    class MarkThenClean:
        def transform_module(self, mod, _ctx):
            return relax.transform.DeadCodeElimination()(mod.with_attr("marked_later", 1))

    phase = tvm.transform.Sequential(
        [relax.transform.DeadCodeElimination(), MarkThenClean()], name="legalize"
    )
    monkeypatch.setenv(phases.DUMP_ENV, "DeadCodeElimination")
    monkeypatch.setenv(phases.DUMP_DIR_ENV, str(tmp_path))
    out = passes.run(phase, _imported(), passes.names(phase))
    assert "marked_later" in out.script()  # the namesake ran, on the marked module
    (dump,) = tmp_path.iterdir()
    assert dump.name == "legalize-00-DeadCodeElimination.py"
    assert "marked_later" not in dump.read_text()


def test_the_report_names_the_rule_of_every_kernel_and_the_tuned_ones():
    """``ScheduleRules`` leaves the rule it chose in each kernel (``schedule.RULE_ATTR``) and the
    build's report reads it back; a kernel marked tuned (``ApplyTuningDatabase``) keeps its
    schedule and is reported as tuned. The library's bytes do not depend on the marks."""
    import tvm

    from kokoro_tvm.compile import schedule

    legal = legalize(_imported())
    target = phases.make_target(TARGET)
    prim = tvm.tirx.PrimFunc
    kernels = [gv.name_hint for gv, f in legal.functions.items() if isinstance(f, prim)]
    out, report = schedule.apply(legal, target, tuned={kernels[0]})
    assert set(report.functions) == set(kernels)
    assert report.functions[kernels[0]] == "tuned"
    tvm.ir.assert_structural_equal(out[kernels[0]], legal[kernels[0]])  # untouched by the rules
    assert not any(  # returned as ``build`` compiles it
        schedule.RULE_ATTR in (f.attrs or {}) for f in out.functions.values() if isinstance(f, prim)
    )
    assert {r for k, r in report.functions.items() if k != kernels[0]} <= {*schedule.RULES, "none"}
    _, plain = schedule.apply(legal, target)
    assert plain.functions[kernels[0]] != "tuned"  # the control: unmarked, a rule takes it


def test_the_flow_lists_every_pass_once():
    text = phases.describe()
    for name in _all_names():
        assert sum(line.split()[1] == name for line in text.splitlines()[1:]) == 1, name
    assert text.splitlines()[-1].split()[1] == "tvm.compile"


def _shape_func_module(reads_written: bool):
    """A module holding one VM shape function whose stores come out of slot order, as TVM 0.27
    emits them; with ``reads_written`` the first store reads the slot the last one writes."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def independent(H: T.Buffer((T.int64(8),), "int64")):
        T.func_attr({"tirx.is_host_func": True})
        H[T.int64(6)] = H[T.int64(0)] * T.int64(2) + T.int64(6)
        H[T.int64(4)] = H[T.int64(0)] + T.int64(1)
        H[T.int64(5)] = H[T.int64(0)] * T.int64(120)
        H[T.int64(1)] = H[T.int64(0)] - T.int64(1)

    @T.prim_func(s_tir=True)
    def dependent(H: T.Buffer((T.int64(8),), "int64")):
        T.func_attr({"tirx.is_host_func": True})
        H[T.int64(6)] = H[T.int64(1)] * T.int64(2)
        H[T.int64(4)] = H[T.int64(0)] + T.int64(1)
        H[T.int64(5)] = H[T.int64(0)] * T.int64(120)
        H[T.int64(1)] = H[T.int64(0)] - T.int64(1)

    return tvm.IRModule({"shape_func": dependent if reads_written else independent})


def _store_slots(mod) -> list[int]:
    return [int(s.indices[0]) for s in mod["shape_func"].body.seq]


def test_shape_function_stores_are_put_in_slot_order():
    """TVM 0.27's ``VMShapeLower`` emits a shape function's stores in an order that follows
    object addresses (``tvm_fixes.sorted_shape_stores``): two processes building the same bounded
    decoder wrote different bytes. The pass sorts independent stores by slot, and keeps the
    order where a store reads a slot another one writes."""
    from kokoro_tvm.compile.tvm_fixes import sorted_shape_stores

    assert _store_slots(sorted_shape_stores()(_shape_func_module(False))) == [1, 4, 5, 6]
    assert _store_slots(sorted_shape_stores()(_shape_func_module(True))) == [6, 4, 5, 1]


_BUILD_BOUNDED = """
import hashlib, sys, tempfile, torch
from pathlib import Path
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program
from kokoro_tvm.compile.phases import build, legalize

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.up = torch.nn.ConvTranspose1d(8, 8, 4, stride=2, padding=1)

    def forward(self, x):
        y = self.up(self.conv(x))
        return torch.cat([y, y[..., :3]], -1) * 2

torch.manual_seed(0)
n = torch.export.Dim("n", min=4, max=512)
ep = torch.export.export(M().eval(), (torch.randn(1, 8, 32),), dynamic_shapes=({2: n},))
mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
ex, _, _ = build(legalize(mod), {"kind": "llvm", "mcpu": "x86-64-v3"})
path = Path(tempfile.mkdtemp()) / "lib.so"
ex.export_library(str(path))
print(hashlib.sha256(path.read_bytes()).hexdigest())
"""


def test_a_bounded_library_builds_the_same_bytes_in_every_process():
    """Three fresh processes build a module with a symbolic length (six shape expressions: the
    shape function whose store order followed addresses) into byte-identical libraries.
    Without ``sorted_shape_stores`` they differ (3 digests from the 3 processes, AMD EPYC Zen 3)."""
    import subprocess
    import sys

    # an unused argument of another length per process shifts where the heap puts TVM's objects,
    # as different checkouts' paths do (identical processes can lay out their heaps alike)
    digests = {
        subprocess.run(
            [sys.executable, "-c", _BUILD_BOUNDED, "x" * (i + 1)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        for i in range(3)
    }
    assert len(digests) == 1, digests


def _min_extent_module(swapped: bool):
    """A loop whose extent is ``min`` of two bounds of a symbolic length, in either order: the
    form ``LoopPartition`` gives a partitioned loop, operands ordered by addresses."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def kernel(a: T.handle, b: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        lo, hi = (n // T.int64(2), (n - T.int64(1)) // T.int64(2) + T.int64(1))
        for i in range(T.min(hi, lo) if swapped else T.min(lo, hi)):
            B[i] = T.min(A[i], A[i + T.int64(1)]) if swapped else T.min(A[i + T.int64(1)], A[i])

    return tvm.IRModule({"kernel": kernel})


def test_integer_min_max_operands_are_put_in_one_order():
    """``tvm_fixes.ordered_min_max``: the two orders of a loop bound's integer ``min`` become one
    (TVM 0.27's ``LoopPartition`` gave the decoder's strided conv either, by addresses), while a
    float ``min`` keeps its order (with a NaN operand it does not commute)."""
    from kokoro_tvm.compile.tvm_fixes import ordered_min_max

    one, other = (ordered_min_max()(_min_extent_module(s)) for s in (False, True))
    loop = lambda mod: [l for l in mod.script().splitlines() if l.strip().startswith("for ")]
    assert loop(one) == loop(other)
    assert loop(_min_extent_module(False)) != loop(
        _min_extent_module(True)
    )  # the two orders differ before
    value = lambda mod: [l.strip() for l in mod.script().splitlines() if l.strip().startswith("B[")]
    assert value(one) != value(other)  # float min: as written


def test_the_decoders_strided_conv_lowers_to_one_program_wherever_its_objects_lie():
    """The kernel that made rebuilt decoders differ (``fused_conv1d33_strided_slice23_prepacked``
    of decoder-1536, saved as the build hands it to TIR lowering, TVM 0.27) lowered 60 times,
    each copy loaded at other addresses (other objects allocated in between): the lowering
    ``build`` uses gives one program. TVM's own gave two (the partitioned loop's ``min``
    operands swapped) in 2 to 13 of 30 loads (AMD EPYC Zen 3)."""
    import hashlib
    import random
    from pathlib import Path

    import tvm

    from kokoro_tvm.compile import phases

    text = (Path(__file__).parent / "data" / "decoder_strided_conv_kernel.json").read_text()
    target = phases.make_target({"kind": "llvm", "mcpu": "x86-64-v3"})
    lower, _, _ = tvm.tirx.get_tir_pipeline(phases.tir_pipeline())
    rng, kept, programs = random.Random(0), [], set()
    for _ in range(60):
        kept.append([tvm.tirx.Var(f"v{k}", "int64") + k for k in range(rng.randrange(1, 50))])
        mod = tvm.tirx.transform.BindTarget(target.with_host(target))(tvm.ir.load_json(text))
        with tvm.transform.PassContext(opt_level=3):
            programs.add(hashlib.sha256(lower(mod).script().encode()).hexdigest())
    assert len(programs) == 1


def test_a_rule_that_gives_up_hands_on_and_a_bug_in_one_surfaces(monkeypatch):
    """A rule that finds part-way that a kernel is not its kind (``RuleMismatch``) leaves it to
    the next rule, and the report says so; any other exception is a bug in the rule and stops
    the build, instead of quietly handing the kernel to a slower rule."""
    from kokoro_tvm.compile import schedule
    from kokoro_tvm.compile.schedule.analysis import RuleMismatch

    legal = legalize(_imported())
    target = phases.make_target(TARGET)

    def gives_up(func, cpu):
        raise RuleMismatch("not mine")

    monkeypatch.setitem(schedule.RULES, "conv", gives_up)  # the first rule tried
    _, report = schedule.apply(legal, target)
    assert report.errors and all(e == "conv: not mine" for e in report.errors.values())
    assert "conv" not in report.functions.values() and "none" not in report.functions.values()

    def buggy(func, cpu):
        raise KeyError("a bug")

    monkeypatch.setitem(schedule.RULES, "conv", buggy)
    with pytest.raises(KeyError, match="a bug"):
        schedule.apply(legal, target)
