"""MetaSchedule tuning (``compile/metaschedule.py``): a real search on a small conv + linear,
records that the build applies, and the rule that keeps only records beating the schedule rules."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import torch

from kokoro_tvm.compile import measure, metaschedule
from kokoro_tvm.compile.phases import build, legalize
from kokoro_tvm.devices.tracker import local_servers, local_tracker
from kokoro_tvm.runtime.vm import bind_params

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
    target = metaschedule.search_target(V3, 2)
    tasks, found = metaschedule.search(legal, target, 4, tmp_path_factory.mktemp("search"))
    db = tmp_path_factory.mktemp("tune")
    rows = metaschedule.keep_winners(tasks, found, target, db, min_gain=0.0)
    report = {"tasks": rows, "kept": sum(r["kept"] for r in rows), "search": (tasks, found, target)}
    return module, x, legal, params, db, report


def test_search_measures_every_task_and_records_the_winners(tuned):
    _, _, _, _, db, report = tuned
    names = [row["task"] for row in report["tasks"]]
    # the two reductions; elementwise kernels (transposes, reshapes) are not worth trials
    assert (
        len(names) == 2 and any("conv1d" in n for n in names) and any("matmul" in n for n in names)
    ), names
    measured = [row for row in report["tasks"] if row["tuned_ms"] is not None]
    assert measured, report
    for row in measured:
        assert row["tuned_ms"] > 0 and row["rules_ms"] > 0
    kept = [row["task"] for row in report["tasks"] if row["kept"]]
    assert kept == [row["task"] for row in measured] and report["kept"] == len(kept)
    records = (db / metaschedule.RECORDS).read_text().splitlines()
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
    rows = metaschedule.keep_winners(*report["search"], tmp_path, min_gain=1e9)
    assert [r["task"] for r in rows] == [r["task"] for r in report["tasks"]]
    assert not any(r["kept"] for r in rows) and not metaschedule.has_records(tmp_path)
    _, _, sched = build(legal, V3, tmp_path)
    assert "tuned" not in sched.functions.values()


def test_zero_trials_writes_an_empty_database(tuned, tmp_path):
    _, _, legal, _, _, _ = tuned

    def unloadable():
        raise AssertionError("trials = 0 must not load the module")

    report = metaschedule.tune(unloadable, V3, trials=0, db_dir=tmp_path, num_cores=2)
    assert report["tasks"] == [] and not metaschedule.has_records(tmp_path)
    assert all(p.exists() for p in metaschedule.database_files(tmp_path))
    with pytest.raises(ValueError, match="tune.trials"):
        metaschedule.tune(lambda: legal, V3, trials=-1, db_dir=tmp_path, num_cores=2)


def test_tuning_through_a_tracker_measures_on_every_free_device(tuned, tmp_path, capsys):
    """``devices.<target>: {tracker, key}``: candidates go to every server the tracker has free
    under the key, at once (one connection per server), the keep-or-drop timing runs there too,
    and progress is printed per batch; the database is the same artifact the build applies."""
    module, x, legal, params, _, _ = tuned
    with local_tracker() as tracker, local_servers(tracker, "tune-test", 2) as servers:
        record = {
            "device": "rpc",
            "target": "v3",
            "tracker": tracker,
            "key": "tune-test",
            "timeout_s": 30,
        }
        report = metaschedule.tune(lambda: legal, V3, 8, tmp_path, 2, device=record, min_gain=0.0)
        logs = [log.read_text() for _, log in servers]
    out = capsys.readouterr().out
    assert f"measured on 2 device(s) under key 'tune-test' at {tracker}" in out
    for i, task in enumerate(r["task"] for r in report["tasks"]):
        assert re.search(rf"tune \[{i + 1}/2\] {task}: 8/8 trials, best [0-9.e-]+ ms", out), out
    # both servers measured search candidates (MetaSchedule's tar) ...
    assert all(log.count("tvm_tmp_mod.tar") >= 1 for log in logs), logs
    # ... and one of them timed each task's best record against its rule
    assert sum(log.count("candidate") for log in logs) == 2 * len(report["tasks"])
    assert report["kept"] == len(report["tasks"]) == 2 and report["measured_on"].startswith(
        "2 device(s)"
    )
    ex, _, sched = build(legal, V3, tmp_path)
    assert sorted(f for f, rule in sched.functions.items() if rule == "tuned") == sorted(
        r["task"] for r in report["tasks"]
    )
    with torch.no_grad():
        ref = module(x).numpy()
    assert np.abs(_run(ex, x, params) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_a_tracker_without_a_free_device_is_a_clear_error_after_a_bounded_wait(tuned, tmp_path):
    legal = tuned[2]
    with local_tracker() as tracker:
        record = {
            "device": "rpc",
            "target": "v3",
            "tracker": tracker,
            "key": "no-board",
            "timeout_s": 2,
        }
        t0 = time.monotonic()
        with pytest.raises(
            measure.TuneDeviceError,
            match=r"no free device under key 'no-board' for 2 s.*"
            r"rpc_server --tracker .* --key no-board",
        ):
            metaschedule.tune(lambda: legal, V3, 4, tmp_path, 2, device=record)
        assert time.monotonic() - t0 < 15
        t0 = time.monotonic()
    with pytest.raises(
        measure.TuneDeviceError,
        match="no RPC tracker at 127.0.0.1:1 .*python -m tvm.exec.rpc_tracker",
    ):
        metaschedule.tune(
            lambda: legal, V3, 4, tmp_path, 2, device=record | {"tracker": "127.0.0.1:1"}
        )
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize(
    "record, why",
    [
        (
            {"device": "qemu", "target": "aarch64", "emulated": True},
            "runs under qemu here, whose timings mean nothing",
        ),
        (
            {"device": "none", "target": "x86_64_v4", "reason": "this CPU lacks avx512f"},
            "no device runs it .this CPU lacks",
        ),
    ],
)
def test_tuning_refuses_devices_without_real_timings(tuned, tmp_path, record, why):
    with pytest.raises(measure.TuneDeviceError, match=why + r".*devices\.\w+: \{tracker"):
        metaschedule.tune(lambda: tuned[2], V3, 4, tmp_path, 2, device=record)
    # trials = 0 needs no device at all
    assert metaschedule.tune(lambda: tuned[2], V3, 0, tmp_path, 2, device=record)["tasks"] == []


def test_one_server_measures_and_times_every_task(tuned, tmp_path):
    """With a single device the keep-or-drop timings of all tasks share one session (a second
    request would wait for the device the first holds)."""
    legal = tuned[2]
    with local_tracker() as tracker, local_servers(tracker, "tune-one", 1):
        record = {
            "device": "rpc",
            "target": "v3",
            "tracker": tracker,
            "key": "tune-one",
            "timeout_s": 20,
        }
        report = metaschedule.tune(lambda: legal, V3, 4, tmp_path, 2, device=record)
    assert len(report["tasks"]) == 2 and all(
        r["tuned_ms"] and r["rules_ms"] for r in report["tasks"]
    ), report


def test_load_time_kernels_get_no_trials():
    """A Winograd conv's weight transform (a matmul in ``main_transform_params``) runs once at
    load: the search tunes what ``main`` runs, here the direct k=5 conv, and not the Winograd
    kernel either (it carries its own schedule)."""
    import tvm
    from tvm import relax

    module = torch.nn.Sequential(
        torch.nn.Conv1d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv1d(16, 24, 5, padding=2),
    )
    legal, _ = _legalized(module, torch.randn(1, 16, 64))

    def kernels(fn: str) -> set[str]:
        called: set[str] = set()
        relax.analysis.post_order_visit(
            legal[fn].body,
            lambda e: (
                called.add(e.args[0].name_hint)
                if (
                    isinstance(e, relax.Call)
                    and isinstance(e.op, tvm.ir.Op)
                    and e.op.name == "relax.call_tir"
                )
                else None
            ),
        )
        return called

    at_load = kernels("main_transform_params") - kernels("main")
    assert any("matmul" in k for k in at_load), at_load  # G g, the Winograd weights' transform
    names = [
        t.task_name for t in metaschedule.tunable_tasks(legal, metaschedule.search_target(V3, 2))
    ]
    assert len(names) == 1 and "conv1d" in names[0] and names[0] in kernels("main"), names
