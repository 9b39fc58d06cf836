"""The compile flow as named passes (``compile.passes``): the phases run their registered passes in
order, and ``KOKORO_TVM_DUMP_IR`` dumps the module after any of them without changing the result."""

from __future__ import annotations

import pytest
import torch

from kokoro_tvm.compile import passes, pipeline
from kokoro_tvm.compile.build import build
from kokoro_tvm.compile.importer import import_params_as_inputs
from kokoro_tvm.compile.legalize import PASSES, legalize

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


def test_dumps_follow_the_named_passes_and_change_nothing(tmp_path, monkeypatch):
    plain = legalize(_imported()).script()
    monkeypatch.setenv(passes.DUMP_ENV, "LegalizeOps,FuseTIR")
    monkeypatch.setenv(passes.DUMP_DIR_ENV, str(tmp_path))
    assert legalize(_imported()).script() == plain
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps == [f"legalize-{PASSES.index('LegalizeOps'):02d}-LegalizeOps.py",
                     f"legalize-{PASSES.index('FuseTIR'):02d}-FuseTIR.py"]
    after_legalize = (tmp_path / dumps[0]).read_text()
    assert "def sin(" in after_legalize  # our sin legalization (``legalizations.sin``) ran there
    assert "fused_" not in after_legalize and "fused_" in (tmp_path / dumps[1]).read_text()  # ... and fusion after


def test_every_pass_of_both_phases_can_be_dumped(tmp_path, monkeypatch):
    monkeypatch.setenv(passes.DUMP_ENV, "all")
    monkeypatch.setenv(passes.DUMP_DIR_ENV, str(tmp_path))
    ex, _, report = build(legalize(_imported()), TARGET)
    names = sorted(p.stem.split("-", 2)[2] for p in tmp_path.iterdir())
    assert names == sorted(pipeline.PHASES["legalize"] + pipeline.PHASES["build"])
    assert report.functions and "sin" in "".join(report.functions)
    assert ex is not None


def test_a_dump_naming_no_pass_is_refused(monkeypatch):
    monkeypatch.setenv(passes.DUMP_ENV, "LegalizeOp")
    with pytest.raises(ValueError, match=r"names no pass \['LegalizeOp'\]; passes are .*'LegalizeOps'"):
        legalize(_imported())


def test_the_pipeline_lists_every_registered_pass_once():
    text = pipeline.describe()
    for name in passes.REGISTRY:
        assert sum(line.split()[1] == name for line in text.splitlines()[1:]) == 1, name
    assert text.splitlines()[-1].split()[1] == "tvm.compile"
