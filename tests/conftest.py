"""Shared fixtures: a temp copy of the pipeline on the tiny config, driven by the real ``dvc``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from run_once import once

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY_PARAMS = {
    "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
    "buckets": {"tokens": [8], "frames": [12]},
    # loop, as params.yaml ships: the unroll LSTM's fused epilogues take ~100 s more per target to
    # build, paid by every whole-pipeline test (its numerics: test_lstm.py, test_schedule.py)
    "lstm": {"strategy": "loop"},
    "shapes": {"tokens": "padded", "frames": "padded"},  # test_bounded.py builds bounded ones
    "targets": {"generic": {"kind": "llvm"}},  # test_dvc_targets adds a second one
    "toolchain": {"llvm_major": 22, "kokoro": "0.9.4"},
    "runtime": {"num_threads": 0},
    # ORT: test_bench.py; timing rounds, the default bench_e2e lengths and chunked input:
    # test_runtime.py
    "bench": {"repeats": 1, "onnxruntime": False, "phonemes": [6]},
    "tune": {"trials": 0},  # a real search is covered by test_tune.py
    "voices": {"source": "none"},  # sources, npm's included, are covered by test_voices.py
    "precision": {"decoder": []},  # float32 only: test_precision_stages.py adds bf16
}


#: Modules handed out first, in this order (the rest follow in pytest's order). ``make test``
#: gives whole modules to its workers in collection order (``--dist loadscope
#: --no-loadscope-reorder``), the next to whichever worker is down to its last two tests.
#: xdist's own order (most tests first) had left the longest module, one test, for last, on one
#: worker while the other sat idle. The two modules that build what others share come first (the
#: DVC project, ``build_tiny``; the runtime's artifacts), then the longest, with the
#: DVC project's other users placed after what the second worker takes while the first builds.
SCHEDULE_FIRST = (
    "test_dvc_graph.py",  # builds the DVC project, then runs on it, on the first worker
    "test_text_normalize.py",  # builds the runtime's artifacts
    "test_cross_qemu.py",
    "test_stream_memory.py",
    "test_tune.py",
    "test_dvc_targets.py",  # the DVC project's by now
    "test_ci.py",
    "test_text_input.py",
    "test_precision_stages.py",
    "test_schedule.py",
    "test_server_hardening.py",
    "test_bench_cold.py",
    "test_server.py",
    "test_cut_cost.py",
    "test_targets.py",
    "test_server_fastapi.py",
    "test_bf16.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    gone = [name for name in SCHEDULE_FIRST if not (Path(__file__).parent / name).exists()]
    if gone:  # a renamed module would silently lose its place
        raise pytest.UsageError(f"tests/conftest.py SCHEDULE_FIRST names no module {gone}")
    rank = {name: i for i, name in enumerate(SCHEDULE_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable within a module


class Project:
    """A git + DVC checkout of the pipeline in a temp dir."""

    def __init__(self, root: Path):
        self.root = root

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return dict(
            os.environ,
            PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
            DVC_NO_ANALYTICS="1",
            PYTHONPATH=str(self.root / "src"),
            **(extra or {}),
        )  # stages import this copy, not the checkout

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """``args`` in the background (pipes for stdout and stderr): what a concurrent job runs."""
        return subprocess.Popen(
            args,
            cwd=self.root,
            env=self.env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        p = subprocess.run(args, cwd=self.root, env=self.env(env), capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
            )
        return p

    def repro(self, *args: str, env: dict[str, str] | None = None) -> set[str]:
        """Run ``dvc repro`` and return the names of the stages it actually executed, but the
        ``devices@<target>`` stages: they run on every repro by design (``always_changed``: the CPU
        under a cache can change), and what matters is what they make rerun."""
        out = self.run("dvc", "repro", *args, env=env).stdout
        return {
            s for s in re.findall(r"Running stage '([^']+)'", out) if not s.startswith("devices@")
        }

    def changed(self, env: dict[str, str] | None = None) -> set[str]:
        """Stages ``dvc status`` sees out of date, but the ``devices@`` ones: they run on every
        repro (``always_changed``), whatever else their status lists."""
        out = self.run("dvc", "status", "--json", env=env).stdout
        return {s for s in json.loads(out) if not s.startswith("devices@")}

    def up_to_date(self) -> bool:
        return self.changed() == set()

    @property
    def params(self) -> dict:
        return yaml.safe_load((self.root / "params.yaml").read_text())

    def set_params(self, params: dict) -> None:
        (self.root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    def stages(self) -> set[str]:
        out = self.run("dvc", "stage", "list", "--name-only").stdout
        return set(out.split())


def make_project(root: Path, params: dict) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(
        REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    (root / "artifacts").mkdir()
    proj = Project(root)
    proj.set_params(params)
    proj.run("git", "init", "-q")
    proj.run("git", "config", "user.email", "ci@example.com")
    proj.run("git", "config", "user.name", "ci")
    proj.run("dvc", "init", "-q")
    proj.run("dvc", "config", "core.analytics", "false")
    return proj


#: The workflow's first run, as ``act --json`` logged it, in the tree ``build_tiny`` fills.
FIRST_RUN_LOG = "workflow-first-run.jsonl"


def build_tiny(root: Path) -> None:
    """The tiny pipeline, built by the shipped CI workflow (``act``: prepare, a build job per
    length axis at once, gather) against an S3 server over ``root/s3``, then restored into
    ``root/repo`` from that remote, as a fresh clone restores it, and committed. One build
    serves the workflow's own test (``test_ci``: the log in ``FIRST_RUN_LOG``, the remote's
    objects, a second run) and every test of the built pipeline (``built_project``)."""
    from kokoro_tvm.pipeline import ci

    server = S3Server(root / "s3")
    try:
        remote = server.bucket("workflow")
        proj = make_project(root / "repo", TINY_PARAMS)
        shutil.copytree(REPO / ".github", proj.root / ".github")
        proj.run("git", "add", "-A")
        proj.run("git", "commit", "-qm", "pipeline and workflow")
        run = run_workflow(proj, remote)
        (root / FIRST_RUN_LOG).write_text(run.log)
        built = set().union(*(run.built(job) for job in run.ran))
        every = {s for s in proj.stages() if not s.startswith("devices@")}
        assert built == every, (
            f"the workflow's jobs should build every stage, built {sorted(built)}"
        )
        proj.run("python", "-m", "kokoro_tvm.pipeline.ci", "remote", env=remote.env)
        ran = proj.repro("--pull", "--allow-missing", env=remote.env)
        assert ran == set(), f"restoring what the workflow built rebuilt {sorted(ran)}"
        proj.run(
            "dvc", "remote", "remove", "--local", ci.REMOTE
        )  # tests set up remotes of their own
        proj.run("git", "add", "-A")
        proj.run("git", "commit", "-qm", "tiny pipeline")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def built_project(tmp_path_factory) -> Project:
    """The tiny pipeline after the workflow's run (``build_tiny``): built once per test run
    (minutes), a copy per pytest-xdist worker, since tests edit its params and rerun it."""
    return Project(once(tmp_path_factory, "pipeline", build_tiny, copy=True) / "repo")


class WorkflowRun:
    """One ``act`` run of ``.github/workflows/build.yml``, read from its JSON log: per job (name
    with its matrix values), the stages its ``dvc repro`` ran and when the job's lines came."""

    STAGE = re.compile(r"Running stage '([^']+)'")

    def __init__(self, log: str):
        self.log = log
        self.ran: dict[str, list[str]] = {}
        self.span: dict[str, tuple[datetime, datetime]] = {}
        self.lines: dict[str, list[str]] = {}  # per job, its messages in order
        self.failed: list[str] = []  # "job: step" of every step act reports as failed
        for line in log.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or "jobID" not in rec:
                continue
            job = "/".join(
                [rec["jobID"], *(str(v) for _, v in sorted((rec.get("matrix") or {}).items()))]
            )
            t = datetime.fromisoformat(rec["time"])
            first, last = self.span.get(job, (t, t))
            self.span[job] = (min(first, t), max(last, t))
            msg = str(rec.get("msg", ""))
            self.ran.setdefault(job, []).extend(self.STAGE.findall(msg))
            self.lines.setdefault(job, []).append(msg)
            if rec.get("stepResult") == "failure":
                self.failed.append(f"{job}: {rec.get('step', '?')}")

    def failure(self, tail: int = 80) -> str:
        """The failed steps by name, each job's last ``tail`` lines under them: what a failed run's
        assertion shows, however long the whole log (the step at fault is never cut off)."""
        jobs = list(dict.fromkeys(f.split(": ", 1)[0] for f in self.failed))
        parts = [f"failed steps: {', '.join(self.failed) or 'none reported'}"]
        for job in jobs:
            parts += [f"--- {job}, last {tail} lines ---", *self.lines[job][-tail:]]
        return "\n".join(parts)

    def built(self, job: str) -> set[str]:
        """What ``job`` ran, but the ``devices@`` stages (they run on every repro by design)."""
        return {s for s in self.ran[job] if not s.startswith("devices@")}


def run_workflow(proj: Project, remote: S3Remote) -> WorkflowRun:
    """``act`` in self-hosted mode: each job in its own copy of the checkout (ignored files, the
    DVC cache among them, are not copied: every job starts empty, as a fresh runner does), the
    remote from secrets, this venv as the runners' toolchain."""
    secrets = [a for k, v in remote.env.items() for a in ("--secret", f"{k}={v}")]
    p = proj.run(
        "act",
        "push",
        "-P",
        "ubuntu-latest=-self-hosted",
        "--json",
        "--no-cache-server",
        "--var",
        f"KOKORO_TVM_VENV={BIN.parent}",
        *secrets,
        check=False,
    )
    run = WorkflowRun(p.stdout)
    assert p.returncode == 0, f"act failed ({p.returncode}): {run.failure()}\n{p.stderr[-3000:]}"
    return run


class S3Server:
    """``rclone serve s3`` on 127.0.0.1 over a temp directory: a real S3 API (signatures, multipart,
    atomic PUTs) for ``dvc-s3``, no mocks. Each subdirectory of ``root`` is a bucket."""

    KEY, SECRET = "kokorotvmci", "kokorotvmci-secret"

    def __init__(self, root: Path, *flags: str):
        import socket
        import time

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = root.parent / f"rclone-{self.port}.log"
        self.proc = subprocess.Popen(
            [
                str(BIN / "rclone"),
                "serve",
                "s3",
                *flags,
                "--addr",
                f"127.0.0.1:{self.port}",
                "--auth-key",
                f"{self.KEY},{self.SECRET}",
                "--config",
                "/dev/null",
                str(root),
            ],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rclone serve s3 did not start: {self.log.read_text()}")
            time.sleep(0.1)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bucket(self, name: str) -> S3Remote:
        """A new bucket, made through the S3 API as a user makes one: a directory made behind the
        server's back stays invisible while its listing cache (``--dir-cache-time``) holds."""
        import botocore.session

        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET,
        )
        client.create_bucket(Bucket=name)
        return S3Remote(self, name)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class S3Remote:
    """One bucket: what a CI job's secrets name (``env``), and the objects as the server stores
    them."""

    def __init__(self, server: S3Server, bucket: str):
        self.server, self.url = server, f"s3://{bucket}/kokoro-tvm"
        self.dir = server.root / bucket / "kokoro-tvm"
        self.env = {
            "DVC_REMOTE_URL": self.url,
            "DVC_REMOTE_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": server.KEY,
            "AWS_SECRET_ACCESS_KEY": server.SECRET,
        }

    def objects(self) -> dict[str, Path]:
        """Content-addressed objects (``files/md5/ab/cdef...``) by hash; rclone's temp files of an
        upload in flight are not objects (S3 shows a PUT only once it is complete)."""
        root = self.dir / "files" / "md5"
        return {p.parent.name + p.name: p for p in root.glob("*/*") if not p.name.startswith(".")}

    def corrupt(self) -> list[str]:
        """Objects whose bytes do not hash to their name (a directory's listing is
        ``<md5>.dir``)."""
        import hashlib

        return [
            key
            for key, p in self.objects().items()
            if hashlib.md5(p.read_bytes()).hexdigest() != key.removesuffix(".dir")
        ]

    def run_records(self) -> list[Path]:
        return (
            sorted(p for p in (self.dir / "runs").rglob("*") if p.is_file())
            if (self.dir / "runs").exists()
            else []
        )


@pytest.fixture
def s3(tmp_path) -> S3Server:
    """A server of the test's own, in its temp dir: each test pushes the whole project into a
    bucket, which goes with the test when it passes (a server kept all run kept every bucket)."""
    server = S3Server(tmp_path / "s3")
    yield server
    server.stop()
