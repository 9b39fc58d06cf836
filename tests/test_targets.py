"""Targets and devices (issue 26): what a library needs, what a CPU has, which device validates a
target, and which target the runtime loads. CPUs are given as ``/proc/cpuinfo`` text, so the
AVX2-only and AVX-512 cases run on whichever CPU runs the tests."""

from __future__ import annotations

import json

import pytest

from kokoro_tvm import artifacts as A
from kokoro_tvm import cpuinfo
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.devices import isa, resolve
from kokoro_tvm.params import ParamsError, TrackerDevice, parse
from kokoro_tvm.runtime.manifest import Manifest, parse_manifest

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}
V4 = {"kind": "llvm", "mcpu": "x86-64-v4"}
ARM = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}
#: an AMD EPYC Zen 3's flags (AVX2, no AVX-512), abridged to what x86-64-v4 asks about
ZEN3 = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl pni pclmulqdq "
    "ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor "
    "lahf_lm cmp_legacy abm sse4a misalignsse 3dnowprefetch bmi1 avx2 smep bmi2 erms invpcid "
    "rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves"
)
AVX512 = ZEN3 + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni"
NEOVERSE_N1 = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
    "asimddp"
)


def flags(line: str) -> frozenset[str]:
    return frozenset(line.split())


def test_target_needs_come_from_llvm_and_differ_by_level():
    v3, v4, arm = isa.requirements(V3), isa.requirements(V4), isa.requirements(ARM)
    assert v3["arch"] == v4["arch"] == "x86_64" and arm["arch"] == "aarch64"
    assert {"avx2", "fma"} <= set(v3["isa"]) and not any(f.startswith("avx512") for f in v3["isa"])
    assert {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(v4["isa"]) and set(
        v3["isa"]
    ) < set(v4["isa"])
    assert "neon" in arm["isa"] and "dotprod" not in arm["isa"]


def test_missing_names_what_a_cpu_lacks():
    v4 = isa.requirements(V4)
    zen3 = isa.host_features("x86_64", flags(ZEN3))
    lacks = isa.missing(v4, "x86_64", zen3)
    assert lacks and all(f.startswith("avx512") for f in lacks)
    assert isa.missing(v4, "x86_64", isa.host_features("x86_64", flags(AVX512))) == []
    assert isa.missing(isa.requirements(V3), "x86_64", zen3) == []
    assert isa.missing(isa.requirements(ARM), "x86_64", zen3) == ["arch aarch64"]
    assert (
        isa.missing(
            isa.requirements(ARM), "aarch64", isa.host_features("aarch64", flags(NEOVERSE_N1))
        )
        == []
    )
    assert isa.missing(
        isa.requirements(V3), "aarch64", isa.host_features("aarch64", flags(NEOVERSE_N1))
    )


def _resolve(target, spec, host_flags, setting="auto", qemu=(True, "")):
    return resolve.resolve(
        target,
        isa.requirements(spec),
        setting,
        qemu_status=qemu,
        host=("x86_64", isa.host_features("x86_64", flags(host_flags))),
    )


def test_device_records_change_only_where_the_device_does():
    """A cache moved between an AVX2-only and an AVX-512 CPU: v3's record (the validations'
    dependency) is the same bytes on both, v4's goes from none to host."""
    assert _resolve("v3", V3, ZEN3) == _resolve("v3", V3, AVX512)
    assert _resolve("v3", V3, ZEN3)["device"] == "host"
    on_zen3, on_avx512 = _resolve("v4", V4, ZEN3), _resolve("v4", V4, AVX512)
    assert on_zen3["device"] == "none" and on_avx512["device"] == "host"
    assert "avx512f" in on_zen3["reason"] and "tracker" in on_zen3["fix"]
    assert "NOT validated" in resolve.describe(on_zen3) and "Fix:" in resolve.describe(on_zen3)


def test_aarch64_goes_to_qemu_or_says_why_not():
    assert (
        _resolve("arm", ARM, AVX512)["device"] == "qemu"
        and _resolve("arm", ARM, AVX512)["emulated"]
    )
    none = _resolve(
        "arm", ARM, AVX512, qemu=(False, "qemu-aarch64-static is not installed; run `make setup`")
    )
    assert none["device"] == "none" and "make setup" in none["reason"]
    board = TrackerDevice(tracker="127.0.0.1:9190", key="pi5")
    rec = _resolve("arm", ARM, AVX512, setting=board)
    assert (rec["device"], rec["key"], rec["emulated"]) == ("rpc", "pi5", False)
    assert _resolve("v3", V3, AVX512, setting="none")["device"] == "none"


def test_params_devices_are_checked():
    base = {
        "model": {"config": "tiny", "checkpoint": "random"},
        "buckets": {"tokens": [8], "frames": [12]},
        "lstm": {"strategy": "loop"},
        "targets": {"v3": V3},
    }
    prm = parse(base | {"devices": {"v3": {"tracker": "10.0.0.2:9190", "key": "box"}}})
    assert prm.device("v3").key == "box"
    with pytest.raises(ParamsError, match="'devices.v4' names no target"):
        parse(base | {"devices": {"v4": "auto"}})
    with pytest.raises(ParamsError, match="devices.v3"):
        parse(base | {"devices": {"v3": {"tracker": "no-port", "key": "box"}}})
    with pytest.raises(ParamsError, match="devices.v3"):
        parse(base | {"devices": {"v3": "emulate"}})


# -- the runtime's pick ---------------------------------------------------------------------------


def _manifest(*targets: tuple[str, dict]) -> Manifest:
    """A manifest of one library per target, each with the needs LLVM gives its spec."""
    library = {"component": "duration", "bucket": 6, "path": "d.so", "sha256": "0", "bytes": 1}
    library |= {"inputs": [], "outputs": [], "params": []}
    return parse_manifest(
        {
            "format": 3,
            "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
            "toolchain": {},
            "buckets": {"tokens": [6], "frames": []},
            "targets": dict(targets),
            "weights": {"duration": {"path": "d.npz", "sha256": "0", "bytes": 1}},
            "libraries": [library | {"target": name} for name, _ in targets],
            "target_needs": {name: isa.requirements(spec) for name, spec in targets},
        }
    )


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """Make the runtime see the CPU of the given cpuinfo ``flags`` line."""

    def use(line: str) -> None:
        path = tmp_path / f"cpuinfo-{abs(hash(line))}"
        path.write_text(f"processor\t: 0\nflags\t\t: {line}\n")
        monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(path))

    return use


def test_runtime_picks_the_richest_target_the_cpu_runs(cpu):
    from kokoro_tvm.runtime.manifest import explain_pick

    m = _manifest(("x86_64_v3", V3), ("x86_64_v4", V4), ("aarch64", ARM))
    cpu(AVX512)
    picked, why = explain_pick(m)
    assert picked == "x86_64_v4" and "richest" in why[-1]
    assert any(line.startswith("aarch64: not on this CPU (lacks arch aarch64)") for line in why)
    cpu(ZEN3)
    picked, why = explain_pick(m)
    assert picked == "x86_64_v3"
    assert any(line.startswith("x86_64_v4: not on this CPU (lacks avx512") for line in why)


def test_runtime_refuses_a_library_whose_isa_the_cpu_lacks(cpu, tmp_path_factory):
    """The real runtime on built libraries: told that the CPU is AVX2-only, it refuses a library
    that needs AVX-512 before loading any native code; the same manifest loads on a CPU that has
    it (the negative control: the refusal comes from the CPU's flags, not from the manifest)."""
    from runtime_project import artifacts_copy, runtime_artifacts

    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    built = runtime_artifacts(tmp_path_factory)
    art = tmp_path_factory.mktemp("isa") / "artifacts"
    artifacts_copy(built, art)
    manifest = json.loads(A.manifest_file(art).read_text())
    (target,) = manifest["target_needs"]
    manifest["target_needs"][target] = isa.requirements(V4)  # as if built for x86-64-v4
    A.manifest_file(art).write_text(json.dumps(manifest))
    cpu(ZEN3)
    with pytest.raises(ArtifactError, match=r"needs CPU features this machine lacks \(avx512"):
        KokoroTVM.from_manifest(art, target=target)
    with pytest.raises(ArtifactError, match="none of the validated targets"):
        KokoroTVM.from_manifest(art)
    cpu(AVX512)
    tts = KokoroTVM.from_manifest(art)
    assert tts.target == target and tts.synthesize("hˈɛloʊ", "random").audio.size > 0


# -- aarch64 under qemu ----------------------------------------------------------------------------

ARM_PARAMS = {
    "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
    "buckets": {"tokens": [6], "frames": [16]},
    "lstm": {"strategy": "loop"},
    "shapes": {"tokens": "bounded", "frames": "bounded"},
    "targets": {"aarch64": ARM},
    "toolchain": {"llvm_major": 22, "kokoro": "0.9.4"},
    "runtime": {"num_threads": 0},
}


@pytest.fixture(scope="module")
def arm_artifacts(tmp_path_factory):
    from kokoro_tvm.devices import qemu

    usable, why = qemu.status()
    if not usable:
        pytest.skip(f"no aarch64 emulation here: {why}") if not __import__("os").environ.get(
            "CI"
        ) else pytest.fail(why)
    from runtime_project import build_artifacts, runtime_artifacts

    # the x86 runtime project's graphs and references of the same model (its buckets 6 and 16
    # among them): only the aarch64 builds and their validations under qemu run here
    return build_artifacts(
        tmp_path_factory.mktemp("arm") / "repo",
        ARM_PARAMS,
        reuse=runtime_artifacts(tmp_path_factory),
    )


@pytest.mark.pipeline
def test_aarch64_libraries_are_validated_under_qemu(arm_artifacts):
    """The pipeline's own stages on the tiny model: an aarch64 library cross-linked on this host,
    validated against float64 kokoro through an RPC server under qemu-user (the validation
    metrics say which device ran it), listed in the manifest and refused by this x86 runtime."""
    from kokoro_tvm.eval.cases import lengths_for
    from kokoro_tvm.runtime.manifest import explain_pick

    m = json.loads(A.manifest_file(arm_artifacts).read_text())
    assert {l["target"] for l in m["libraries"]} == {"aarch64"} and m["target_needs"]["aarch64"][
        "arch"
    ] == "aarch64"
    for lib in m["libraries"]:
        so = (arm_artifacts / lib["path"]).read_bytes()
        assert so[:4] == b"\x7fELF" and int.from_bytes(so[18:20], "little") == 183  # EM_AARCH64
        v = lib["validation"]
        assert v["device"] == "qemu" and v["emulated"] is True
        assert v["lengths"] == lengths_for(lib["component"], lib["bucket"], emulated=True)
        doc = json.loads(
            A.validation_file(lib["component"], lib["bucket"], "aarch64", arm_artifacts).read_text()
        )
        assert doc["ok"] and doc["validated"]
    if isa.host_arch() != "aarch64":
        with pytest.raises(ArtifactError, match="lacks arch aarch64"):
            explain_pick(parse_manifest(m))


@pytest.mark.pipeline
def test_emulated_validation_can_fail(arm_artifacts):
    """Negative control of the test above: the same aarch64 library on the same qemu device,
    held to a float64 reference 1 % off (float32 kokoro moved with it, so the bound stays
    float32's own distance), misses the criterion."""

    import numpy as np

    from kokoro_tvm.devices.session import open_session
    from kokoro_tvm.eval import verdicts
    from kokoro_tvm.eval.case_files import cases_from_arrays
    from kokoro_tvm.runtime.built import Built, load_built

    cfg = json.loads(A.model_config_file(arm_artifacts).read_text())
    with np.load(A.reference_file("text_encoder", 6, arm_artifacts)) as z:
        cases = cases_from_arrays("text_encoder", 6, dict(z), cfg)
    n = min(cases)
    good = cases[n]
    bad = good | {"r64": [r * 1.01 for r in good["r64"]], "r32": [r * 1.01 for r in good["r32"]]}
    record = json.loads(A.device_file("aarch64", arm_artifacts).read_text())
    with open_session(record) as session:
        lib = load_built(arm_artifacts, Built("text_encoder", 6, "aarch64"), session=session)
        rows = verdicts.check_cases(lib, "text_encoder", {1: good, 2: bad})
    assert rows[1]["ok"] and not rows[2]["ok"]


def test_aarch64_features_come_from_the_aux_vector(tmp_path):
    """On aarch64 the runtime reads ``AT_HWCAP`` (qemu-user shows the guest its own aux vector,
    but the x86 host's /proc/cpuinfo): FP + ASIMD is a NEON CPU, one without ASIMD is not."""
    import struct

    def auxv(hwcap: int) -> str:
        path = tmp_path / f"auxv-{hwcap}"
        path.write_bytes(struct.pack("<6Q", 6, 4096, cpuinfo.AT_HWCAP, hwcap, 0, 0))
        cpuinfo.hwcap_flags.cache_clear()
        return str(path)

    neon = isa.host_features("aarch64", cpuinfo.hwcap_flags(auxv(0b11)))
    assert isa.missing(isa.requirements(ARM), "aarch64", neon) == []
    fp_only = isa.host_features("aarch64", cpuinfo.hwcap_flags(auxv(0b01)))
    assert isa.missing(isa.requirements(ARM), "aarch64", fp_only) == ["neon"]
    cpuinfo.hwcap_flags.cache_clear()
