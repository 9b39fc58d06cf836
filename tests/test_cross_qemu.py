"""aarch64 targets on this x86 host: cross linking, and running the library under qemu-user
through a TVM RPC server (directly and through a tracker) with results equal to the x86 build's.

Skipped where qemu, the sysroot or a linker is missing, except in CI (CI=true), which installs
them (`python -m kokoro_tvm.devices.setup`): there a missing tool fails.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from kokoro_tvm.devices import cross, qemu
from kokoro_tvm.devices.processes import group_members, stats
from kokoro_tvm.devices.tracker import local_tracker

CI = os.environ.get("CI") == "true"
AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}
X86 = {"kind": "llvm", "mcpu": "x86-64-v3"}
EM_AARCH64, ET_DYN = 183, 3


def need(ok: bool, why: str) -> None:
    if not ok:
        if CI:
            pytest.fail(f"CI installs the cross tools (python -m kokoro_tvm.devices.setup): {why}")
        pytest.skip(why)


def need_qemu() -> None:
    need(*qemu.status())


def need_linker() -> None:
    need(*cross.available(AARCH64))


def conv_module(channels: int = 8, length: int = 64, k: int = 3):
    """conv1d + relu: a small stand-in for the decoder's kernels."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, length), "float32"))
    w = relax.Var("w", relax.TensorType((channels, channels, k), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w, padding=k // 2))
            out = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape, dtype=np.float32) for shape in [(1, 8, 64), (8, 8, 3)]]


@pytest.fixture(scope="module")
def x86_result(inputs) -> np.ndarray:
    import tvm
    from tvm import relax

    if cross.host_arch() != "x86_64":
        pytest.skip("compares with an x86 build run on this host")
    vm = relax.VirtualMachine(tvm.compile(conv_module(), target=tvm.target.Target(X86)), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


@pytest.fixture(scope="module")
def aarch64_executable():
    import tvm

    return tvm.compile(conv_module(), target=tvm.target.Target(AARCH64))


@pytest.fixture(scope="module")
def aarch64_lib(aarch64_executable, tmp_path_factory) -> Path:
    need_linker()
    path = tmp_path_factory.mktemp("aarch64") / "conv.so"
    aarch64_executable.export_library(str(path), fcompile=cross.linker_for(AARCH64))
    return path


def test_host_targets_link_with_the_default_cc():
    assert cross.linker_for({"kind": "llvm"}) is None
    assert cross.linker_for({"kind": "llvm", "mtriple": f"{cross.host_arch()}-linux-gnu"}) is None
    assert cross.target_arch({"kind": "llvm", "mtriple": "arm64-apple-macos"}) == "aarch64"


def test_missing_linker_names_the_fix(monkeypatch):
    monkeypatch.setenv("KOKORO_TVM_CROSS_LINKER", "zig")
    monkeypatch.setattr(cross, "_has_ziglang", lambda: False)
    with pytest.raises(cross.CrossToolchainError, match="kokoro_tvm.devices.setup"):
        cross.linker_for(AARCH64)


@pytest.mark.parametrize("linker", ["gcc", "zig"])
def test_aarch64_export_is_a_deterministic_aarch64_elf(
    linker, aarch64_executable, tmp_path, monkeypatch
):
    need_linker()  # at least one linker (CI: both are installed, but either one alone is fine)
    monkeypatch.setenv("KOKORO_TVM_CROSS_LINKER", linker)
    ok, why = cross.available(AARCH64)
    if not ok:
        pytest.skip(f"{linker}: {why}")
    fcompile = cross.linker_for(AARCH64)
    paths = [tmp_path / f"a{i}.so" for i in range(3)]
    aarch64_executable.export_library(str(paths[0]), fcompile=fcompile)
    aarch64_executable.export_library(str(paths[1]), fcompile=fcompile)  # the same fcompile again
    aarch64_executable.export_library(str(paths[2]), fcompile=cross.linker_for(AARCH64))
    data = [p.read_bytes() for p in paths]
    assert data[0] == data[1] == data[2], (
        f"{linker}: exporting the same module twice gave different bytes"
    )
    head = data[0][:20]
    assert head[:4] == b"\x7fELF" and head[4] == 2 and head[5] == 1  # ELF64, little endian
    assert int.from_bytes(head[16:18], "little") == ET_DYN
    assert int.from_bytes(head[18:20], "little") == EM_AARCH64


def test_emulated_python_is_aarch64_and_reenters_qemu():
    need_qemu()
    code = "import platform, sys; print(platform.machine(), sys.executable)"
    p = qemu.run_python(["-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    machine, executable = p.stdout.split()
    assert machine == "aarch64"
    assert Path(executable) == qemu.python_wrapper()  # TVM's workers re-execute sys.executable


def run_remote(remote, lib: Path, inputs: list[np.ndarray]) -> np.ndarray:
    import tvm
    from tvm import relax

    remote.upload(str(lib))
    dev = remote.cpu()
    vm = relax.VirtualMachine(remote.load_module(lib.name), dev)
    return vm["main"](*[tvm.runtime.tensor(a, dev) for a in inputs]).numpy()


@pytest.mark.pipeline
def test_qemu_rpc_result_equals_x86(aarch64_lib, inputs, x86_result):
    from tvm import rpc

    need_qemu()
    with qemu.rpc_server() as (host, port):
        out = run_remote(rpc.connect(host, port), aarch64_lib, inputs)
    np.testing.assert_allclose(out, x86_result, rtol=1e-5, atol=1e-5)


@pytest.mark.pipeline
def test_tracker_finds_the_qemu_server_by_key(aarch64_lib, inputs, x86_result):
    """The pipeline's tracker path (``devices.session.open_session`` on an ``rpc`` device record,
    as params ``devices.<target>: {tracker, key}`` make it): the server registered under the key
    is found by it and runs the library; a key no server registered fails after the record's
    bounded wait, naming the command to run on the board."""
    from kokoro_tvm.devices.session import DeviceError, open_session

    need_qemu()
    key = "kokoro-tvm-test-aarch64"
    with local_tracker() as tracker, qemu.rpc_server(tracker=tracker, key=key):
        board = {
            "device": "rpc",
            "target": "aarch64",
            "tracker": tracker,
            "key": key,
            "timeout_s": 30,
        }
        with open_session(board) as session:
            out = run_remote(session.remote, aarch64_lib, inputs)
        t0 = time.monotonic()
        with pytest.raises(
            DeviceError,
            match=r"no free device under key 'absent-board' for 2 s.*--key absent-board",
        ):
            with open_session(board | {"key": "absent-board", "timeout_s": 2}):
                pass
        assert time.monotonic() - t0 < 10
    np.testing.assert_allclose(out, x86_result, rtol=1e-5, atol=1e-5)


@pytest.mark.pipeline
def test_an_aarch64_target_is_tuned_on_an_emulated_board(tmp_path, capsys):
    """A cross target tuned on its own device: MetaSchedule's aarch64 candidates are linked on
    this host (the sysroot, like a minimal board image, has no compiler) and measured on a qemu
    board registered with a tracker; the kept record then schedules the aarch64 build."""
    import re

    from kokoro_tvm.compile import metaschedule
    from kokoro_tvm.compile.phases import build, legalize

    need_qemu()
    need_linker()
    mod = conv_module()
    mod["main"] = mod["main"].with_attr("num_input", 1)  # x; the weight is a parameter
    mod = legalize(mod)
    key = "kokoro-tvm-test-aarch64-tune"
    extra = qemu.sysroot() / qemu.RUNTIME_EXTRA
    with (
        local_tracker() as tracker,
        qemu.rpc_server(tracker=tracker, key=key, load_library=[extra], threads=1),
    ):
        board = {
            "device": "rpc",
            "target": "aarch64",
            "tracker": tracker,
            "key": key,
            "timeout_s": 120,
        }
        report = metaschedule.tune(lambda: mod, AARCH64, 4, tmp_path, 2, device=board, min_gain=0.0)
    out = capsys.readouterr().out
    n = len(report["tasks"])
    assert n >= 1 and report["measured_on"].startswith("1 device(s)")
    _, _, sched = build(mod, AARCH64, tmp_path)
    for i, task in enumerate(report["tasks"]):
        # every candidate failing to load (a tar the board cannot link) leaves no "best", no record
        assert re.search(
            rf"tune \[{i + 1}/{n}\] {task['task']}: 4/4 trials, best [0-9.e-]+ ms", out
        ), out
        assert task["kept"] and task["tuned_ms"] > 0 and task["rules_ms"] > 0
        assert sched.functions[task["task"]] == "tuned"


def processes() -> dict[int, str]:
    """pid -> command line of every process."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = (
                    (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
    return out


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (its children, theirs, ...)."""
    parent = {child: st.ppid for child, st in stats().items()}
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.mark.pipeline
def test_server_leaves_no_process_behind():
    from tvm import rpc

    need_qemu()
    before = set(processes())
    with qemu.rpc_server() as (host, port):
        remote = rpc.connect(host, port)  # a session: the server forks a process for it
        assert remote.cpu().exist  # a round trip: the session is up
        # this server and its descendants, not another test worker's emulated processes
        (server,) = [
            pid
            for pid, cmd in processes().items()
            if pid not in before and f"--port {port} " in cmd
        ]
        ours = [
            pid
            for pid in descendants(server) | {server}
            if str(qemu.sysroot()) in processes().get(pid, "")
        ]
        groups = {os.getpgid(pid) for pid in ours}
        assert len(ours) >= 3, ours  # the server, its listener (TVM's PopenWorker) and the session
        assert len(groups) == 1, ours
    (group,) = groups
    running = {pid: state for pid, state in group_members(group).items() if state != "Z"}
    assert not running, f"processes of the server left running: {running}"


@pytest.mark.pipeline
def test_server_that_dies_reports_its_log(monkeypatch):
    need_qemu()
    monkeypatch.setenv("PYTHONHASHSEED", "not-a-number")  # the guest Python refuses to start
    with pytest.raises(
        qemu.QemuError, match=r"exited \(\d+\) while starting:\n(.|\n)*PYTHONHASHSEED"
    ):
        with qemu.rpc_server(startup_timeout=60):
            pass  # pragma: no cover
