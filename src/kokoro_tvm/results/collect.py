"""This machine's pipeline metrics, gathered from ``artifacts/`` into one results record.

What is read is what the stages write, for every library ``params.yaml`` builds: the device
record (``devices@T``), the validation metrics (``validate@C-B-T``), the bench metrics and the
roofline's top kernels (``bench@C-B-T``), the build time and size (``build@C-B-T``), the
toolchain, ``bench_e2e``, and ``bench_cold`` and ``bench_cuts`` where they ran. A missing file
is an error naming the stage that writes it: a
results file reports one complete ``dvc repro``. The metrics must come from this CPU (the bench
stages record its name): a cache restored from another machine's run is refused, since the
record would file that machine's timings under this one.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from .. import artifacts
from ..params import Params
from ..spec import COMPONENTS
from . import record

#: Kernels of a library's roofline kept in the record (the stage keeps more).
TOP_KERNELS = 5
#: Per-kernel fields kept from the roofline plot rows.
KERNEL_KEYS = ("kernel", "calls", "ms", "share", "gflops", "of_peak")


class MetricsError(record.RecordError):
    """A stage's metrics are missing or were measured elsewhere."""


def read_metric(path: Path, stage: str) -> Any:
    """One metrics file, or an error that names the stage which writes it."""
    if not path.exists():
        raise MetricsError(
            f"{path} is missing: stage {stage} writes it; run `dvc repro` to the end first"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise MetricsError(f"{path}: not JSON ({e}); rerun stage {stage}") from e


def scalars(doc: dict[str, Any]) -> dict[str, Any]:
    """The numbers, strings and booleans of a metrics document (no nested rows or lists)."""
    return {k: v for k, v in doc.items() if isinstance(v, int | float | str | bool)}


def library(root: Path, component: str, bucket: int, target: str) -> dict[str, Any]:
    """One library's record: where it ran, its validation per length, its bench, its build."""
    name = f"{component}-{bucket}"
    stage = f"{{}}@{name}-{target}"
    device = read_metric(artifacts.device_file(target, root), f"devices@{target}")
    where = (component, bucket, target, root)
    check = read_metric(artifacts.validation_file(*where), stage.format("validate"))
    bench = read_metric(artifacts.bench_file(*where), stage.format("bench"))
    build_time = read_metric(artifacts.build_time_file(*where), stage.format("build"))
    info = read_metric(artifacts.build_info_file(*where), stage.format("build"))
    row: dict[str, Any] = {
        "library": name,
        "component": component,
        "bucket": bucket,
        "target": target,
        "device": device["device"],
        "emulated": bool(device.get("emulated")),
        "validated": bool(check.get("validated", "lengths" in check)),
        "build_s": build_time["build_s"],
        "library_bytes": info.get("bytes"),
    }
    if row["validated"]:
        row["validation"] = {
            "ok": check["ok"],
            "criterion": check.get("criterion"),
            "worst": {k: v for k, v in check.items() if k.startswith("worst_")},
            "lengths": {n: scalars(r) for n, r in check["lengths"].items()},
        }
    else:
        row["reason"] = check.get("reason") or device.get("reason")
    if bench.get("timed"):
        kept = scalars(bench)
        for key in ("peak", "kernel_profile"):
            kept |= {f"{key}.{k}": v for k, v in scalars(bench.get(key) or {}).items()}
        verdicts = {
            k.removesuffix("_vs_float64"): v.get("ok")
            for k, v in bench.items()
            if k.endswith("_vs_float64") and isinstance(v, dict)
        }
        row["bench"] = kept | {"agrees_with_float64": verdicts}
        roofline = artifacts.roofline_file(*where)
        if roofline.exists():
            rows = json.loads(roofline.read_text(encoding="utf-8"))
            row["top_kernels"] = [
                {k: r[k] for k in KERNEL_KEYS if k in r} for r in rows[:TOP_KERNELS]
            ]
    else:
        row["bench"] = None
        row.setdefault("reason", bench.get("reason"))
    return row


def e2e(root: Path) -> dict[str, Any]:
    """``bench_e2e``'s rows as a list by length, and its total."""
    doc = read_metric(artifacts.bench_e2e_file(root), "bench_e2e")
    lengths = sorted(
        (scalars(v) for k, v in doc.items() if k.startswith("phonemes_") and isinstance(v, dict)),
        key=lambda r: r.get("phonemes", 0),
    )
    picked = doc.get("picked") or []
    return {
        "target": doc.get("target"),
        "picked": picked[-1] if picked else None,
        "threads": doc.get("threads"),
        "repeats": doc.get("repeats"),
        "cpu": doc.get("cpu"),
        "lengths": lengths,
        "total": scalars(doc.get("total") or {}),
    }


#: bench_cold's measures, each ``{key: {kokoro_tvm, kokoro_onnx, ratio}}``, with
#: ``kokoro_tvm_fp32`` and ``ratio_fp32`` where it ran beside a narrower pick (``eval.cold_start``)
COLD_MEASURES = ("cold", "stream", "warm")


def cold_start(root: Path, cpu: dict[str, Any]) -> dict[str, Any] | None:
    """``bench_cold``'s medians and per-round ratios, where the stage ran (it is optional here:
    a results file can predate it)."""
    path = artifacts.bench_cold_file(root)
    if not path.exists():
        return None
    doc = read_metric(path, "bench_cold")
    name = (doc.get("cpu") or {}).get("model_name")
    if name != cpu["model_name"]:
        raise MetricsError(
            f"{path}: bench_cold was measured on {name!r}, but this machine is "
            f"{cpu['model_name']!r}; run `make results` where `dvc repro` ran"
        )
    return {
        "n_phonemes": (doc.get("input") or {}).get("n_phonemes"),
        "rounds": doc.get("rounds"),
        "threads": doc.get("threads"),
        # per runtime runner, the precision of each component (absent before precisions)
        "precision": doc.get("precision") or {},
        "measures": {m: doc[m] for m in COLD_MEASURES if isinstance(doc.get(m), dict)},
    }


#: what the cuts table keeps of each way of ``bench_cuts``, over its single sentences and its
#: paragraphs (``eval.cuts``)
CUT_KEYS = ("f0_rmse_cents", "extra_pauses_per_sentence", "duration_ratio", "extra_wer", "pass")


def cut_cost(root: Path, cpu: dict[str, Any]) -> dict[str, Any] | None:
    """``bench_cuts``'s verdicts per way, where the stage measured (optional, as ``bench_cold``)."""
    path = artifacts.bench_cuts_file(root)
    if not path.exists():
        return None
    doc = read_metric(path, "bench_cuts")
    if "skipped" in doc:
        return None
    name = (doc.get("cpu") or {}).get("model_name")
    if name != cpu["model_name"]:
        raise MetricsError(
            f"{path}: bench_cuts was measured on {name!r}, but this machine is "
            f"{cpu['model_name']!r}; run `make results` where `dvc repro` ran"
        )
    return {
        "voice": doc.get("voice"),
        "sentences": doc.get("sentences"),
        "texts": doc.get("texts"),
        "ways": {
            way: {part: {k: v[part][k] for k in CUT_KEYS} for part in ("sentences", "paragraphs")}
            for way, v in doc["ways"].items()
        },
    }


#: what the results keep of a narrower precision's bench (``bench_narrow``, ``bench.against_fp32``)
NARROW_KEYS = ("fp32_ms", "speedup_vs_fp32", "worst_log_mel_snr_db", "worst_mcd_db", "load_average")


def precisions(root: Path, prm: Params) -> list[dict[str, Any]]:
    """Per narrower-precision library (params ``precision``) and target: built or why not, its
    validation's verdict (lengths and languages) and, where timed here, its speed against
    float32's library of the same target."""
    rows = []
    for target in prm.targets:
        for component in COMPONENTS:
            for precision in prm.precision.of(component):
                for bucket in prm.buckets.of(component):
                    at = {"precision": precision}
                    bench = read_metric(
                        artifacts.bench_file(component, bucket, target, root, **at), "bench_narrow"
                    )
                    check = read_metric(
                        artifacts.validation_file(component, bucket, target, root, **at),
                        "validate_narrow",
                    )
                    row = {
                        "library": artifacts.library_name(component, bucket, precision),
                        "target": target,
                        "precision": precision,
                        "validated": bool(check.get("validated")),
                        "reason": check.get("reason"),
                        "languages": sorted(check.get("languages", {})),
                        "timed": bool(bench.get("timed")),
                    }
                    if row["timed"]:
                        row |= {k: bench.get(k) for k in NARROW_KEYS}
                        row[f"{precision}_ms"] = bench.get(f"{precision}_ms")
                    rows.append(row)
    return rows


def measured_on(paths: list[Path]) -> str:
    """The day the newest metrics file was written (UTC): when this record's repro measured."""
    newest = max(p.stat().st_mtime for p in paths if p.exists())
    return dt.datetime.fromtimestamp(newest, dt.UTC).date().isoformat()


def refuse_other_cpu(cpu: dict[str, Any], rec: dict[str, Any], root: Path) -> None:
    """The bench stages name the CPU they ran on: it must be this one."""
    seen = {("bench_e2e", rec["e2e"].pop("cpu"))}
    seen |= {
        (f"bench@{lib['library']}-{lib['target']}", lib["bench"].get("cpu"))
        for lib in rec["libraries"]
        if lib["bench"] and lib["device"] == "host"
    }
    other = sorted((stage, name) for stage, name in seen if name != cpu["model_name"])
    if other:
        stage, name = other[0]
        raise MetricsError(
            f"{root}: {stage} was measured on {name!r}, but this machine is {cpu['model_name']!r}: "
            "a results file is this CPU's own; run `make results` where `dvc repro` ran, "
            "or `--render-only` to render the committed files"
        )


def collect(root: Path, prm: Params, cpu: dict[str, Any]) -> dict[str, Any]:
    """The results record of the ``dvc repro`` in ``root``, on the CPU ``cpu`` (``machine``)."""
    libraries = [
        library(root, component, bucket, target)
        for target in prm.targets
        for component in COMPONENTS
        for bucket in prm.buckets.of(component)
    ]
    rec = {
        "schema": record.SCHEMA,
        "cpu": cpu,
        "toolchain": read_metric(artifacts.toolchain_file(root), "toolchain"),
        "e2e": e2e(root),
        "libraries": libraries,
    }
    refuse_other_cpu(cpu, rec, root)
    cold = cold_start(root, cpu)
    if cold:
        rec["cold_start"] = cold
    cuts = cut_cost(root, cpu)
    if cuts:
        rec["cut_cost"] = cuts
    narrow = precisions(root, prm)
    if narrow:
        rec["precisions"] = narrow
    loads = [
        lib["bench"]["load_avg_1m"]
        for lib in libraries
        if lib["bench"] and "load_avg_1m" in lib["bench"]
    ]
    rec["load_avg_1m"] = [min(loads), max(loads)] if loads else None
    rec["measured"] = measured_on(
        [artifacts.bench_e2e_file(root)] + list(artifacts.bench_dir(root).glob("*/*.json"))
    )
    return record.check(rec, f"the metrics in {root}")
