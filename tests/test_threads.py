"""One ``KokoroTVM`` shared by threads: the same audio as sequential calls, libraries loaded once,
and thread pools sized by the cores this process may use (affinity and cgroup quota).

Libraries come from ``runtime_project`` (the tiny config, as ``params.yaml`` ships it: bounded).
Its decoder is unscheduled, hence slow: every thread plans (duration predictor) in all 20 rounds
and decodes in the first ``AUDIO_ROUNDS``. ``test_threads_on_the_full_build`` repeats the whole
check, audio in every round, on the Kokoro-82M build when ``artifacts/`` holds one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm import artifacts as A
from kokoro_tvm.runtime import threads
from kokoro_tvm.runtime.component import CompiledComponent
from kokoro_tvm.runtime.synthesizer import KokoroTVM

# short inputs (<= 30 phonemes), several chunks among them, each its own voice and seed
INPUTS = [
    ("həlˈO wˈɜɹld", 0),
    ("ɐn ˈOp", 1),
    ("kˈOkəɹO. ɪz ɐn ˈOpən mˈɑdᵊl!", 2),
    ("wˈʌn, tˈu, θɹˈi.", 3),
    ("ðə kwˈɪk bɹˈWn fˈɑks", 4),
    ("stˈɑp. ɡˈO. wˈAt.", 5),
    ("ˈɛvɹi θˈɪŋ ɪz fˈIn", 6),
    ("jˈɛs", 7),
]
THREADS = 8
ROUNDS = 20
AUDIO_ROUNDS = 2
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


def _speak(tts: KokoroTVM, phonemes: str, seed: int, voice: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny buckets cut some inputs
        audio, _ = tts.create(phonemes, voice=voice, is_phonemes=True, seed=seed)
    return audio


def _durations(tts: KokoroTVM, phonemes: str, seed: int, voice: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.concatenate([c.durations for c in tts.plan(phonemes, voice, seed=seed)])


def check_shared(artifacts: Path, voice: str, audio_rounds: int, budget_s: float) -> None:
    """``THREADS`` threads x ``ROUNDS`` rounds on one object, started together from a fresh
    (unloaded) runtime: every output equals the sequential call's bit for bit, every library
    was loaded once, and calls did overlap (some library needed more than one VM)."""
    sequential = KokoroTVM.from_manifest(artifacts)
    audio = [_speak(sequential, p, s, voice) for p, s in INPUTS]
    durations = [_durations(sequential, p, s, voice) for p, s in INPUTS]
    loads: list[str] = []
    real_init = CompiledComponent.__init__

    def counted(self, root, entry, *a, **k):
        loads.append(f"{entry.component}-{entry.bucket}")
        real_init(self, root, entry, *a, **k)

    tts = KokoroTVM.from_manifest(artifacts)
    start = threading.Barrier(THREADS)
    failures: list[str] = []

    def worker(w: int) -> None:
        start.wait()
        for r in range(ROUNDS):
            i = (w + r) % len(INPUTS)
            speak = r < audio_rounds
            try:
                got = (_speak if speak else _durations)(tts, *INPUTS[i], voice)
            except Exception as e:  # reported below, with the thread and round
                failures.append(f"thread {w} round {r}: {type(e).__name__}: {e}")
                return
            if not np.array_equal(got, (audio if speak else durations)[i]):
                failures.append(f"thread {w} round {r}: input {i} differs from sequential")

    try:
        CompiledComponent.__init__ = counted
        workers = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
        for t in workers:
            t.start()
        deadline = time.monotonic() + budget_s
        for t in workers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        CompiledComponent.__init__ = real_init
    assert not any(t.is_alive() for t in workers), "a thread hung"
    assert not failures, failures[:5]
    assert sorted(loads) == sorted(set(loads)), f"a library was loaded twice: {sorted(loads)}"
    assert max(lib.vms for lib in tts.libraries.loaded()) > 1, "no two calls overlapped"


def test_threads_sharing_one_runtime_give_the_sequential_audio(artifacts):
    check_shared(artifacts, "random", AUDIO_ROUNDS, budget_s=600)


@pytest.mark.slow
def test_threads_on_the_full_build():
    """The same on the Kokoro-82M build of ``dvc repro``: audio in all 20 rounds, in 2 minutes."""
    artifacts = REPO / A.ROOT
    if not A.manifest_file(artifacts).exists():
        pytest.skip("no full build in artifacts/: run `make repro`")
    voice = KokoroTVM.from_manifest(artifacts).voices[0]
    check_shared(artifacts, voice, ROUNDS, budget_s=120)


def test_one_thread_keeps_one_vm(artifacts):
    tts = KokoroTVM.from_manifest(artifacts)
    for p, s in INPUTS[:3]:
        _speak(tts, p, s, "random")
    assert {lib.vms for lib in tts.libraries.loaded()} == {1}


def test_cores_follow_the_cgroup_quota(tmp_path):
    """cgroup v2 ``cpu.max`` caps the affinity mask (rounded up); ``max`` or no file does not."""
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.available_cores(tmp_path) == affinity
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert threads.available_cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{100000 * affinity + 1} 100000\n")
    assert threads.available_cores(tmp_path) == affinity  # never more than the mask
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")  # cgroup v1: 1.5 CPUs
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.available_cores(tmp_path) == min(2, affinity)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.available_cores(tmp_path) == affinity


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin to 1")
def test_a_pinned_process_sizes_tvm_to_its_mask(artifacts):
    """Under ``taskset -c 0`` (affinity 1 of the machine's CPUs) the runtime asks TVM for one
    thread, not ``os.cpu_count()``; an explicit count still wins."""
    code = (
        "import os, sys; from kokoro_tvm.runtime.synthesizer import KokoroTVM; "
        "os.environ.pop('TVM_NUM_THREADS', None); "
        f"KokoroTVM.from_manifest({str(artifacts)!r}, num_threads=int(sys.argv[1]) or None); "
        "print(os.environ['TVM_NUM_THREADS'], os.cpu_count())"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    pinned = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code, "0"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert pinned[0] == "1" and int(pinned[1]) > 1
    asked = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code, "3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert asked[0] == "3"


def test_thread_counts_are_checked():
    assert threads.check_count(0) is None and threads.check_count(None) is None
    assert threads.check_count(4) == 4
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(threads.ThreadCountError, match="positive whole number"):
            threads.check_count(bad)


def test_workers_share_the_budget():
    assert threads.share(2, cores=8) == 4
    assert threads.share(16, cores=2) == 1
    assert os.environ[threads.BIND_VARIABLE] == "0"
