"""The results generator (``python -m kokoro_tvm.results``) on metric files written as the stages
write them (their own writers where they are plain functions: ``validate.summary`` over real
verdicts, the bench stage's ``write_outputs``, ``resolve.resolve``), for a CPU posed through
``KOKORO_TVM_CPUINFO``: what it collects, what it renders, and what it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from kokoro_tvm import artifacts as A
from kokoro_tvm.cpuinfo import CPUINFO_ENV
from kokoro_tvm.devices import resolve
from kokoro_tvm.eval import cases, verdicts
from kokoro_tvm.pipeline.bench import write_outputs
from kokoro_tvm.results import figures, machine, tables
from kokoro_tvm.results.__main__ import main
from kokoro_tvm.spec import COMPONENTS, Axis, Output

REPO = Path(__file__).resolve().parents[1]
AVX2_FLAGS = (
    "fpu sse sse2 pni ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt xsave avx f16c lahf_lm abm "
    "bmi1 avx2 bmi2"
)
AVX512_FLAGS = AVX2_FLAGS + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"
V3_ISA = ["avx", "avx2", "bmi", "bmi2", "cx16", "f16c", "fma", "lzcnt", "movbe", "popcnt"]
V4_ISA = [*V3_ISA, "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"]
AXIS_BUCKET = {Axis.TOKENS: 64, Axis.FRAMES: 128}
BUCKETS = {name: AXIS_BUCKET[c.axis] for name, c in COMPONENTS.items()}
README = (
    f"# project\n\n## Results\n\n{tables.README_BEGIN}\nold table\n{tables.README_END}\n\n"
    "## Layout\n"
)


def cpuinfo(name: str, family: int, model: int, flags: str) -> str:
    block = (
        f"processor\t: {{}}\nvendor_id\t: GenuineTest\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: {name}\nflags\t\t: {flags}\n\n"
    )
    return block.format(0) + block.format(1)


def pose_as(monkeypatch, tmp_path: Path, text: str) -> None:
    path = tmp_path / "cpuinfo"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    monkeypatch.setenv(CPUINFO_ENV, str(path))


def write(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def validation_rows(component: str, bucket: int, emulated: bool) -> dict[int, dict]:
    """Real verdicts (``validate.audio_verdict``, ``compare_tokens``) on made-up outputs: the
    library closer to float64 than float32 is."""
    rng = np.random.default_rng(bucket)
    rows = {}
    entry = COMPONENTS[component]
    for n in cases.lengths_for(component, bucket, emulated=emulated):
        if entry.output is Output.AUDIO:
            t = np.arange(600 * n) / 24000
            r64 = np.sin(2 * np.pi * 220 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
            r32 = r64 + 1e-3 * rng.standard_normal(r64.size)
            got = r64 + 1e-4 * rng.standard_normal(r64.size)
            rows[n] = verdicts.audio_verdict(r64, r32, got) | {"voiced_fraction": 0.8}
        else:
            r64 = [rng.standard_normal((1, n, 8)) + 3]
            r32 = [r64[0] * (1 + 2e-6)]
            got = [r64[0] * (1 + 1e-6)]
            rows[n] = verdicts.compare_tensors(COMPONENTS["text_encoder"], r64, r32, got)
    return rows


def bench_result(component: str, bucket: int, target: str, cpu: str, scale: float) -> dict:
    """The bench stage's document (``bench.on_host``), with its keys and nested rows."""
    tvm_ms = AXIS_BUCKET[COMPONENTS[component].axis] * 2.34375 * scale  # 150 / 300 ms
    peak = {"gflops": 250.0, "threads": 2, "lanes": 8, "implied_ghz": 3.9, "load_avg_1m": 1.1}
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": True,
        "device": "host",
        "emulated": False,
        "eager_ms": tvm_ms * 2,
        "ort_ms": tvm_ms * 1.5,
        "tvm_ms": tvm_ms,
        "speedup_vs_eager": 2.0,
        "tvm_quarter_ms": tvm_ms / 4,
        "quarter_over_full": 0.25,
        "speedup_vs_ort": 1.5,
        "ort_vs_eager": 0.75,
        "criterion": verdicts.criterion(component),
        "tvm_vs_float64": {"ok": True},
        "eager_vs_float64": {"ok": True},
        "ort_vs_float64": {"ok": False},
        "gflop": 10.0,
        "tvm_gflops": 10.0 / tvm_ms * 1e3,
        "eager_gflops": 5.0 / tvm_ms * 1e3,
        "ort_gflops": 6.6 / tvm_ms * 1e3,
        "peak_gflops": peak["gflops"],
        "tvm_of_peak": 10.0 / tvm_ms * 1e3 / peak["gflops"],
        "peak": peak,
        "kernel_profile": {"run_ms": tvm_ms, "kernel_ms": tvm_ms * 0.9, "matmul_conv_ms": 1.0},
        "top_kernels": [
            {
                "kernel": f"fused_conv1d{i}",
                "calls": 1,
                "ms": 1.0,
                "share": 0.3 / (i + 1),
                "of_peak": 0.8,
            }
            for i in range(7)
        ],
        "library_sha256": "0" * 64,
        "weights_sha256": "1" * 64,
        "threads": 2,
        "repeats": 3,
        "warmup": 0,
        "load_avg_1m": 1.4 + scale / 10,
        "cpu": cpu,
    }


def repro_outputs(root: Path, cpu: str, features: frozenset[str], scale: float = 1.0) -> None:
    """What a finished ``dvc repro`` of ``params`` leaves in ``root`` for this set of targets."""
    targets = {
        "x86_64_v3": ("x86_64", V3_ISA),
        "x86_64_v4": ("x86_64", V4_ISA),
        "aarch64": ("aarch64", ["neon"]),
    }
    for target, (arch, isa) in targets.items():
        device = resolve.resolve(
            target, {"arch": arch, "isa": isa}, "auto", (True, ""), ("x86_64", features)
        )
        write(A.device_file(target, root), device)
        for component, bucket in BUCKETS.items():
            where = (component, bucket, target, root)
            write(A.build_time_file(*where), {"build_s": 12.5})
            write(A.build_info_file(*where), {"target": target, "bytes": 3_200_000})
            if device["device"] == "none":
                doc = {
                    "component": component,
                    "bucket": bucket,
                    "target": target,
                    "validated": False,
                }
                write(
                    A.validation_file(*where),
                    doc | {"device": "none", "reason": device["reason"], "fix": device["fix"]},
                )
                write(
                    A.bench_file(*where),
                    doc | {"timed": False, "device": "none", "reason": device["reason"]},
                )
                continue
            doc = verdicts.summary(
                component, bucket, target, validation_rows(component, bucket, device["emulated"])
            )
            doc |= {"validated": True, "device": device["device"], "emulated": device["emulated"]}
            write(A.validation_file(*where), doc)
            if device["emulated"]:
                write(
                    A.bench_file(*where),
                    {
                        "component": component,
                        "bucket": bucket,
                        "target": target,
                        "timed": False,
                        "device": "qemu",
                        "emulated": True,
                        "reason": "emulated device: correctness only",
                    },
                )
            else:
                write_outputs(bench_result(component, bucket, target, cpu, scale), root)
        # params' precision.decoder [bf16]: no AVX-512 on v3 and aarch64; v4 not run on this CPU
        narrow_at = ("decoder", BUCKETS["decoder"], target, root)
        why = "no AVX-512" if target != "x86_64_v4" else "this CPU lacks avx512_bf16"
        narrow = {"component": "decoder", "bucket": BUCKETS["decoder"], "target": target}
        narrow |= {"precision": "bf16", "validated": False, "reason": why}
        write(A.validation_file(*narrow_at, precision="bf16"), narrow)
        write(A.bench_file(*narrow_at, precision="bf16"), narrow | {"timed": False})
    write(
        A.toolchain_file(root), {"apache-tvm": "0.27.0.post1", "torch": "2.13.0", "llvm_major": 22}
    )
    rows = {}
    for n in (30, 126, 510):
        secs = {
            "tvm": n / 100 * scale,
            "eager": n / 40 * scale,
            "ort_fp32": n / 60 * scale,
            "ort_int8": n / 70 * scale,
            "kokoro_onnx_fp32": n / 62 * scale,
            "kokoro_onnx_int8": n / 72 * scale,
        }
        audio = n * 0.08
        rows[f"phonemes_{n}"] = {
            "phonemes": n,
            "tokens": n + 2,
            "frames": 3 * n,
            "chunks": 1,
            "frame_buckets": [128],
            "padding_waste": 0.0,
            "audio_s": audio,
            **{f"{k}_s": v for k, v in secs.items()},
            **{f"rtf_{k}": v / audio for k, v in secs.items()},
            **{f"speedup_vs_{k}": round(v / secs["tvm"], 4) for k, v in secs.items() if k != "tvm"},
            "log_mel_snr_db": 60.0 + n / 100,
            "f32_log_mel_snr_db": 45.0,
            "mcd_db": 0.1,
            "f32_mcd_db": 0.4,
            "ort_fp32_durations_differ": 0,
            "kokoro_onnx_fp32_audio_s": audio * 0.9,
        }
    total = {
        "audio_s": 53.28,
        "rtf_tvm": 0.1,
        "speedup_vs_eager": 2.5,
        "speedup_vs_ort_fp32": 1.6667,
        "speedup_vs_ort_int8": 1.4286,
        "speedup_vs_kokoro_onnx_fp32": 1.6129,
        "speedup_vs_kokoro_onnx_int8": 1.3889,
    }
    write(
        A.bench_e2e_file(root),
        {
            "target": "x86_64_v3",
            "picked": ["x86_64_v3: runs here", "picked x86_64_v3: the richest ISA this CPU runs"],
            "threads": 2,
            "repeats": 3,
            "cpu": cpu,
            **rows,
            "total": total,
        },
    )


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A checkout's params (one bucket per axis, three targets), a README with the markers, and
    the outputs of its finished repro on an AVX2-only CPU named 'Test CPU 9000'."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["buckets"] = {"tokens": [BUCKETS["duration"]], "frames": [BUCKETS["decoder"]]}
    params["targets"] = {t: params["targets"][t] for t in ("x86_64_v3", "x86_64_v4", "aarch64")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "README.md").write_text(README)
    pose_as(monkeypatch, tmp_path, cpuinfo("Test CPU 9000", 25, 1, AVX2_FLAGS))
    repro_outputs(tmp_path / A.ROOT, "Test CPU 9000", frozenset(V3_ISA))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def args(root: Path, *extra: str) -> list[str]:
    return [
        "--artifacts",
        str(root / A.ROOT),
        "--params",
        str(root / "params.yaml"),
        "--docs",
        str(root / "docs"),
        "--readme",
        str(root / "README.md"),
        *extra,
    ]


def written(root: Path) -> list[str]:
    docs = root / "docs"
    return sorted(str(p.relative_to(root)) for p in docs.rglob("*")) if docs.exists() else []


CPU_ID = "test-cpu-9000-f25-m1-x86-64-v3"


def test_collects_this_cpus_repro_and_renders_it_with_cpu_and_isa(project, capsys):
    assert main(args(project)) == 0
    assert written(project) == [
        "docs/results",
        "docs/results.md",
        f"docs/results/{CPU_ID}-e2e.png",
        f"docs/results/{CPU_ID}-fidelity.png",
        f"docs/results/{CPU_ID}-roofline.png",
        f"docs/results/{CPU_ID}.json",
    ]
    rec = json.loads((project / "docs/results" / f"{CPU_ID}.json").read_text())
    assert rec["cpu"]["label"] == "Test CPU 9000 (family 25 model 1, 2 cores), x86-64-v3"
    assert rec["cpu"]["isa"] == "x86-64-v3" and rec["cpu"]["family"] == "25"
    assert rec["load_avg_1m"] == [1.5, 1.5]
    assert [r["phonemes"] for r in rec["e2e"]["lengths"]] == [30, 126, 510]
    by = {(lib["library"], lib["target"]): lib for lib in rec["libraries"]}
    assert len(by) == 9
    assert by[("decoder-128", "x86_64_v3")]["bench"]["tvm_ms"] == 300.0
    assert by[("decoder-128", "x86_64_v3")]["bench"]["agrees_with_float64"] == {
        "tvm": True,
        "eager": True,
        "ort": False,
    }
    assert len(by[("decoder-128", "x86_64_v3")]["top_kernels"]) == 5
    assert by[("decoder-128", "x86_64_v4")]["validated"] is False
    assert "lacks avx512" in by[("decoder-128", "x86_64_v4")]["reason"]
    assert (
        by[("decoder-128", "aarch64")]["emulated"]
        and by[("decoder-128", "aarch64")]["bench"] is None
    )
    assert sorted(by[("decoder-128", "aarch64")]["validation"]["lengths"], key=int) == ["3", "17"]

    page = (project / "docs/results.md").read_text()
    label = rec["cpu"]["label"]
    assert f"## {label}" in page
    for kind in figures.KINDS:
        assert f"(results/{CPU_ID}-{kind}.png)" in page and f"on {label}](results" in page
    assert "| 510 | 40.80 | 5.100 | 2.50× |" in page  # bench_e2e's 510-phoneme row
    assert "| decoder-128 | `x86_64_v3` | host | 300.0 | 600.0 | 450.0 | 2.00× | 1.50× |" in page
    assert "| decoder-128 | `x86_64_v4` | none: not validated | not timed |" in page
    assert "### Cold start" not in page  # no bench_cold in this repro
    assert "| decoder-128-bf16 | x86_64_v4 | no | this CPU lacks avx512_bf16 |" in page
    assert [r["validated"] for r in rec["precisions"]] == [False] * 3
    for png in (project / "docs/results").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    readme = (project / "README.md").read_text()
    assert "old table" not in readme and readme.endswith("## Layout\n")
    block = readme[readme.index(tables.README_BEGIN) : readme.index(tables.README_END)]
    assert f"| {label} | `x86_64_v3`, 2 | 2.50× | 1.61× | 1.39× | 60–65 dB (45 dB) |" in block
    assert "30–510 phonemes" in block
    assert "wrote docs/results.md" in capsys.readouterr().out.replace(str(project) + "/", "")


def test_every_figure_is_titled_with_the_cpu_and_isa(project, monkeypatch):
    assert main(args(project)) == 0
    rec = json.loads((project / "docs/results" / f"{CPU_ID}.json").read_text())
    titles = []
    monkeypatch.setattr(figures, "_png", lambda fig: titles.append(fig._suptitle.get_text()) or b"")
    figures.render(rec)
    assert len(titles) == len(figures.KINDS)
    assert all("x86-64-v3" in t and "Test CPU 9000 (family 25 model 1" in t for t in titles)


def test_a_second_cpu_adds_a_file_and_a_rerun_replaces_its_own(project, monkeypatch, tmp_path):
    assert main(args(project)) == 0
    # the same checkout's metrics, measured again on an AVX-512 CPU: a second file
    pose_as(monkeypatch, tmp_path / "cpu2", cpuinfo("Test CPU 9500", 26, 2, AVX512_FLAGS))
    shutil.rmtree(project / A.ROOT)
    repro_outputs(project / A.ROOT, "Test CPU 9500", frozenset(V4_ISA), scale=0.5)
    assert main(args(project)) == 0
    files = sorted(p.name for p in (project / "docs/results").glob("*.json"))
    assert files == [f"{CPU_ID}.json", "test-cpu-9500-f26-m2-x86-64-v4.json"]
    page = (project / "docs/results.md").read_text()
    assert "## Test CPU 9000 (family 25 model 1, 2 cores), x86-64-v3" in page
    assert "## Test CPU 9500 (family 26 model 2, 2 cores), x86-64-v4 + VNNI" in page
    assert "| decoder-128 | `x86_64_v4` | host | 150.0 |" in page  # the second CPU runs v4
    readme = (project / "README.md").read_text()
    assert readme.count("| Test CPU 9") == 2
    # that CPU's next run replaces its file; render-only keeps both and needs no artifacts
    repro_outputs(project / A.ROOT, "Test CPU 9500", frozenset(V4_ISA), scale=0.25)
    assert main(args(project)) == 0
    assert len(list((project / "docs/results").glob("*.json"))) == 2
    assert (
        "| decoder-128 | `x86_64_v4` | host | 75.0 |" in (project / "docs/results.md").read_text()
    )
    shutil.rmtree(project / A.ROOT)
    before = (project / "docs/results.md").read_bytes()
    pngs = {p: p.read_bytes() for p in (project / "docs/results").glob("*.png")}
    assert main(args(project, "--render-only")) == 0
    assert (project / "docs/results.md").read_bytes() == before  # deterministic, PNGs included
    assert {p: p.read_bytes() for p in (project / "docs/results").glob("*.png")} == pngs


def refused(root: Path, capsys, *extra: str) -> str:
    readme = (root / "README.md").read_text()
    before = written(root)
    assert main(args(root, *extra)) == 1
    assert written(root) == before, "a refused run writes nothing"
    assert (root / "README.md").read_text() == readme
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_a_cpu_whose_isa_cannot_be_read_is_refused(project, monkeypatch, tmp_path, capsys):
    pose_as(
        monkeypatch,
        tmp_path,
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: Test CPU 9000\n",
    )
    err = refused(project, capsys)
    assert "ISA cannot be read" in err and "no 'flags'" in err


def test_a_committed_file_without_isa_is_refused(project, capsys):
    assert main(args(project)) == 0
    path = project / "docs/results" / f"{CPU_ID}.json"
    rec = json.loads(path.read_text())
    del rec["cpu"]["isa"]
    path.write_text(json.dumps(rec))
    err = refused(project, capsys, "--render-only")
    assert f"{path}: cpu: missing isa" in err


def test_a_missing_metrics_file_names_its_stage(project, capsys):
    path = A.validation_file("decoder", 128, "x86_64_v3", project / A.ROOT)
    path.unlink()
    err = refused(project, capsys)
    assert f"{path} is missing" in err
    assert "stage validate@decoder-128-x86_64_v3 writes it" in err


def test_a_missing_metric_is_named(project, capsys):
    path = A.bench_e2e_file(project / A.ROOT)
    doc = json.loads(path.read_text())
    del doc["phonemes_126"]["f32_log_mel_snr_db"]
    path.write_text(json.dumps(doc))
    err = refused(project, capsys)
    assert "e2e.lengths[1]: missing f32_log_mel_snr_db" in err


def test_metrics_measured_on_another_cpu_are_refused(project, capsys):
    path = A.bench_file("duration", 64, "x86_64_v3", project / A.ROOT)
    path.write_text(path.read_text().replace("Test CPU 9000", "Another CPU"))
    err = refused(project, capsys)
    assert "bench@duration-64-x86_64_v3 was measured on 'Another CPU'" in err
    assert "this machine is 'Test CPU 9000'" in err


def test_a_readme_without_the_markers_is_refused(project, capsys):
    (project / "README.md").write_text("# project\n")
    err = refused(project, capsys)
    assert "has no results block" in err and tables.README_BEGIN in err


def test_render_only_with_no_results_files_says_what_to_do(project, capsys):
    err = refused(project, capsys, "--render-only")
    assert "no results files" in err and "make results" in err


@pytest.mark.parametrize(
    ("text", "isa", "extras"),
    [
        (cpuinfo("A", 25, 1, AVX2_FLAGS), "x86-64-v3", []),
        (cpuinfo("A", 25, 17, AVX512_FLAGS + " avx512_bf16"), "x86-64-v4", ["VNNI", "BF16"]),
        (
            cpuinfo("A", 6, 1, "sse sse2 cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3"),
            "x86-64-v2",
            [],
        ),
        (cpuinfo("A", 6, 1, AVX2_FLAGS.replace(" fma", "")), "x86-64-v2", []),
        (
            "processor\t: 0\nFeatures\t: fp asimd aes crc32 atomics asimddp i8mm\n"
            "CPU implementer\t: 0x41\n"
            "CPU part\t: 0xd0b\n",
            "ARMv8-A NEON",
            ["dotprod", "i8mm"],
        ),
    ],
)
def test_isa_level_and_extensions_from_cpuinfo(text, isa, extras):
    cpu = machine.describe(text, cores=4)
    assert (cpu["isa"], cpu["isa_extensions"]) == (isa, extras)
    assert isa in cpu["label"] and isa.lower().replace(" ", "-") in cpu["id"]


def test_a_run_beside_other_work_is_flagged_where_its_numbers_are(project):
    assert main(args(project)) == 0
    quiet = (project / "docs/results.md").read_text()
    assert "load average 1.5 during the bench stages" in quiet and "passed the CPU" not in quiet
    path = A.bench_file("decoder", 128, "x86_64_v3", project / A.ROOT)
    path.write_text(path.read_text().replace('"load_avg_1m": 1.5', '"load_avg_1m": 3.5'))
    assert main(args(project)) == 0
    page = (project / "docs/results.md").read_text()
    assert "load average 1.5–3.5 during the bench stages, measured 20" in page
    assert "**The load average passed the CPU's 2 cores**" in page
    readme = (project / "README.md").read_text()
    assert "| 2026-" in readme and ", load 1.5–3.5 |" in readme


def bench_cold(cpu: str) -> dict:
    """``bench_cold``'s document: its measures summarized by the stage's own ``summary``."""
    from kokoro_tvm.eval import cold_start

    rounds = {
        "cold": [({"wall_s": 2.0, "peak_rss_mb": 700.0}, {"wall_s": 4.0, "peak_rss_mb": 350.0})]
        * 3,
        "stream": [({"first_byte_s": 1.0}, {"first_byte_s": 2.5})] * 3,
        "warm": [({"warm_s": 0.3}, {"warm_s": 0.5})] * 3,
    }
    doc = {
        name: cold_start.summary(
            {"kokoro_tvm": [a for a, _ in rows], "kokoro_onnx": [b for _, b in rows]}
        )
        for name, rows in rounds.items()
    }
    cpu_doc = {"model_name": cpu, "family": "25", "model": "1", "isa": "x86-64-v3"}
    return {"cpu": cpu_doc, "input": {"n_phonemes": 60}, "rounds": 3, "threads": 2, **doc}


def test_cold_start_is_shown_where_bench_cold_ran(project, capsys):
    write(A.bench_cold_file(project / A.ROOT), bench_cold("Test CPU 9000"))
    assert main(args(project)) == 0
    page = (project / "docs/results.md").read_text()
    assert "### Cold start" in page and "one sentence (60 phonemes)" in page
    assert "| cold `wall_s` | 2.000 | 4.000 | 0.50 (0.50–0.50) |" in page
    assert "| stream `first_byte_s` | 1.000 | 2.500 | 0.40 (0.40–0.40) |" in page
    assert "kokoro-tvm fp32" not in page  # float32 everywhere: nothing ran beside it
    write(A.bench_cold_file(project / A.ROOT), bench_cold("Another CPU"))
    err = refused(project, capsys)
    assert "bench_cold was measured on 'Another CPU'" in err


def test_cold_start_shows_the_float32_libraries_beside_a_narrower_pick(project):
    from kokoro_tvm.eval import cold_start

    doc = bench_cold("Test CPU 9000")
    doc["cold"] = cold_start.summary(
        {
            "kokoro_tvm": [{"wall_s": 2.0}] * 3,
            "kokoro_onnx": [{"wall_s": 4.0}] * 3,
            "kokoro_tvm_fp32": [{"wall_s": 3.0}] * 3,
        }
    )
    auto = {"duration": "fp32", "text_encoder": "fp32", "decoder": "bf16"}
    doc["precision"] = {"kokoro_tvm": auto, "kokoro_tvm_fp32": dict.fromkeys(auto, "fp32")}
    write(A.bench_cold_file(project / A.ROOT), doc)
    assert main(args(project)) == 0
    page = (project / "docs/results.md").read_text()
    assert "`kokoro-tvm` runs the precision it picks here (decoder bf16)" in page
    assert "| kokoro-tvm fp32 | kokoro-tvm fp32 / kokoro-onnx (per round) |" in page
    assert "| cold `wall_s` | 2.000 | 4.000 | 0.50 (0.50–0.50) | 3.000 | 0.75 (0.75–0.75) |" in page
    # a measure the float32 libraries have no number for shows none
    assert "| stream `first_byte_s` | 1.000 | 2.500 | 0.40 (0.40–0.40) | – | – |" in page


def test_a_timed_narrow_library_shows_its_speed_against_float32():
    from kokoro_tvm.results.tables import precision_table

    row = {
        "library": "decoder-1536-bf16",
        "target": "x86_64_v4",
        "precision": "bf16",
        "validated": True,
        "reason": None,
        "languages": ["lang_a", "lang_b"],
        "timed": True,
        "fp32_ms": 700.0,
        "bf16_ms": 500.0,
        "speedup_vs_fp32": 1.4,
        "worst_log_mel_snr_db": 45.31,
        "worst_mcd_db": 0.561,
        "load_average": {"1m": 1.0},
    }
    (line,) = precision_table({"precisions": [row]})[2:]
    assert line == (
        "| decoder-1536-bf16 | x86_64_v4 | yes (2 languages) "
        "| 1.40x | 700 | 500 | 45.3 dB | 0.56 dB |"
    )
    assert precision_table({}) == []
