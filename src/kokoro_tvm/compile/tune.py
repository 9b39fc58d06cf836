"""Optional MetaSchedule tuning of a legalized module, kept only where it beats the rules.

``tune`` extracts one task per distinct PrimFunc (the hand-scheduled LSTM kernel is skipped),
tunes them with MetaSchedule's evolutionary search and XGBoost cost model, then times every
task's best tuned schedule against the schedule pass's rule on the same PrimFunc, interleaved in
one process. Only records that win go into the output database, so ``tune.trials`` can only make
a library faster: a 32-trial search that finds a 40 GFLOP/s conv does not replace a 100 GFLOP/s
rule. ``apply`` (called by ``compiler.build``) puts the kept records into a module before the
rules run; the rules then skip those PrimFuncs, which the build report lists as ``tuned``.

The database is two JSON-lines files (MetaSchedule's ``JSONDatabase``), a DVC output like any
other: CI restores it from the cache instead of tuning again. ``trials = 0`` writes an empty one.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
#: A tuned schedule must beat the rule by this factor to be kept: below it, the gap is timing
#: noise on a shared machine and the rule (which the tests cover) stays.
MIN_GAIN = 1.03


def database_files(db_dir: Path) -> tuple[Path, Path]:
    return db_dir / WORKLOADS, db_dir / RECORDS


def _database(db_dir: Path):
    from tvm.s_tir import meta_schedule as ms

    workloads, records = database_files(db_dir)
    return ms.database.JSONDatabase(path_workload=str(workloads), path_tuning_record=str(records),
                                    allow_missing=True)


def write_empty(db_dir: Path) -> None:
    """The database of ``trials = 0``: no workloads, no records (the build applies nothing)."""
    db_dir.mkdir(parents=True, exist_ok=True)
    for path in database_files(db_dir):
        path.write_text("")


def has_records(db_dir: Path) -> bool:
    records = database_files(db_dir)[1]
    return records.exists() and records.stat().st_size > 0


def tunable_tasks(mod, target) -> list:
    """MetaSchedule tasks of ``mod``'s reduction PrimFuncs (conv, matmul, norms), minus those that
    carry their own schedule (the LSTM recurrence). Elementwise kernels are memory bound: the
    rules' parallel + vectorize is what a search finds for them too, so trials go elsewhere."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from .schedule.analysis import is_scheduled, root_blocks

    def worth_tuning(func) -> bool:
        if is_scheduled(func):
            return False
        blocks = root_blocks(s_tir.Schedule(func.with_attr("global_symbol", "main"))) or []
        return any(b.is_reduction for b in blocks)

    tasks = ms.relax_integration.extract_tasks(mod, target)
    return [t for t in tasks if worth_tuning(t.dispatched[0]["main"])]


def tune(load_mod: Callable[[], Any], target_spec: dict[str, Any], trials: int, db_dir: Path,
         num_cores: int, seed: int = 0) -> dict[str, Any]:
    """Tune the module ``load_mod()`` returns with ``trials`` trials per task on ``num_cores``
    threads; write the records that beat the rules to ``db_dir``. Returns a report: per task
    the tuned and rule milliseconds and whether the record was kept. ``trials = 0`` writes an
    empty database and never loads the module (the default stage run stays cheap)."""
    if trials < 0:
        raise ValueError(f"tune.trials must be >= 0, got {trials}")
    report: dict[str, Any] = {"trials_per_task": trials, "min_gain": MIN_GAIN, "tasks": [], "kept": 0}
    if trials == 0:
        write_empty(db_dir)
        return report
    target = search_target(target_spec, num_cores)
    with tempfile.TemporaryDirectory(prefix="tune-") as work:
        t0 = time.perf_counter()
        tasks, found = search(load_mod(), target, trials, Path(work), seed)
        report["search_s"] = round(time.perf_counter() - t0, 1)
        report["tasks"] = keep_winners(tasks, found, target, db_dir)
    report["kept"] = sum(r["kept"] for r in report["tasks"])
    return report


def search_target(target_spec: dict[str, Any], num_cores: int):
    import tvm

    # MetaSchedule sizes its parallel loops from the target's core count
    return tvm.target.Target({**target_spec, "num-cores": num_cores})


def search(mod, target, trials: int, work: Path, seed: int = 0) -> tuple[list, Any]:
    """MetaSchedule's evolutionary search over ``tunable_tasks``; returns them and the database
    of every measured candidate (in ``work``)."""
    from tvm.s_tir import meta_schedule as ms

    try:
        import xgboost  # noqa: F401  (MetaSchedule imports it lazily, deep inside the search)
    except ImportError as err:
        raise ImportError("tune.trials > 0 needs MetaSchedule's XGBoost cost model: "
                          "pip install -e '.[tune]' (or set tune.trials: 0)") from err
    tasks = tunable_tasks(mod, target)
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        tasks, work_dir=str(work), seed=seed)
    found = ms.tune_tasks(
        tasks=contexts, task_weights=weights, work_dir=str(work),
        max_trials_global=trials * len(contexts), max_trials_per_task=trials,
        num_trials_per_iter=min(64, trials), cost_model="xgb",
        builder=ms.builder.LocalBuilder(f_build=build_candidate, max_workers=target.attrs["num-cores"]))
    return tasks, found


def keep_winners(tasks: list, found, target, db_dir: Path, min_gain: float | None = None) -> list[dict]:
    """Time each task's best record against the rules; write those ``min_gain`` faster to
    ``db_dir`` (replacing what was there). Returns one row per task."""
    from tvm.s_tir import meta_schedule as ms

    min_gain = MIN_GAIN if min_gain is None else min_gain
    write_empty(db_dir)
    kept = _database(db_dir)
    rows = []
    for task in tasks:
        func_mod = task.dispatched[0]
        record = _best(found, func_mod)
        row: dict[str, Any] = {"task": task.task_name, "kept": False, "tuned_ms": None}
        if record is not None:  # None: every candidate failed to build or run
            tuned = _apply_record(func_mod, record)
            row["tuned_ms"], row["rules_ms"] = _time_pair(tuned, func_mod, target)
            if row["tuned_ms"] * min_gain < row["rules_ms"]:
                kept.commit_tuning_record(ms.database.TuningRecord(
                    record.trace, kept.commit_workload(func_mod), record.run_secs,
                    record.target, record.args_info))
                row["kept"] = True
        rows.append(row)
    return rows


def build_candidate(mod, target, _params):
    """MetaSchedule's default build minus ``import tvm.s_tir.tensor_intrin``.

    The default runs in a fresh worker process per batch and starts with that import, which
    takes ~60 s here (it parses every TVMScript tensor intrinsic): longer than the builder's 30 s
    timeout, so every candidate failed. Float32 CPU schedules use no tensor intrinsics.
    """
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _best(db, func_mod):
    if not db.has_workload(func_mod):
        return None
    top = db.get_top_k(db.commit_workload(func_mod), 1)
    return top[0] if top else None


def _apply_record(func_mod, record):
    from tvm import s_tir

    sch = s_tir.Schedule(func_mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def _time_pair(tuned_mod, func_mod, target, rounds: int = 5) -> tuple[float, float]:
    """Median ms of the tuned and the rule-scheduled PrimFunc on random inputs, interleaved
    rounds of ``time_evaluator`` (each at least 20 ms of calls, so microsecond kernels count)."""
    import numpy as np
    import tvm

    from . import schedule

    ruled, _ = schedule.apply(func_mod, target)
    args = _random_args(func_mod["main"])
    evaluators = [tvm.compile(m, target=target).jit().time_evaluator("main", tvm.cpu(), min_repeat_ms=20)
                  for m in (tuned_mod, ruled)]
    samples: list[list[float]] = [[], []]
    for _ in range(rounds):
        for i, evaluate in enumerate(evaluators):
            samples[i].append(evaluate(*args).mean)
    return tuple(float(f"{np.median(s) * 1e3:.4g}") for s in samples)  # type: ignore[return-value]


def _random_args(func) -> list:
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    args = []
    for info in ArgInfo.from_prim_func(func):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        if "int" in dtype:  # lengths and indices: 1 is valid for every kernel here
            args.append(tvm.runtime.tensor(np.ones(shape, dtype=dtype)))
        else:
            args.append(tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)))
    return args


def apply(mod, target, db_dir: Path | None):
    """``mod`` with the records of ``db_dir`` applied (and the names of the PrimFuncs they
    scheduled); ``mod`` itself when there is no database or it is empty."""
    import tvm
    from tvm import relax, tirx

    if db_dir is None or not has_records(db_dir):
        return mod, set()
    # db_dir uses MetaSchedule's own file names, so it is a work_dir as the pass expects
    with tvm.target.Target(dict(target)) if isinstance(target, dict) else target:
        out = relax.transform.MetaScheduleApplyDatabase(work_dir=str(db_dir))(mod)
    changed = {gv.name_hint for gv, f in out.functions.items()
               if isinstance(f, tirx.PrimFunc) and not f.same_as(mod[gv.name_hint])}
    return out, changed
