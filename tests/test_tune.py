"""MetaSchedule tuning (``tune.py``): a real search on a small conv + linear, records that the
build applies, and the rule that keeps only records beating the schedule rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kokoro_tvm.compile import tune
from kokoro_tvm.compile.build import build
from kokoro_tvm.compile.legalize import legalize
from kokoro_tvm.runtime.library import bind_params

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}


class ConvLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(16, 24, 5, padding=2)
        self.lin = torch.nn.Linear(24, 32)

    def forward(self, x):
        return self.lin(torch.relu(self.conv(x)).transpose(1, 2))


def _legalized(module, x):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    ep = torch.export.export(module.eval(), (x,))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return legalize(mod), [p.numpy() for p in params.get("main", [])]


def _run(ex, x, params):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()), *bind_params(vm, params))
    return (out if hasattr(out, "numpy") else out[0]).numpy()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One real 4-trial search; its records are kept whatever the timings (``min_gain = 0``) so
    that the build has tuned schedules to apply."""
    torch.manual_seed(0)
    module, x = ConvLinear(), torch.randn(1, 16, 64)
    legal, params = _legalized(module, x)
    target = tune.search_target(V3, 2)
    tasks, found = tune.search(legal, target, 4, tmp_path_factory.mktemp("search"))
    db = tmp_path_factory.mktemp("tune")
    rows = tune.keep_winners(tasks, found, target, db, min_gain=0.0)
    report = {"tasks": rows, "kept": sum(r["kept"] for r in rows), "search": (tasks, found, target)}
    return module, x, legal, params, db, report


def test_search_measures_every_task_and_records_the_winners(tuned):
    _, _, _, _, db, report = tuned
    names = [row["task"] for row in report["tasks"]]
    # the two reductions; elementwise kernels (transposes, reshapes) are not worth trials
    assert len(names) == 2 and any("conv1d" in n for n in names) and any("matmul" in n for n in names), names
    measured = [row for row in report["tasks"] if row["tuned_ms"] is not None]
    assert measured, report
    for row in measured:
        assert row["tuned_ms"] > 0 and row["rules_ms"] > 0
    kept = [row["task"] for row in report["tasks"] if row["kept"]]
    assert kept == [row["task"] for row in measured] and report["kept"] == len(kept)
    records = (db / tune.RECORDS).read_text().splitlines()
    assert len(records) == len(kept)
    json.loads(records[0])  # MetaSchedule's JSON-lines format


def test_build_applies_tuned_records_and_matches_torch(tuned):
    module, x, legal, params, db, report = tuned
    ex, _, sched = build(legal, V3, db)
    tuned_funcs = sorted(f for f, rule in sched.functions.items() if rule == "tuned")
    assert tuned_funcs == sorted(row["task"] for row in report["tasks"] if row["kept"])
    with torch.no_grad():
        ref = module(x).numpy()
    got = _run(ex, x, params)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    # without the database the same module gets rules only
    _, _, plain = build(legal, V3, None)
    assert "tuned" not in plain.functions.values()


def test_records_that_lose_to_the_rules_are_dropped(tuned, tmp_path):
    """With a gain no schedule reaches, nothing is kept and the build is rules only."""
    _, _, legal, _, _, report = tuned
    rows = tune.keep_winners(*report["search"], tmp_path, min_gain=1e9)
    assert [r["task"] for r in rows] == [r["task"] for r in report["tasks"]]
    assert not any(r["kept"] for r in rows) and not tune.has_records(tmp_path)
    _, _, sched = build(legal, V3, tmp_path)
    assert "tuned" not in sched.functions.values()


def test_zero_trials_writes_an_empty_database(tuned, tmp_path):
    _, _, legal, _, _, _ = tuned
    def unloadable():
        raise AssertionError("trials = 0 must not load the module")

    report = tune.tune(unloadable, V3, trials=0, db_dir=tmp_path, num_cores=2)
    assert report["tasks"] == [] and not tune.has_records(tmp_path)
    assert all(p.exists() for p in tune.database_files(tmp_path))
    with pytest.raises(ValueError, match="tune.trials"):
        tune.tune(lambda: legal, V3, trials=-1, db_dir=tmp_path, num_cores=2)
