"""Stage ``bench_cold`` on the tiny runtime build: whole processes of ``kokoro-tvm synth`` beside
kokoro-onnx's script, a well-formed metrics file, the peak RSS of the child and not of this
process, a runtime that fails to start as an error rather than a number, and the runtime's
float32 libraries timed beside a narrower pick, and only then.

The narrower libraries here are the tiny float32 decoder libraries listed a second time as bf16,
needing the CPU's bf16 extension (as ``tests/test_precision_pick.py`` does): the same ``.so``, so
what is tested is which runners run and what each asks for, not bf16 numerics. A CPU with or
without the extension is posed with ``KOKORO_TVM_CPUINFO``, for this process and the timed ones."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from runtime_project import artifacts_copy, runtime_artifacts

from kokoro_tvm import artifacts as A
from kokoro_tvm import cpuinfo
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.devices import isa
from kokoro_tvm.eval import cold_start
from kokoro_tvm.params import load
from kokoro_tvm.pipeline import bench_cold
from kokoro_tvm.runtime.manifest import explain_pick, read_manifest
from kokoro_tvm.spec import COMPONENTS

pytest.importorskip("kokoro_onnx", reason="needs kokoro-onnx (`make setup`)")

#: short (the tiny build splits it in two chunks, so a first byte comes before the end); kokoro-onnx
#: speaks it with a registry voice
PHONEMES = "həlˈO wˈɜɹld"
ALL_FP32 = dict.fromkeys(COMPONENTS, "fp32")
BF16_DECODER = ALL_FP32 | {"decoder": "bf16"}
#: this architecture's bf16 extension: (LLVM name in ``needs``, the flag Linux shows)
BF16 = {"x86_64": ("avx512bf16", "avx512_bf16"), "aarch64": ("bf16", "bf16")}[isa.host_arch()]


@pytest.fixture(scope="module")
def with_bf16(tmp_path_factory) -> Path:
    """The tiny artifacts with a bf16 copy of each decoder entry (module docstring)."""
    art = artifacts_copy(
        runtime_artifacts(tmp_path_factory), tmp_path_factory.mktemp("bf16") / "artifacts"
    )
    doc = json.loads(A.manifest_file(art).read_text())
    for entry in [e for e in doc["libraries"] if e["component"] == "decoder"]:
        needs = doc["target_needs"][entry["target"]]
        isa_needed = sorted({*needs["isa"], BF16[0]})
        doc["libraries"].append(
            entry | {"precision": "bf16", "needs": {"arch": needs["arch"], "isa": isa_needed}}
        )
    A.manifest_file(art).write_text(json.dumps(doc, indent=1))
    return art


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """Pose as this CPU with or without the bf16 extension (this process and its children)."""
    flags = sorted(cpuinfo.host_flags() - {BF16[1]})

    def use(bf16: bool) -> None:
        path = tmp_path / f"cpuinfo-{'bf16' if bf16 else 'plain'}"
        shown = " ".join(flags + ([BF16[1]] if bf16 else []))
        path.write_text(f"processor\t: 0\nmodel name\t: posed\nflags\t\t: {shown}\n")
        monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(path))

    return use


def _run(artifacts: Path, out: Path, params: Path | None = None, onnx: bool = True) -> dict:
    prm = load(params or artifacts.parent / "params.yaml")
    return bench_cold.run(
        prm.updated(bench={"onnxruntime": onnx}),
        root=artifacts,
        out=out,
        rounds=1,
        phonemes=PHONEMES,
    )


def _numbers(tree) -> list[float]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _numbers(v)]
    if isinstance(tree, list):
        return [x for v in tree for x in _numbers(v)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def test_stage_body_writes_positive_metrics_for_both_runners(tmp_path, tmp_path_factory):
    artifacts = runtime_artifacts(tmp_path_factory)
    out = tmp_path / "bench_cold.json"
    _run(artifacts, out)
    m = json.loads(out.read_text())

    for measure, keys in {
        "cold": ("wall_s", "cpu_s", "peak_rss_mb", "audio_s"),
        "stream": ("first_byte_s", "wall_s", "audio_s"),
        "warm": ("warm_s", "first_create_s", "peak_rss_mb"),
    }.items():
        for key in keys:
            row = m[measure][key]
            for name in (*cold_start.RUNNERS, "ratio"):
                assert math.isfinite(row[name]) and row[name] > 0, (measure, key, name, row)
        for runner in cold_start.RUNNERS:
            assert len(m["samples"][measure][runner]) == 1
    # the first byte comes before the process ends, and a process is more than its interpreter
    for runner in cold_start.RUNNERS:
        s = m["samples"]["stream"][runner][0]
        assert 0 < s["first_byte_s"] <= s["wall_s"]
        assert m["cold"]["peak_rss_mb"][runner] > 20
    # the launcher's wait4 peak is the child's own high-water mark, which the warm process reads
    # just before it exits (they may differ by the kernel's per-thread RSS counters not yet
    # folded in, far less than a peak taken from this process would be off)
    for runner in cold_start.RUNNERS:
        w = m["samples"]["warm"][runner][0]
        assert abs(w["peak_rss_mb"] - w["self_peak_rss_mb"]) < 0.02 * w["self_peak_rss_mb"] + 2, w

    cpu = m["cpu"]
    assert cpu["model_name"] and cpu["family"] and cpu["model"] and cpu["logical_cpus"] >= 1
    assert cpu["isa"] in (
        "x86-64",
        "x86-64-v2",
        "x86-64-v3",
        "x86-64-v4",
        "ARMv8-A",
        "ARMv8-A NEON",
    )
    assert m["target"] == "generic" and m["threads"] >= 1 and m["rounds"] == 1
    # float32 everywhere (no narrower library): one runtime runner, nothing timed twice
    assert m["precision"] == {"kokoro_tvm": ALL_FP32}
    for measure in ("cold", "stream", "warm"):
        assert set(m["samples"][measure]) == set(cold_start.RUNNERS)
        assert not any("ratio_fp32" in row for row in m[measure].values())
    assert "command_fp32" not in m["kokoro_tvm"]
    for when in ("load_avg_before", "load_avg_after"):
        assert set(m[when]) == {"1m", "5m", "15m"} and all(v >= 0 for v in m[when].values())
    assert m["input"] == {
        "phonemes": PHONEMES,
        "n_phonemes": len(PHONEMES),
        "voice": "random",  # the tiny model has no real voice
        "onnx_voice": cold_start.VOICE,  # kokoro-onnx speaks Kokoro-82M's
    }
    assert m["kokoro_tvm"]["python"] == sys.executable and m["kokoro_tvm"]["torch_installed"]

    for runner in cold_start.RUNNERS:
        sh = m["shared_pages"][runner]
        assert len(sh["pair"]) == 2
        for p in [sh["alone"], *sh["pair"]]:
            assert 0 < p["pss_mb"] <= p["rss_mb"]
        # a second process on the same files shares at least the interpreter's own pages
        assert sh["pair"][0]["pss_mb"] < sh["alone"]["pss_mb"]
        assert sh["pair_shared_mb"] > 0
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(m))


def test_without_onnxruntime_the_runtime_is_timed_alone(tmp_path, tmp_path_factory):
    """``bench.onnxruntime: false`` (no ONNX Runtime installed): the runtime's numbers, no peer
    and no ratio."""
    out = tmp_path / "bench_cold.json"
    _run(runtime_artifacts(tmp_path_factory), out, onnx=False)
    m = json.loads(out.read_text())
    assert m["kokoro_onnx"] is None and m["input"]["onnx_voice"] is None
    for measure in ("cold", "stream", "warm"):
        assert set(m["samples"][measure]) == {"kokoro_tvm"}
        for row in m[measure].values():
            assert set(row) == {"kokoro_tvm"} and row["kokoro_tvm"] > 0
    assert set(m["shared_pages"]) == {"kokoro_tvm"}


@pytest.mark.parametrize("broken", ["library", "manifest"])
def test_a_runtime_that_fails_to_start_is_an_error_not_a_metric(broken, tmp_path, tmp_path_factory):
    """Libraries whose bytes changed (the CLI refuses them, exit 1) or no manifest at all: the
    stage raises with the runtime's own message and writes no metrics file."""
    built = runtime_artifacts(tmp_path_factory)
    artifacts = tmp_path / "artifacts"
    artifacts_copy(built, artifacts)
    if broken == "library":
        for lib in (artifacts / "build").rglob("*.so"):  # every bucket: whichever one it loads
            data = bytearray(lib.read_bytes())
            data[len(data) // 2] ^= 0xFF
            lib.write_bytes(bytes(data))
        expected, message = cold_start.ColdStartError, r"exited with status 1(.|\n)*sha256"
    else:
        A.manifest_file(artifacts).unlink()
        expected, message = ArtifactError, "manifest.json is missing"
    out = tmp_path / "bench_cold.json"
    with pytest.raises(expected, match=message):
        _run(artifacts, out, built.parent / "params.yaml")
    assert not out.exists()


def test_float32_runs_beside_the_pick_only_where_the_pick_is_narrower(
    with_bf16, cpu, tmp_path_factory
):
    """bf16 decoders on a CPU with the extension: the float32 libraries run beside, kokoro-onnx
    between the two. The controls: the same libraries on a CPU without it, and a float32-only
    manifest on a CPU with it, pick float32 everywhere and get no second runner."""
    cpu(bf16=True)
    manifest = read_manifest(with_bf16)
    precisions, why = bench_cold.runtime_precisions(manifest, explain_pick(manifest)[0])
    assert precisions == {"kokoro_tvm": BF16_DECODER, "kokoro_tvm_fp32": ALL_FP32}
    assert why[-1].startswith("decoder: bf16, the narrowest")
    assert bench_cold.ordered(precisions, True) == ("kokoro_tvm", "kokoro_onnx", "kokoro_tvm_fp32")
    assert bench_cold.ordered(precisions, False) == ("kokoro_tvm", "kokoro_tvm_fp32")

    cpu(bf16=False)
    precisions, why = bench_cold.runtime_precisions(manifest, explain_pick(manifest)[0])
    assert precisions == {"kokoro_tvm": ALL_FP32}
    assert why[-1] == f"decoder: fp32, bf16 built, but this CPU lacks {BF16[0]}"
    assert bench_cold.ordered(precisions, True) == cold_start.RUNNERS
    assert bench_cold.ordered(precisions, False) == ("kokoro_tvm",)
    cpu(bf16=True)
    manifest = read_manifest(runtime_artifacts(tmp_path_factory))
    precisions, _ = bench_cold.runtime_precisions(manifest, explain_pick(manifest)[0])
    assert precisions == {"kokoro_tvm": ALL_FP32}


def test_each_runtime_runner_asks_for_its_precision(tmp_path):
    """The auto runner runs the command and API as users do, no flag; the float32 one the same
    with ``--precision fp32`` and ``precision="fp32"``."""
    setup = cold_start.Setup(
        root=tmp_path,
        phonemes="hə",
        voice="random",
        onnx_voice=cold_start.VOICE,
        onnx_model=tmp_path / "m.onnx",
        onnx_voices=tmp_path / "v.bin",
        onnx_script=tmp_path / "s.py",
        runtime_python=Path(sys.executable),
        onnx_python=Path(sys.executable),
        workdir=tmp_path,
        env={},
    )
    assert "--precision" not in setup.cli("kokoro_tvm", "-o", "x.wav")
    assert setup.cli("kokoro_tvm_fp32", "-o", "x.wav")[-4:] == [
        "--precision",
        "fp32",
        "-o",
        "x.wav",
    ]
    assert "model = KokoroTVM.from_manifest(root)\n" in cold_start.api_script("kokoro_tvm")
    fp32 = cold_start.api_script("kokoro_tvm_fp32", hold=True)
    assert "model = KokoroTVM.from_manifest(root, precision='fp32')\n" in fp32
    for runner in cold_start.TVM_PRECISION:  # each child a script Python compiles
        compile(cold_start.api_script(runner), runner, "exec")


def test_a_narrower_pick_is_timed_beside_its_float32_libraries(
    with_bf16, cpu, tmp_path, tmp_path_factory
):
    """The whole stage on bf16 decoders posed as runnable here: three runners in the same rounds,
    the auto runner's keys as before, the float32 one's medians and per-round ratio beside, and
    what each computed in."""
    cpu(bf16=True)
    out = tmp_path / "bench_cold.json"
    _run(with_bf16, out, runtime_artifacts(tmp_path_factory).parent / "params.yaml")
    m = json.loads(out.read_text())
    runners = ("kokoro_tvm", "kokoro_onnx", "kokoro_tvm_fp32")
    assert m["precision"] == {"kokoro_tvm": BF16_DECODER, "kokoro_tvm_fp32": ALL_FP32}
    assert m["precision_picked"][-1].startswith("decoder: bf16")
    assert m["kokoro_tvm"]["command_fp32"].endswith("--precision fp32 -o x.wav")
    for measure in ("cold", "stream", "warm"):
        assert set(m["samples"][measure]) == set(runners)
        assert all(len(s) == 1 for s in m["samples"][measure].values())
        for key, row in m[measure].items():
            for name in (*runners, "ratio", "ratio_min", "ratio_fp32", "ratio_fp32_max"):
                assert math.isfinite(row[name]) and row[name] > 0, (measure, key, name, row)
    assert set(m["shared_pages"]) == set(runners)


def test_peak_rss_is_the_childs_not_the_parents(tmp_path):
    """This process holds 300 MB more than a bare interpreter; a child spawned the obvious way
    (``subprocess``, then ``wait4``) reports that as its own peak, the launcher's does not."""
    import os
    import subprocess

    ballast = bytearray(300 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touched: resident
    small = [sys.executable, "-I", "-S", "-c", "x = bytearray(40 * 2**20)"]
    s = cold_start.timed(small, tmp_path, cold_start.user_env(), "a 40 MB child")
    assert 40 < s.peak_rss_mb < 40 + 40, s
    assert s.wall_s > 0 and s.cpu_s > 0
    # the control: the naive way reads this process's pages as the child's
    p = subprocess.Popen(small)
    _, _, ru = os.wait4(p.pid, 0)
    assert ru.ru_maxrss / 1024 > 300
    del ballast


def test_a_child_that_fails_raises_with_its_stderr(tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.exit('no such model')"]
    with pytest.raises(cold_start.ColdStartError, match="exited with status 1(.|\n)*no such model"):
        cold_start.timed(argv, tmp_path, cold_start.user_env(), "a failing child")
    with pytest.raises(cold_start.ColdStartError, match="status 127(.|\n)*cannot start"):
        cold_start.timed(
            [str(tmp_path / "missing")], tmp_path, cold_start.user_env(), "a missing command"
        )


def test_ratio_is_the_median_of_per_round_ratios():
    """Not the ratio of the medians: each round's pair ran under the same load."""
    by_runner = {
        "kokoro_tvm": [{"t": 1.0}, {"t": 4.0}, {"t": 9.0}],
        "kokoro_onnx": [{"t": 1.0}, {"t": 1.0}, {"t": 3.0}],
    }
    row = cold_start.summary(by_runner)["t"]
    assert row["kokoro_tvm"] == 4.0 and row["kokoro_onnx"] == 1.0
    assert row["ratio"] == 3.0  # pairs 1, 4, 3 (the medians' ratio would be 4)
    assert (row["ratio_min"], row["ratio_max"]) == (1.0, 4.0)
    assert "ratio_fp32" not in row
    # the float32 libraries beside: their own per-round ratio, the auto runner's unchanged
    by_runner["kokoro_tvm_fp32"] = [{"t": 2.0}, {"t": 8.0}, {"t": 6.0}]
    row = cold_start.summary(by_runner)["t"]
    assert row["ratio"] == 3.0 and row["kokoro_tvm_fp32"] == 6.0
    assert (row["ratio_fp32"], row["ratio_fp32_min"], row["ratio_fp32_max"]) == (2.0, 2.0, 8.0)
    # without kokoro-onnx, no ratio at all
    alone = cold_start.summary({r: by_runner[r] for r in ("kokoro_tvm", "kokoro_tvm_fp32")})
    assert set(alone["t"]) == {"kokoro_tvm", "kokoro_tvm_fp32"}


def test_user_env_drops_what_only_the_pipeline_sets():
    env = cold_start.user_env({"TVM_NUM_THREADS": "2", "TVM_USE_RUNTIME_LIB": "1", "HOME": "/h"})
    assert env == {"HOME": "/h"}


def test_the_sentence_is_cut_to_one_utterance_at_a_word():
    """The stage's default input: the whole sentence where the largest token bucket holds it, else
    its words that fit, never part of a word."""
    whole = cold_start.SENTENCE
    assert cold_start.sentence(510) == cold_start.sentence(len(whole)) == whole
    for limit in (len(whole) - 1, 20, 6):
        cut = cold_start.sentence(limit)
        assert len(cut) <= limit and whole.startswith(cut + " ")
        assert len(" ".join(whole.split(" ")[: len(cut.split(" ")) + 1])) > limit  # the next word
    assert cold_start.sentence(1) == whole.split(" ")[0]  # a word at least
