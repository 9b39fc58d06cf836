"""Optional MetaSchedule tuning of a legalized module, kept only where it beats the rules.

``tune`` extracts one task per distinct PrimFunc (the hand-scheduled LSTM kernel is skipped),
tunes them with MetaSchedule's evolutionary search and XGBoost cost model, then times every
task's best tuned schedule against the schedule pass's rule on the same PrimFunc, interleaved in
one process. Only records that win go into the output database, so ``tune.trials`` can only make
a library faster: a short search that finds a conv slower than the rule's does not replace it.
``apply`` (the build phase's ``ApplyTuningDatabase``, ``phases``) puts the kept records into a
module before the rules run; the rules then skip those PrimFuncs, which the build report lists as
``tuned``.

Candidates are measured where the target's libraries run (``measure.py``): this CPU, or every
free device of a TVM RPC tracker, in parallel. A ``Progress`` callback prints trials done and the
best time so far, per task.

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

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from . import measure

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
    return ms.database.JSONDatabase(
        path_workload=str(workloads), path_tuning_record=str(records), allow_missing=True
    )


def write_empty(db_dir: Path) -> None:
    """The database of ``trials = 0``: no workloads, no records (the build applies nothing)."""
    db_dir.mkdir(parents=True, exist_ok=True)
    for path in database_files(db_dir):
        path.write_text("")


def has_records(db_dir: Path) -> bool:
    records = database_files(db_dir)[1]
    return records.exists() and records.stat().st_size > 0


def tunable_tasks(mod, target) -> list:
    """MetaSchedule tasks of the reduction PrimFuncs (conv, matmul, norms) that ``main`` runs,
    minus those that carry their own schedule (the LSTM recurrence, the Winograd convs).
    Elementwise kernels are memory bound: the rules' parallel + vectorize is what a search finds
    for them too, so trials go elsewhere. ``main_transform_params`` is left out: its kernels (the
    Winograd weight transforms, the prepacking) run once at load, and MetaSchedule's
    ``extract_tasks`` would otherwise spend trials on them (7 of the decoder's 55 tasks)."""
    import tvm
    from tvm import relax, s_tir
    from tvm.s_tir import meta_schedule as ms

    from .schedule.analysis import is_scheduled, root_blocks

    def worth_tuning(func) -> bool:
        if is_scheduled(func):
            return False
        blocks = root_blocks(s_tir.Schedule(func.with_attr("global_symbol", "main"))) or []
        return any(b.is_reduction for b in blocks)

    # DeadCodeElimination keeps every exposed function, so the other entries go first
    runs = tvm.IRModule(
        {
            gv: f
            for gv, f in mod.functions.items()
            if not isinstance(f, relax.Function) or gv.name_hint == "main"
        },
        attrs=mod.attrs,
    )
    runs = relax.transform.DeadCodeElimination(["main"])(runs)
    tasks = ms.relax_integration.extract_tasks(runs, target)
    return [t for t in tasks if worth_tuning(t.dispatched[0]["main"])]


def tune(
    load_mod: Callable[[], Any],
    target_spec: dict[str, Any],
    trials: int,
    db_dir: Path,
    num_cores: int,
    seed: int = 0,
    device: dict[str, Any] | None = None,
    min_gain: float | None = None,
) -> dict[str, Any]:
    """Tune the module ``load_mod()`` returns with ``trials`` trials per task on ``num_cores``
    threads, measured on ``device`` (a ``devices@<target>`` record; ``None``: this CPU); write
    the records that beat the rules to ``db_dir``. Returns a report: per task the tuned and rule
    milliseconds and whether the record was kept. ``trials = 0`` writes an empty database and
    never loads the module or asks for a device (the default stage run stays cheap)."""
    if trials < 0:
        raise ValueError(f"tune.trials must be >= 0, got {trials}")
    min_gain = MIN_GAIN if min_gain is None else min_gain
    report: dict[str, Any] = {
        "trials_per_task": trials,
        "min_gain": min_gain,
        "tasks": [],
        "kept": 0,
    }
    if trials == 0:
        write_empty(db_dir)
        return report
    measurer = measure.for_device(device)
    target = search_target(target_spec, num_cores)
    print(f"tuning {trials} trials per task, measured on {measurer.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tune-") as work:
        t0 = time.perf_counter()
        tasks, found = search(load_mod(), target, trials, Path(work), seed, measurer)
        report["search_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        report["tasks"] = keep_winners(tasks, found, target, db_dir, min_gain, measurer)
        report["keep_s"] = round(time.perf_counter() - t0, 1)
    report["kept"] = sum(r["kept"] for r in report["tasks"])
    report["measured_on"] = measurer.describe()
    return report


def search_target(target_spec: dict[str, Any], num_cores: int):
    import tvm

    # MetaSchedule sizes its parallel loops from the target's core count
    return tvm.target.Target({**target_spec, "num-cores": num_cores})


def search(
    mod,
    target,
    trials: int,
    work: Path,
    seed: int = 0,
    measurer: measure.LocalMeasure | measure.TrackerMeasure | None = None,
) -> tuple[list, Any]:
    """MetaSchedule's evolutionary search over ``tunable_tasks``, measured by ``measurer``
    (default: this CPU); returns them and the database of every measured candidate (in ``work``)."""
    measurer = measurer or measure.for_device(None)
    from tvm.s_tir import meta_schedule as ms

    try:
        import xgboost  # noqa: F401  (MetaSchedule imports it lazily, deep inside the search)
    except ImportError as err:
        raise ImportError(
            "tune.trials > 0 needs MetaSchedule's XGBoost cost model: "
            "pip install -e '.[tune]' (or set tune.trials: 0)"
        ) from err
    tasks = tunable_tasks(mod, target)
    _drop_unnamed_handlers(logging.getLogger("tvm.s_tir.meta_schedule"))
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        tasks, work_dir=str(work), seed=seed
    )
    found = ms.tune_tasks(
        tasks=contexts,
        task_weights=weights,
        work_dir=str(work),
        max_trials_global=trials * len(contexts),
        max_trials_per_task=trials,
        num_trials_per_iter=min(64, trials),
        cost_model="xgb",
        task_scheduler=measurer.scheduler,
        builder=ms.builder.LocalBuilder(
            f_build=build_candidate,
            f_export=measurer.export(target),
            max_workers=target.attrs["num-cores"],
        ),
        runner=measurer.runner(),
        measure_callbacks=[
            *ms.measure_callback.MeasureCallback.create("default"),
            Progress([t.task_name for t in tasks], trials),
        ],
    )
    return tasks, found


def _drop_unnamed_handlers(logger: logging.Logger) -> None:
    """MetaSchedule's ``create_loggers`` (TVM 0.27) re-lists the handlers on its logger by name in a
    ``dictConfig`` and formats each name: one added without a name (pytest's log capture, a user's
    ``addHandler``) is ``None`` there, and the search dies on ``None.format``."""
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)


@derived_object
class Progress(PyMeasureCallback):
    """One line per measured batch: the task, trials done of its budget, its best time so far."""

    def __init__(
        self, names: list[str], trials: int, out: Callable[[str], None] | None = None
    ) -> None:
        self.names, self.trials = names, trials
        self.done = [0] * len(names)
        self.best = [float("inf")] * len(names)
        self.out = out or (lambda line: print(line, flush=True))

    def apply(
        self, task_scheduler, task_id, measure_candidates, builder_results, runner_results
    ) -> None:
        self.done[task_id] += len(runner_results)
        for r in runner_results:
            if r.error_msg is None and r.run_secs:
                self.best[task_id] = min(
                    self.best[task_id], sum(float(s) for s in r.run_secs) / len(r.run_secs)
                )
        failed = sum(r.error_msg is not None for r in runner_results)
        best = (
            f"{self.best[task_id] * 1e3:.4g} ms"
            if self.best[task_id] < float("inf")
            else "none yet"
        )
        self.out(
            f"tune [{task_id + 1}/{len(self.names)}] {self.names[task_id]}: "
            f"{self.done[task_id]}/{self.trials} trials, best {best}"
            + (f", {failed} failed" if failed else "")
        )


def keep_winners(
    tasks: list,
    found,
    target,
    db_dir: Path,
    min_gain: float | None = None,
    measurer: measure.LocalMeasure | measure.TrackerMeasure | None = None,
) -> list[dict]:
    """Time each task's best record against the rules, on ``measurer``'s device; write those
    ``min_gain`` faster to ``db_dir`` (replacing what was there). Returns one row per task."""
    from tvm.s_tir import meta_schedule as ms

    from . import schedule

    min_gain = MIN_GAIN if min_gain is None else min_gain
    measurer = measurer or measure.for_device(None)
    write_empty(db_dir)
    kept = _database(db_dir)
    rows, timed = [], []
    for task in tasks:
        func_mod = task.dispatched[0]
        record = _best(found, func_mod)
        rows.append({"task": task.task_name, "kept": False, "tuned_ms": None})
        if record is not None:  # None: every candidate failed to build or run
            ruled, _ = schedule.apply(func_mod, target)
            timed.append((rows[-1], record, func_mod, [_apply_record(func_mod, record), ruled]))
    # built here, timed on the devices (several at once with several boards)
    pairs = measurer.map(
        lambda job, device: _time_pair(job[3], job[2]["main"], target, device), timed
    )
    for (row, record, func_mod, _), (row["tuned_ms"], row["rules_ms"]) in zip(timed, pairs):
        if row["tuned_ms"] * min_gain < row["rules_ms"]:
            kept.commit_tuning_record(
                ms.database.TuningRecord(
                    record.trace,
                    kept.commit_workload(func_mod),
                    record.run_secs,
                    record.target,
                    record.args_info,
                )
            )
            row["kept"] = True
    return rows


def build_candidate(mod, target, _params):
    """MetaSchedule's default build minus ``import tvm.s_tir.tensor_intrin``.

    The default runs in a fresh worker process per batch and starts with that import, which
    parses every TVMScript tensor intrinsic: longer than the builder's timeout, so every
    candidate failed (docs/measurements.md, "MetaSchedule build without tensor intrinsics").
    Float32 CPU schedules use no tensor intrinsics.
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


def _time_pair(mods: list, func, target, device, rounds: int = 5) -> tuple[float, float]:
    """Median ms of the tuned and the rule-scheduled PrimFunc (``mods``) on random inputs for
    ``func``'s arguments, interleaved rounds of ``time_evaluator`` (``measure.TIMING``) on
    ``device`` (a measurer's ``map``)."""
    import numpy as np

    evaluators, dev = device.evaluators(mods, target)
    args = _random_args(func, dev)
    samples: list[list[float]] = [[], []]
    for _ in range(rounds):
        for i, evaluate in enumerate(evaluators):
            samples[i].append(evaluate(*args).mean)
    return tuple(float(f"{np.median(s) * 1e3:.4g}") for s in samples)  # type: ignore[return-value]


def _random_args(func, dev) -> list:
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    args = []
    for info in ArgInfo.from_prim_func(func):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        if "int" in dtype:  # lengths and indices: 1 is valid for every kernel here
            args.append(tvm.runtime.tensor(np.ones(shape, dtype=dtype), device=dev))
        else:
            args.append(tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype), device=dev))
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
    changed = {
        gv.name_hint
        for gv, f in out.functions.items()
        if isinstance(f, tirx.PrimFunc) and not f.same_as(mod[gv.name_hint])
    }
    return out, changed
