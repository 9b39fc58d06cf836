"""``kokoro_tvm.cpuinfo``, the one reader of ``/proc/cpuinfo``: CPUs given as cpuinfo text (one
lacking avx512_bf16, one lacking AVX2, one lacking LZCNT), and every caller naming a posed CPU
the same way."""

from __future__ import annotations

import json
import struct

import pytest

from kokoro_tvm import cpuinfo
from kokoro_tvm.devices import isa
from kokoro_tvm.results import machine

#: x86-64-v2's flags and what v3 adds, as Linux names them
V2 = "fpu sse sse2 cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3"
V3 = V2 + " avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
V4 = V3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
#: the x86-64-v3 target's needs, as ``isa.requirements`` records them from LLVM
V3_NEEDS = {
    "arch": "x86_64",
    "isa": [
        "avx", "avx2", "bmi", "bmi2", "cx16", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sahf",
        "sse3", "sse4.1", "sse4.2", "ssse3", "xsave",
    ],
}  # fmt: skip


def x86(flags: str, name: str = "Test CPU 9000", cpus: int = 2, mhz: float = 2450.0) -> str:
    block = (
        "processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        f"model name\t: {name}\ncpu MHz\t\t: {{mhz}}\nflags\t\t: {flags}\n\n"
    )
    return "".join(block.format(n=n, mhz=mhz + n) for n in range(cpus))


def test_reads_name_family_model_flags_cpus_and_clock():
    cpu = cpuinfo.parse(x86(V4 + " avx512_vnni avx512_bf16", cpus=3))
    assert (cpu.arch, cpu.model_name, cpu.vendor) == ("x86_64", "Test CPU 9000", "AuthenticAMD")
    assert (cpu.family, cpu.model, cpu.logical_cpus, cpu.mhz) == ("25", "17", 3, 2452.0)
    assert cpu.isa == "x86-64-v4" and cpu.isa_extensions == ["VNNI", "BF16"]
    assert cpu.has("avx512_bf16", "avx512_vnni") and not cpu.has("amx_bf16")


def test_a_cpu_without_avx512_bf16_is_v4_without_bf16():
    cpu = cpuinfo.parse(x86(V4 + " avx512_vnni"))
    assert cpu.isa == "x86-64-v4" and cpu.isa_extensions == ["VNNI"]
    assert not cpu.has("avx512_bf16")
    assert "avx512bf16" not in isa.host_features("x86_64", cpu.flags)


def test_a_cpu_without_avx2_is_v2_and_cannot_run_v3():
    cpu = cpuinfo.parse(x86(V3.replace(" avx2", "")))
    assert cpu.isa == "x86-64-v2" and cpu.isa_extensions == []
    assert isa.missing(V3_NEEDS, "x86_64", isa.host_features("x86_64", cpu.flags)) == ["avx2"]
    # the control: with AVX2 back it is v3, and the v3 libraries run on it
    full = cpuinfo.parse(x86(V3))
    assert full.isa == "x86-64-v3"
    assert isa.missing(V3_NEEDS, "x86_64", isa.host_features("x86_64", full.flags)) == []


@pytest.mark.parametrize("lacks", ["abm", "xsave"])
def test_v3_is_the_psabi_level_lzcnt_and_xsave_included(lacks):
    """x86-64-v3 needs LZCNT (Linux ``abm``) and OSXSAVE (``xsave``): LLVM's x86-64-v3 target,
    hence every v3 library, uses both, so a CPU without either is v2 (``eval.cold_start`` once
    called such a CPU v3)."""
    cpu = cpuinfo.parse(x86(V3.replace(f" {lacks}", "")))
    assert cpu.isa == "x86-64-v2"
    assert isa.missing(V3_NEEDS, "x86_64", isa.host_features("x86_64", cpu.flags))


def test_levels_build_on_each_other():
    """AVX-512 without AVX2 is no x86-64-v4: each level needs the ones below it."""
    assert cpuinfo.parse(x86(V4.replace(" avx2", ""))).isa == "x86-64-v2"
    assert cpuinfo.parse(x86("fpu sse sse2")).isa == "x86-64"


def test_aarch64_features():
    text = (
        "processor\t: 0\nBogoMIPS\t: 50.00\n"
        "Features\t: fp asimd aes crc32 atomics asimddp i8mm bf16\n"
        "CPU implementer\t: 0x41\nCPU part\t: 0xd40\n\nprocessor\t: 1\nFeatures\t: fp asimd\n"
    )
    cpu = cpuinfo.parse(text)
    assert (cpu.arch, cpu.family, cpu.model, cpu.logical_cpus) == ("aarch64", "0x41", "0xd40", 2)
    assert cpu.model_name == "aarch64 implementer 0x41 part 0xd40"
    assert cpu.isa == "ARMv8-A NEON" and cpu.isa_extensions == ["dotprod", "i8mm", "BF16"]
    assert cpu.has("bf16", "i8mm", "asimddp")
    no_neon = cpuinfo.parse(text.replace("fp asimd aes", "fp aes"))
    assert no_neon.isa == "ARMv8-A" and no_neon.isa_extensions == []


def test_a_text_without_flags_says_so():
    cpu = cpuinfo.parse("processor\t: 0\nmodel name\t: Mystery\n")
    assert not cpu.has_flags and cpu.flags == frozenset()
    with pytest.raises(machine.MachineError, match="no 'flags'"):
        machine.describe("processor\t: 0\nmodel name\t: Mystery\ncpu family\t: 6\nmodel\t: 1\n")


def test_the_aux_vector_gives_aarch64_features(tmp_path):
    raw = struct.pack("<6Q", 6, 4096, cpuinfo.AT_HWCAP, 0b11, cpuinfo.AT_HWCAP2, 1 << 14)
    (tmp_path / "auxv").write_bytes(raw)
    cpuinfo.hwcap_flags.cache_clear()
    try:
        assert cpuinfo.hwcap_flags(str(tmp_path / "auxv")) == {"fp", "asimd", "bf16"}
    finally:
        cpuinfo.hwcap_flags.cache_clear()


def test_every_caller_names_a_posed_cpu_alike(monkeypatch, tmp_path):
    """The runtime's ISA check, the results record and the bench stages' metrics read one posed
    CPU: the same name (results refuse a bench whose name differs), family, model and level."""
    from kokoro_tvm.eval.timing import cpu_name

    posed = tmp_path / "cpuinfo"
    posed.write_text(x86(V3.replace(" avx2", ""), name="Posed CPU", cpus=5))
    monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(posed))
    metrics = json.loads(json.dumps(cpuinfo.this_cpu().as_dict()))  # as a stage writes it
    record = machine.this_cpu()
    assert metrics["model_name"] == record["model_name"] == cpu_name() == "Posed CPU"
    assert {k: metrics[k] for k in ("family", "model", "isa")} == {
        "family": "25",
        "model": "17",
        "isa": "x86-64-v2",
    }
    assert record["isa"] == "x86-64-v2" and record["cores"] == metrics["logical_cpus"] == 5
    assert "avx2" not in isa.host_features() and "sse4.2" in isa.host_features()


def test_an_unreadable_cpuinfo_is_a_cpu_without_flags(monkeypatch, tmp_path):
    monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(tmp_path / "absent"))
    assert cpuinfo.this_cpu().flags == frozenset() and cpuinfo.model_name()
    assert isa.host_features() == frozenset()
    with pytest.raises(machine.MachineError, match="cannot read"):
        machine.this_cpu()


def test_load_average():
    load = cpuinfo.load_average()
    assert set(load) == {"1m", "5m", "15m"} and all(v >= 0 for v in load.values())


def test_amx_that_linux_refuses_counts_as_absent(monkeypatch, tmp_path):
    """A CPU with AMX under a Linux that refuses the process its tile state (before 5.16): an
    AMX library would die of SIGILL at its first tile instruction, so this process has no AMX,
    and what it lacks says why; a posed CPU stands for another machine and keeps its AMX."""
    from kokoro_tvm.runtime import amx

    flags = cpuinfo.parse(x86(V4 + " avx512_bf16 amx_tile amx_bf16")).flags
    needs = {"arch": "x86_64", "isa": ["amx-bf16", "amx-tile", "avx512f"]}
    monkeypatch.delenv(cpuinfo.CPUINFO_ENV, raising=False)
    monkeypatch.setattr(cpuinfo, "host_arch", lambda: "x86_64")
    monkeypatch.setattr(cpuinfo, "host_flags", lambda: flags)
    monkeypatch.setattr(amx, "permit_where_present", lambda: True)  # the control: granted
    assert {"amx-tile", "amx-bf16"} <= isa.host_features() and isa.missing(needs) == []
    monkeypatch.setattr(amx, "permit_where_present", lambda: False)
    assert not isa.host_features() & isa.TILE_FEATURES and "avx512f" in isa.host_features()
    (lack,) = isa.missing(needs)
    assert lack.startswith("amx-bf16, amx-tile (") and "Linux refused" in lack, lack
    posed = tmp_path / "cpuinfo"
    posed.write_text(x86(V4 + " avx512_bf16 amx_tile amx_bf16"))
    monkeypatch.setenv(cpuinfo.CPUINFO_ENV, str(posed))
    assert isa.missing(needs) == []
