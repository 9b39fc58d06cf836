"""Cold start as users see it: whole processes of ``kokoro-tvm synth`` beside kokoro-onnx's own
five-line script, each started from nothing, alternated, with the costs a user pays.

Per round, for each measure, one process of each runner, the order swapped every round (A B, then
B A) so neither always runs second on a machine another job may be warming or loading:

* ``cold``: ``kokoro-tvm synth --phonemes P --voice V -o x.wav`` against the kokoro-onnx script
  writing the same sentence to a WAV file: wall time (fork to reap), CPU time (user + system) and
  peak RSS, all three from ``wait4``'s rusage of the child;
* ``stream``: ``kokoro-tvm synth --stream -o -`` against the script writing raw samples to stdout:
  the time from the fork to the first byte on the pipe (the parent stamps its first read);
* ``warm``: one process per runner that creates the audio twice through its Python API (the
  runtime's ``KokoroTVM.create``, kokoro-onnx's ``Kokoro.create``): the second call's time.

Where the runtime picks a precision narrower than float32 for some component (``auto``: bf16
decoders on a CPU with AVX512_BF16), its float32 libraries run beside it as a third runner,
``kokoro_tvm_fp32``: the same command and API with ``--precision fp32`` / ``precision="fp32"``, in
the same rounds, so the metrics hold what the precision buys (``pipeline.bench_cold`` decides).

Then ``shared``: two concurrent processes per runner, each holding a loaded model after one call,
with ``/proc/<pid>/smaps_rollup`` read for the first alone and for both together: weights mapped
from the page cache show as PSS that halves, file-backed pages counted once for the two.

Why a launcher: a child's ``ru_maxrss`` takes the high-water RSS of the address space its
``exec`` replaced, and Python's ``subprocess`` forks (or vforks) from the bench process, whose
RSS (numpy, TVM) would then be the child's floor. Each child is forked from a bare interpreter
(``-I -S``) whose own high-water RSS is recorded beside it, and a child that never rose above it
is an error rather than a number. The page cache is warm: one untimed run of each runner comes
first (it also compiles their ``.pyc``), so ``cold`` means a new process, not a cold disk.

kokoro-onnx runs as its users run it: ``Kokoro(model, voices)`` with the registry's int8 model
(``kokoro-v1.0.int8.onnx``), ORT's default threads (every physical core), ``is_phonemes=True`` on
the same phonemes; stdlib ``wave`` writes its file (``Setup.onnx_script``: the script, which the
stage writes beside the model, ``pipeline.bench_cold.ONNX_SCRIPT``). The runtime runs with its
defaults too (every core it may use). Variables the pipeline's own processes set and a user's
shell lacks (``PIPELINE_ENV``) are removed from every child's environment. A runner that fails
(a non-zero exit, no audio) raises ``ColdStartError`` with its stderr: a failed start must never
be recorded as a fast one. Nothing but the children writes to the work directory (a WAV file
each, as a user's would): their stderr and the launcher's record go to unnamed temporary files.
"""

from __future__ import annotations

import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cpuinfo import load_average
from ..errors import KokoroTVMError
from ..spec import FP32

#: "Please remember to turn off the lights when you leave the office." (misaki en-US): one whole
#: sentence of 60 phonemes, the length a CLI user types
SENTENCE = "plˈiz ɹəmˈɛmbəɹ tə tˈɜɹn ˈɔf ðə lˈIts wˌɛn ju lˈiv ði ˈɔfəs."
VOICE = "jf_alpha"
SAMPLE_RATE = 24000
RUNNERS = ("kokoro_tvm", "kokoro_onnx")
#: the runtime's float32 libraries, beside a narrower pick (module docstring)
TVM_FP32 = f"kokoro_tvm_{FP32}"
#: the runtime's runners -> the precision each asks for (None: none, the default ``auto``, as users
#: run it) and the key of its per-round ratio to kokoro-onnx in ``summary``
TVM_PRECISION: dict[str, str | None] = {"kokoro_tvm": None, TVM_FP32: FP32}
RATIO = {"kokoro_tvm": "ratio", TVM_FP32: f"ratio_{FP32}"}
#: set by the pipeline's processes (``pipeline.common.setup``, ``runtime.tvm_import``), never by
#: a user's shell: a child that inherited them would not start the way a user's does
PIPELINE_ENV = ("TVM_NUM_THREADS", "TVM_USE_RUNTIME_LIB")
#: the most one child may take; a hung one is an error, not a slow sample
CHILD_TIMEOUT_S = 600.0
MB = 1024.0


def sentence(max_phonemes: int) -> str:
    """``SENTENCE`` as one utterance of at most ``max_phonemes``: its words up to the last that
    fits (the first word at least). Cold start is timed on what one library call speaks; a model
    whose largest token bucket is smaller (the tests' tiny config) would otherwise time the
    planner's many cuts, not a start."""
    words = SENTENCE.split(" ")
    n = len(words)
    while n > 1 and len(" ".join(words[:n])) > max_phonemes:
        n -= 1
    return " ".join(words[:n])


class ColdStartError(KokoroTVMError, RuntimeError):
    """A timed process failed, or produced no audio: nothing is recorded for it."""


#: Forks the command from a bare interpreter, reaps it with ``wait4`` and writes its rusage to the
#: file descriptor it is given (see the module docstring), which the command does not inherit.
#: ``time.monotonic`` is CLOCK_MONOTONIC: one clock for every process.
LAUNCHER = r"""
import json, os, sys, time
out, argv = int(sys.argv[1]), sys.argv[2:]
os.set_inheritable(out, False)
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
start = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execv(argv[0], argv)
    except OSError as e:
        os.write(2, ("cannot start %s: %s\n" % (argv[0], e)).encode())
    os._exit(127)
_, status, ru = os.wait4(pid, 0)
end = time.monotonic()
os.write(out, json.dumps({"start": start, "end": end, "status": os.waitstatus_to_exitcode(status),
                          "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
                          "launcher_hwm_kb": hwm}).encode())
"""

#: one process, two ``create`` calls: the second is the warm call (``open_s``: the imports and
#: opening the model)
_TWICE = """
import json, sys, time
t = time.perf_counter()
{loads}
opened = time.perf_counter() - t
calls = []
for _ in range(2):
    t = time.perf_counter()
    audio, rate = {create}
    calls.append(time.perf_counter() - t)
{hold}
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
print(json.dumps({{"open_s": opened, "first_s": calls[0], "warm_s": calls[1],
                  "audio_s": len(audio) / rate, "peak_rss_kb": hwm}}), flush=True)
"""
_HOLD = 'print("ready", flush=True); sys.stdin.read()'
_TVM_OPEN = (
    "from kokoro_tvm.runtime.synthesizer import KokoroTVM\n"
    "root, phonemes, voice = sys.argv[1:4]\n"
    "model = KokoroTVM.from_manifest(root{precision})"
)
_ONNX_OPEN = (
    "from kokoro_onnx import Kokoro\n"
    "path, voices, phonemes, voice = sys.argv[1:5]\n"
    "model = Kokoro(path, voices)"
)
_CREATE = "model.create(phonemes, voice=voice, is_phonemes=True)"


def api_script(runner: str, hold: bool = False) -> str:
    """The ``warm`` (or, with ``hold``, the ``shared``) child of one runner."""
    if runner in TVM_PRECISION:
        asked = TVM_PRECISION[runner]
        opens = _TVM_OPEN.format(precision=f", precision={asked!r}" if asked else "")
    else:
        opens = _ONNX_OPEN
    return _TWICE.format(loads=opens, create=_CREATE, hold=_HOLD if hold else "")


@dataclass
class Sample:
    """One timed process."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    first_byte_s: float | None
    stdout: bytes


@dataclass
class Setup:
    """What the runners run, and where."""

    root: Path  # the runtime's artifact directory
    phonemes: str
    voice: str  # the runtime's voice
    onnx_voice: str  # kokoro-onnx's (the same voice, from its voices file)
    onnx_model: Path
    onnx_voices: Path
    onnx_script: Path  # kokoro-onnx's user script: argv model, voices, phonemes, voice, out
    runtime_python: Path  # the interpreter whose ``kokoro-tvm`` runs
    onnx_python: Path
    workdir: Path
    env: dict[str, str]

    @property
    def kokoro_tvm(self) -> Path:
        return self.runtime_python.parent / "kokoro-tvm"

    def cli(self, runner: str, *out: str) -> list[str]:
        asked = TVM_PRECISION[runner]
        return [
            str(self.kokoro_tvm),
            "synth",
            "--phonemes",
            self.phonemes,
            "--voice",
            self.voice,
            "--artifacts",
            str(self.root),
            *(("--precision", asked) if asked else ()),
            *out,
        ]

    def onnx(self, out: str) -> list[str]:
        return [
            str(self.onnx_python),
            str(self.onnx_script),
            str(self.onnx_model),
            str(self.onnx_voices),
            self.phonemes,
            self.onnx_voice,
            out,
        ]

    def api(self, runner: str, hold: bool = False) -> list[str]:
        if runner in TVM_PRECISION:
            args = [str(self.root), self.phonemes, self.voice]
            return [str(self.runtime_python), "-c", api_script(runner, hold), *args]
        args = [str(self.onnx_model), str(self.onnx_voices), self.phonemes, self.onnx_voice]
        return [str(self.onnx_python), "-c", api_script(runner, hold), *args]


def user_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) without what only the pipeline sets."""
    env = dict(os.environ if base is None else base)
    for name in PIPELINE_ENV:
        env.pop(name, None)
    return env


def timed(argv: list[str], workdir: Path, env: dict[str, str], what: str) -> Sample:
    """Run ``argv`` in ``workdir`` through the launcher; its stdout is read here as it comes
    (first byte stamped), its stderr kept for the error a failure raises."""
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as record:
        launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(record.fileno()), *argv]
        proc = subprocess.Popen(
            launcher,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=workdir,
            pass_fds=(record.fileno(),),
        )
        first, out = _read_all(proc, what)
        stderr = _tail(err)
        record.seek(0)
        raw = record.read()
    if proc.returncode != 0 or not raw:
        raise ColdStartError(f"{what}: the launcher failed (status {proc.returncode}): {stderr}")
    r = json.loads(raw)
    if r["status"] != 0:
        raise ColdStartError(f"{what} exited with status {r['status']}; its stderr ends:\n{stderr}")
    if r["maxrss_kb"] <= r["launcher_hwm_kb"]:
        raise ColdStartError(
            f"{what}: its peak RSS ({r['maxrss_kb']} kB) is not above the launcher's "
            f"({r['launcher_hwm_kb']} kB), so it is the launcher's, not the child's"
        )
    return Sample(
        wall_s=r["end"] - r["start"],
        cpu_s=r["user_s"] + r["sys_s"],
        peak_rss_mb=r["maxrss_kb"] / MB,
        first_byte_s=None if first is None else first - r["start"],
        stdout=out,
    )


def _tail(f, chars: int = 2000) -> str:
    """The end of what a child wrote to ``f`` (its stderr)."""
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")[-chars:]


def _read_all(proc: subprocess.Popen, what: str) -> tuple[float | None, bytes]:
    """Everything ``proc`` writes to stdout, and the monotonic time its first byte was read."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    first = None
    chunks = []
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                proc.kill()
                proc.wait()
                raise ColdStartError(f"{what} ran past {CHILD_TIMEOUT_S:.0f} s and was killed")
            data = os.read(fd, 1 << 16)
            if not data:
                break
            if first is None:
                first = time.monotonic()
            chunks.append(data)
    proc.stdout.close()
    proc.wait()
    return first, b"".join(chunks)


# -- the measures: one process of one runner each -------------------------------------------


def cold(setup: Setup, runner: str) -> dict[str, float]:
    path = setup.workdir / f"{runner}.wav"  # written by the child, as a user's would be
    path.unlink(missing_ok=True)
    argv = setup.cli(runner, "-o", str(path)) if runner in TVM_PRECISION else setup.onnx(str(path))
    s = timed(argv, setup.workdir, setup.env, f"{runner} (one sentence to a WAV file)")
    try:
        with wave.open(str(path), "rb") as f:
            audio_s = f.getnframes() / f.getframerate()
    except (OSError, EOFError, wave.Error) as e:
        raise ColdStartError(f"{runner} exited 0 but wrote no readable WAV file ({e})") from e
    path.unlink()
    if audio_s <= 0:
        raise ColdStartError(f"{runner} exited 0 but its WAV file holds no audio")
    return {"wall_s": s.wall_s, "cpu_s": s.cpu_s, "peak_rss_mb": s.peak_rss_mb, "audio_s": audio_s}


def stream(setup: Setup, runner: str) -> dict[str, float]:
    argv = setup.cli(runner, "--stream", "-o", "-") if runner in TVM_PRECISION else setup.onnx("-")
    s = timed(argv, setup.workdir, setup.env, f"{runner} (one sentence streamed to stdout)")
    if s.first_byte_s is None or len(s.stdout) < 2:
        raise ColdStartError(f"{runner} exited 0 but wrote no audio to stdout")
    return {
        "first_byte_s": s.first_byte_s,
        "wall_s": s.wall_s,
        "audio_s": len(s.stdout) / 2 / SAMPLE_RATE,
    }


def warm(setup: Setup, runner: str) -> dict[str, float]:
    s = timed(
        setup.api(runner), setup.workdir, setup.env, f"{runner} (two create() calls in one process)"
    )
    try:
        r = json.loads(s.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise ColdStartError(f"{runner}: the warm process printed no result ({e})") from e
    if r["audio_s"] <= 0:
        raise ColdStartError(f"{runner}: create() returned no audio")
    return {
        "warm_s": r["warm_s"],
        "first_create_s": r["first_s"],
        "open_s": r["open_s"],
        "wall_s": s.wall_s,
        "peak_rss_mb": s.peak_rss_mb,
        # the process's own VmHWM just before it exits: what the launcher's rusage must match
        "self_peak_rss_mb": r["peak_rss_kb"] / MB,
    }


MEASURES: dict[str, Callable[[Setup, str], dict[str, float]]] = {
    "cold": cold,
    "stream": stream,
    "warm": warm,
}

# -- shared pages ----------------------------------------------------------------------------

ROLLUP_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Shared_Clean", "Private_Dirty")


def smaps_rollup(pid: int) -> dict[str, float]:
    """The fields of ``/proc/<pid>/smaps_rollup`` that say what a process shares, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        if key in ROLLUP_FIELDS:
            out[f"{key.lower()}_mb"] = round(int(value.split()[0]) / MB, 1)
    return out


def _held(setup: Setup, runner: str) -> subprocess.Popen:
    """A process of ``runner`` with its model loaded and its calls made, waiting on stdin."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            setup.api(runner, hold=True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=setup.env,
            cwd=setup.workdir,
        )
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            proc.wait()
            raise ColdStartError(
                f"{runner} (a held process for smaps_rollup) did not start; its stderr ends:\n"
                f"{_tail(err)}"
            )
    return proc


def shared(setup: Setup, runner: str) -> dict[str, Any]:
    """PSS of one held process alone, then of it and a second one on the same files."""
    first = _held(setup, runner)
    procs = [first]
    try:
        alone = smaps_rollup(first.pid)
        procs.append(_held(setup, runner))
        pair = [smaps_rollup(p.pid) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=CHILD_TIMEOUT_S)
    rss = sum(p["rss_mb"] for p in pair)
    pss = sum(p["pss_mb"] for p in pair)
    return {
        "alone": alone,
        "pair": pair,
        "pair_rss_mb": round(rss, 1),
        "pair_pss_mb": round(pss, 1),
        # what RSS counts twice for the two and PSS once: pages they (and others) share
        "pair_shared_mb": round(rss - pss, 1),
    }


# -- the rounds ------------------------------------------------------------------------------


def measure(
    setup: Setup,
    rounds: int,
    runners: tuple[str, ...] = RUNNERS,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every measure for ``runners`` (``RUNNERS``, or the runtime alone, with ``TVM_FP32`` where
    it runs beside), ``rounds`` times, the order reversed every other round; medians, per-round
    ratios of each runtime runner to kokoro-onnx (median over rounds) and every sample."""
    if rounds < 1:
        raise ColdStartError(f"rounds must be at least 1, got {rounds}")
    for runner in runners:  # untimed: page cache, .pyc files
        cold(setup, runner)
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        m: {r: [] for r in runners} for m in MEASURES
    }
    loads = []
    for rnd in range(rounds):
        order = runners if rnd % 2 == 0 else runners[::-1]
        loads.append(load_average()["1m"])
        for name, fn in MEASURES.items():
            for runner in order:
                row = fn(setup, runner)
                samples[name][runner].append(row)
                log(f"round {rnd + 1}/{rounds} {name} {runner}: {_shown(row)}")
    out: dict[str, Any] = {name: summary(by_runner) for name, by_runner in samples.items()}
    out["shared_pages"] = {runner: shared(setup, runner) for runner in runners}
    out["load_avg_1m_per_round"] = loads
    out["samples"] = samples
    return out


def summary(by_runner: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per key: each runner's median and, with kokoro-onnx, the median of the per-round ratios of
    each runtime runner to it (``RATIO``: ``ratio`` for ``kokoro_tvm``, ``ratio_fp32`` for its
    float32 libraries), with their ``_min`` and ``_max``: each round's runners ran under the same
    load, so not the ratio of the medians."""
    onnx = by_runner.get("kokoro_onnx", [])
    out = {}
    for key in by_runner["kokoro_tvm"][0]:
        row = {r: round(statistics.median(s[key] for s in by_runner[r]), 4) for r in by_runner}
        for runner, name in RATIO.items():
            ours = by_runner.get(runner, [])
            ratios = [a[key] / b[key] for a, b in zip(ours, onnx) if b[key] > 0]
            if ratios:
                row[name] = round(statistics.median(ratios), 3)
                row[f"{name}_min"] = round(min(ratios), 3)
                row[f"{name}_max"] = round(max(ratios), 3)
        out[key] = row
    return out


def _shown(row: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in row.items())


def has_torch(python: Path) -> bool:
    """Whether ``python`` can import torch: a development venv (``import tvm`` then loads the
    compiler library too), not a runtime-only install."""
    p = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is not None)"],
        capture_output=True,
        text=True,
        env=user_env(),
    )
    if p.returncode != 0:
        raise ColdStartError(f"{python} does not run: {p.stderr[-500:]}")
    return p.stdout.strip() == "True"
