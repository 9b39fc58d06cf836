"""The runtime picks a precision per component (``manifest.explain_precision``): ``auto`` runs
the narrowest validated libraries this CPU runs, ``fp32`` kokoro's float32 everywhere, ``bf16``
the bf16 libraries or a clear error; through ``KokoroTVM``, ``kokoro-tvm synth``/``info`` and a
real ``kokoro-tvm serve`` process.

The bf16 libraries here are the suite's tiny float32 decoder libraries listed a second time with
``"precision": "bf16"`` and a ``needs`` that adds the CPU's bf16 extension, as the manifest stage
writes a bf16 entry: the same ``.so``, so what is tested is which entry is picked and loaded, not
bf16 numerics (those are tests/test_bf16.py's). A CPU is posed with ``KOKORO_TVM_CPUINFO``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from runtime_project import artifacts_copy, runtime_artifacts
from server_process import ServerProcess
from test_manifest import document

from kokoro_tvm import artifacts as A
from kokoro_tvm import cpuinfo
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.devices import isa
from kokoro_tvm.runtime.manifest import PrecisionError, explain_precision, parse_manifest
from kokoro_tvm.spec import COMPONENTS

#: this architecture's bf16 extension: (LLVM name in ``needs``, the flag Linux shows)
BF16 = {"x86_64": ("avx512bf16", "avx512_bf16"), "aarch64": ("bf16", "bf16")}[isa.host_arch()]
#: what every posed CPU has besides (the tiny build's ``generic`` target needs nothing)
BASE_FLAGS = "fpu sse sse2 avx avx2 fma avx512f" if BF16[0] == "avx512bf16" else "fp asimd"
ALL_FP32 = dict.fromkeys(COMPONENTS, "fp32")
BF16_DECODER = ALL_FP32 | {"decoder": "bf16"}


def _with_bf16_decoders(doc: dict) -> dict:
    """``doc`` with a bf16 copy of each decoder entry, needing the bf16 extension."""
    doc = copy.deepcopy(doc)
    for entry in [e for e in doc["libraries"] if e["component"] == "decoder"]:
        needs = doc["target_needs"][entry["target"]]
        bf16 = copy.deepcopy(entry) | {
            "precision": "bf16",
            "needs": {"arch": needs["arch"], "isa": sorted({*needs["isa"], BF16[0]})},
        }
        doc["libraries"].append(bf16)
    return doc


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The suite's float32-only artifacts, unchanged."""
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def with_bf16(built, tmp_path_factory) -> Path:
    art = artifacts_copy(built, tmp_path_factory.mktemp("bf16") / "artifacts")
    doc = json.loads(A.manifest_file(art).read_text())
    A.manifest_file(art).write_text(json.dumps(_with_bf16_decoders(doc), indent=1))
    return art


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """Pose as a CPU with or without the bf16 extension (this process and its children)."""

    def use(bf16: bool) -> Path:
        flags = BASE_FLAGS + (f" {BF16[1]}" if bf16 else "")
        path = tmp_path / f"cpuinfo-{'bf16' if bf16 else 'plain'}"
        path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(path))
        return path

    return use


def _loaded(tts) -> dict[str, set[str]]:
    """The precision of each library a synthesis loaded, per component."""
    tts.synthesize("hə", "random")
    out: dict[str, set[str]] = {}
    for lib in tts.libraries.loaded():
        out.setdefault(lib.entry.component, set()).add(lib.entry.precision)
    return out


# -- the pick, through KokoroTVM ---------------------------------------------------------------


def test_auto_runs_bf16_decoders_only_on_a_cpu_that_has_them(with_bf16, cpu):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    cpu(bf16=True)
    tts = KokoroTVM.from_manifest(with_bf16)
    assert tts.precision == BF16_DECODER
    assert _loaded(tts) == {c: {p} for c, p in BF16_DECODER.items()}
    assert "decoder: bf16, the narrowest" in tts.libraries.precision_reasons[-1]
    cpu(bf16=False)
    tts = KokoroTVM.from_manifest(with_bf16)
    assert tts.precision == ALL_FP32
    assert _loaded(tts) == {c: {"fp32"} for c in COMPONENTS}
    assert tts.libraries.precision_reasons[-1] == (
        f"decoder: fp32, bf16 built, but this CPU lacks {BF16[0]}"
    )


def test_fp32_runs_float32_everywhere_even_where_bf16_runs(with_bf16, cpu):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    cpu(bf16=True)
    tts = KokoroTVM.from_manifest(with_bf16, precision="fp32")
    assert tts.precision == ALL_FP32
    assert _loaded(tts) == {c: {"fp32"} for c in COMPONENTS}
    assert tts.libraries.precision_reasons[-1] == "decoder: fp32, asked for (bf16 also built)"


def test_bf16_asked_for_runs_it_or_says_what_the_cpu_lacks(with_bf16, cpu):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    cpu(bf16=True)
    tts = KokoroTVM.from_manifest(with_bf16, precision="bf16")
    assert tts.precision == BF16_DECODER  # the text side has none: it stays float32
    assert "text_encoder: fp32, no bf16 library" in "\n".join(tts.libraries.precision_reasons)
    cpu(bf16=False)
    with pytest.raises(PrecisionError) as caught:
        KokoroTVM.from_manifest(with_bf16, precision="bf16")
    message = str(caught.value)
    assert f"need CPU features this machine lacks ({BF16[0]})" in message
    assert "--precision auto/fp32" in message and "a CPU with" in message


def test_bf16_asked_for_without_bf16_libraries_names_the_fix(built, cpu):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    cpu(bf16=True)
    with pytest.raises(PrecisionError, match=r"target 'generic' has no bf16 library") as caught:
        KokoroTVM.from_manifest(built, precision="bf16")
    assert "--precision auto/fp32" in str(caught.value) and "dvc repro" in str(caught.value)
    with pytest.raises(PrecisionError, match=r"precision 'fp16' is not one of auto, fp32, bf16"):
        KokoroTVM.from_manifest(built, precision="fp16")


def test_a_float32_manifest_runs_as_before_on_any_cpu(built, cpu):
    """No bf16 library: every precision request but bf16 gives the float32 libraries, the
    very records ``Manifest.library`` gave before precisions, whatever the CPU."""
    from kokoro_tvm.runtime.manifest import read_manifest
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    manifest = read_manifest(built)
    for bf16 in (True, False):
        cpu(bf16)
        for asked in ("auto", "fp32"):
            tts = KokoroTVM.from_manifest(built, precision=asked)
            assert tts.precision == ALL_FP32
            assert {lib.precision for lib in manifest.libraries} == {"fp32"}
            for lib in manifest.libraries:
                assert tts.manifest.library(lib.component, lib.bucket, lib.target) == lib
    tts = KokoroTVM.from_manifest(built)
    assert tts.libraries.precision_reasons == [
        f"{c}: fp32, the only precision built" for c in COMPONENTS
    ]


# -- the pick on manifests of the writer's own entries -----------------------------------------


def _manifest(decoder_bf16_buckets: tuple[int, ...], isa_needed: list[str] | None = None):
    """One library per component at buckets 6 and 16, and bf16 decoders at the given ones."""
    doc = document()
    lib = doc["libraries"][0]
    doc["weights"] = {c: doc["weights"]["text_encoder"] for c in COMPONENTS}
    doc["target_needs"] = {"generic": {"arch": isa.host_arch(), "isa": []}}
    doc["libraries"] = [lib | {"component": c, "bucket": b} for c in COMPONENTS for b in (6, 16)]
    needs = {"arch": isa.host_arch(), "isa": isa_needed or [BF16[0]]}
    doc["libraries"] += [
        lib | {"component": "decoder", "bucket": b, "precision": "bf16", "needs": needs}
        for b in decoder_bf16_buckets
    ]
    return doc


def test_auto_takes_bf16_only_where_it_covers_every_bucket(cpu):
    cpu(bf16=True)
    picked, why = explain_precision(parse_manifest(_manifest((6, 16))), "generic")
    assert picked == BF16_DECODER
    picked, why = explain_precision(parse_manifest(_manifest((6,))), "generic")
    assert picked == ALL_FP32 and why[-1] == "decoder: fp32, bf16 built without buckets [16]"
    with pytest.raises(PrecisionError, match=r"bf16 decoder libraries lack buckets \[16\]"):
        explain_precision(parse_manifest(_manifest((6,))), "generic", "bf16")


def test_every_missing_extension_is_named(cpu):
    cpu(bf16=False)
    extra = "avx512vnni" if BF16[0] == "avx512bf16" else "i8mm"
    m = parse_manifest(_manifest((6, 16), [BF16[0], extra]))
    with pytest.raises(PrecisionError, match=f"lacks \\({BF16[0]}, {extra}\\)"):
        explain_precision(m, "generic", "bf16")


def _pose(monkeypatch, tmp_path, family: str, model: str) -> str:
    """Pose as a bf16 CPU of one kind (vendor, family, model); its ``CPU.kind``."""
    path = tmp_path / f"cpuinfo-{family}-{model}"
    path.write_text(
        f"processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: {family}\n"
        f"model\t\t: {model}\nmodel name\t: Posed CPU\nflags\t\t: {BASE_FLAGS} {BF16[1]}\n"
    )
    monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(path))
    return cpuinfo.this_cpu().kind


def _timed(doc: dict, kind: str, speedups: dict[int, float]) -> dict:
    """``doc`` with bench_narrow timings of its bf16 decoders (bucket -> speedup) on ``kind``."""
    return doc | {
        "speeds": [
            {
                "component": "decoder",
                "bucket": b,
                "target": "generic",
                "precision": "bf16",
                "cpu": "Posed CPU",
                "cpu_kind": kind,
                "speedup_vs_fp32": x,
            }
            for b, x in speedups.items()
        ]
    }


def test_auto_leaves_bf16_out_where_it_was_timed_slower_on_this_cpu_kind(monkeypatch, tmp_path):
    """A CPU with bf16 dot products that issue fewer per cycle than float32's FMAs runs bf16
    slower; where bench_narrow timed that on this CPU kind, auto runs float32. Timed faster, or
    timed only on another kind, auto keeps bf16 and says which."""
    kind = _pose(monkeypatch, tmp_path, "6", "143")
    slower = parse_manifest(_timed(_manifest((6, 16)), kind, {6: 1.3, 16: 0.935}))
    picked, why = explain_precision(slower, "generic")
    assert picked == ALL_FP32
    assert why[-1] == (
        f"decoder: fp32, bf16 timed slower than float32 on this CPU kind (Posed CPU, {kind}): "
        "0.935x at bucket 16"
    )
    assert explain_precision(slower, "generic", "bf16")[0] == BF16_DECODER  # asked for: runs
    faster = parse_manifest(_timed(_manifest((6, 16)), kind, {6: 1.3, 16: 1.6}))
    picked, why = explain_precision(faster, "generic")
    assert picked == BF16_DECODER and why[-1].endswith(", timed 1.3x float32 on this CPU kind")
    _pose(monkeypatch, tmp_path, "25", "17")  # control: the slower timing was another kind's
    picked, why = explain_precision(slower, "generic")
    assert picked == BF16_DECODER and why[-1].endswith(", not timed on this CPU kind")


@pytest.mark.parametrize(
    ("speeds", "message"),
    [
        ({"speeds": {}}, r"'speeds' should be a list"),
        ({"speeds": [1]}, r"speeds\[0\] should be an object"),
        ({"speeds": [{"component": "decoder"}]}, r"'speeds\[0\].bucket' should be a int"),
    ],
)
def test_a_bad_speeds_field_is_named_with_the_fix(speeds, message):
    with pytest.raises(ArtifactError, match=message) as caught:
        parse_manifest(_manifest((6, 16)) | speeds, "art/manifest.json")
    assert "dvc repro" in str(caught.value)


def test_the_manifest_stage_lists_timings_of_the_listed_bytes_only(monkeypatch, tmp_path):
    """``speeds`` holds bench_narrow's timing of a listed bf16 library; a timing of other bytes
    (a library rebuilt since), an untimed record and float32 entries are left out."""
    from kokoro_tvm.pipeline.manifest import measured_speeds

    monkeypatch.chdir(tmp_path)
    libs = [
        {"component": "decoder", "bucket": b, "target": "t", "sha256": f"sha{b}", **more}
        for b in (6, 16)
        for more in ({}, {"precision": "bf16"})
    ]
    for b, sha, timed in ((6, "sha6", True), (16, "other bytes", True)):
        record = {
            "component": "decoder",
            "bucket": b,
            "target": "t",
            "precision": "bf16",
            "timed": timed,
            "library_sha256": sha,
            "cpu": "Posed CPU",
            "cpu_kind": "x86_64 GenuineIntel 6 143",
            "speedup_vs_fp32": 0.9,
        }
        path = A.bench_file("decoder", b, "t", precision="bf16")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    assert measured_speeds(libs) == [
        {
            "component": "decoder",
            "bucket": 6,
            "target": "t",
            "precision": "bf16",
            "cpu": "Posed CPU",
            "cpu_kind": "x86_64 GenuineIntel 6 143",
            "speedup_vs_fp32": 0.9,
        }
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"precision": "fp8"}, r"libraries\[6\].precision 'fp8' is not one this runtime computes"),
        ({"precision": 16}, r"'libraries\[6\].precision' should be a str"),
        ({"needs": {"arch": "x86_64"}}, r"'libraries\[6\].needs.isa' should be a list"),
        ({"needs": {"arch": "x86_64", "isa": [1]}}, r"libraries\[6\].needs.isa should be names"),
        ({"precision": "fp32"}, r"libraries\[6\] is a second fp32 decoder library of bucket 6"),
    ],
)
def test_each_bad_precision_field_is_named_with_the_fix(edit, message):
    doc = _manifest((6, 16))
    doc["libraries"][6] |= edit
    with pytest.raises(ArtifactError, match=message) as caught:
        parse_manifest(doc, "art/manifest.json")
    assert "dvc repro" in str(caught.value)


# -- the commands --------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kokoro_tvm.runtime.cli", *args], capture_output=True, text=True
    )


def test_info_says_what_it_picked_and_why(with_bf16, built, cpu):
    cpu(bf16=True)
    d = json.loads(_cli("info", "--json", "--artifacts", str(with_bf16)).stdout)
    assert d["picked_precision"] == BF16_DECODER
    assert d["precision_reasons"][-1].startswith("decoder: bf16, the narrowest")
    decoders = [lib for lib in d["libraries"]["generic"] if lib["component"] == "decoder"]
    assert sorted(lib.get("precision", "fp32") for lib in decoders) == ["bf16"] * 2 + ["fp32"] * 2
    text = _cli("info", "--artifacts", str(with_bf16)).stdout
    assert "precision on this CPU: duration fp32, text_encoder fp32, decoder bf16" in text
    cpu(bf16=False)
    d = json.loads(_cli("info", "--json", "--artifacts", str(with_bf16)).stdout)
    assert d["picked_precision"] == ALL_FP32
    assert d["precision_reasons"][-1] == f"decoder: fp32, bf16 built, but this CPU lacks {BF16[0]}"
    # float32 artifacts: library entries as before, without a precision of their own
    d = json.loads(_cli("info", "--json", "--artifacts", str(built)).stdout)
    assert all("precision" not in lib for lib in d["libraries"]["generic"])
    assert d["picked_precision"] == ALL_FP32


def test_synth_takes_precision(with_bf16, cpu, tmp_path):
    cpu(bf16=False)
    out = tmp_path / "out.wav"
    args = ("synth", "--phonemes", "hə", "--voice", "random", "-o", str(out))
    p = _cli(*args, "--artifacts", str(with_bf16), "--precision", "bf16")
    assert p.returncode == 1 and not out.exists()
    assert p.stderr.startswith("error: the bf16 decoder libraries need CPU features")
    p = _cli(*args, "--artifacts", str(with_bf16), "--precision", "fp32")
    assert p.returncode == 0 and "target generic, precision fp32;" in p.stderr


# -- the server ----------------------------------------------------------------------------------


def _get(url: str) -> bytes:
    """The body, whatever the status (``/health`` is 503 until the workers are warm)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        return e.read()


def test_the_server_serves_the_precision_asked_for_and_says_so(with_bf16, cpu):
    cpu(bf16=True)
    for asked, expected in (([], BF16_DECODER), (["--precision", "fp32"], ALL_FP32)):
        server = ServerProcess(with_bf16, "--no-warmup", *asked)
        try:
            health = json.loads(_get(server.url + "/health"))
            metrics = _get(server.url + "/metrics").decode()
        finally:
            server.stop()
        assert health["precision"] == expected
        for component, precision in expected.items():
            series = f'kokoro_precision_info{{component="{component}",precision="{precision}"}}'
            assert f"{series} 1" in metrics.splitlines()
    cpu(bf16=False)
    with pytest.raises(RuntimeError, match="the bf16 decoder libraries need CPU features"):
        ServerProcess(with_bf16, "--no-warmup", "--precision", "bf16")
