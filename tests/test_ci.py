"""CI on a real remote: ``rclone serve s3`` on 127.0.0.1 with ``dvc-s3`` as the client, the helpers
the workflow runs (``kokoro_tvm.pipeline.ci``), and faults: concurrent pushes, a push killed
mid-upload, a remote that refuses writes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    BIN,
    FIRST_RUN_LOG,
    Project,
    S3Remote,
    S3Server,
    WorkflowRun,
    build_tiny,
    run_workflow,
)
from run_once import once

from kokoro_tvm import artifacts as A
from kokoro_tvm.pipeline import ci

pytestmark = pytest.mark.pipeline  # whole-project tests: `make test`, not `make test-fast`


def job_checkout(proj: Project, root: Path, remote: S3Remote, share_cache: bool = True) -> Project:
    """A CI job's checkout of ``proj``'s last commit, its remote configured the way the workflow's
    setup step does (from the job's secrets). ``share_cache``: the job has built what ``proj`` has
    (it uses ``proj``'s DVC cache); otherwise it starts empty, as a fresh runner does."""
    job = checkout(proj, root)
    if share_cache:
        job.run("dvc", "cache", "dir", "--local", str(proj.root / ".dvc" / "cache"))
    job.run("python", "-m", "kokoro_tvm.pipeline.ci", "remote", env=remote.env)
    return job


def checkout(proj: Project, root: Path) -> Project:
    """A clone of ``proj`` as it is now (committed first): the tree a CI run checks out."""
    proj.run("git", "add", "-A")
    proj.run("git", "commit", "-qm", "state before the job", "--allow-empty")
    proj.run("git", "clone", "-q", str(proj.root), str(root))
    return Project(root)


def push(job: Project, remote: S3Remote, check: bool = True):
    return job.run("python", "-m", "kokoro_tvm.pipeline.ci", "push", env=remote.env, check=check)


def test_s3_round_trip_rebuilds_nothing_on_a_fresh_clone(
    built_project: Project, s3: S3Server, tmp_path
):
    remote = s3.bucket("roundtrip")
    push(job_checkout(built_project, tmp_path / "laptop", remote), remote)
    assert remote.objects() and remote.run_records() and not remote.corrupt()
    fresh = job_checkout(built_project, tmp_path / "fresh", remote, share_cache=False)
    # Without dvc.lock, only the run-cache can tell DVC these stages were built before.
    fresh.run("git", "rm", "-q", "dvc.lock")
    ran = fresh.repro("--pull", env=remote.env)
    assert ran == set(), f"a fresh clone rebuilt {sorted(ran)}"
    assert (
        A.manifest_file(fresh.root / A.ROOT).read_bytes()
        == A.manifest_file(built_project.root / A.ROOT).read_bytes()
    )


def test_concurrent_pushes_leave_one_good_copy(built_project: Project, s3: S3Server, tmp_path):
    remote = s3.bucket("concurrent")
    jobs = [job_checkout(built_project, tmp_path / f"job{i}", remote) for i in range(2)]
    procs = [
        j.start("python", "-m", "kokoro_tvm.pipeline.ci", "push", env=remote.env) for j in jobs
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert not remote.corrupt() and not list(remote.dir.rglob(".rclone_temp*"))
    # every object the outputs need is there, once: content-addressed keys cannot hold two copies
    fresh = job_checkout(built_project, tmp_path / "fresh", remote, share_cache=False)
    fresh.run("git", "rm", "-q", "dvc.lock")
    assert fresh.repro("--pull", env=remote.env) == set()


def test_a_push_killed_mid_upload_leaves_nothing_half_written(
    built_project: Project, s3: S3Server, tmp_path
):
    remote = s3.bucket("killed")
    job = job_checkout(built_project, tmp_path / "job", remote)
    proc = job.start("dvc", "push", "--run-cache", env=remote.env)
    deadline = time.monotonic() + 120
    while not list(remote.dir.rglob(".rclone_temp*")):  # an upload in flight
        assert proc.poll() is None, "the push finished before it could be killed mid-upload"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    # The server drops a broken single PUT's temp file once it sees the connection go. A large
    # object goes up in parts: an incomplete multipart upload stays, invisible, until aborted,
    # as on S3 (hence S3's lifecycle rule for them). Neither is ever an object.
    def single_put_temps() -> list[Path]:
        return [
            p
            for p in remote.dir.rglob(".rclone_temp*")
            if not p.name.startswith(".rclone_temp_multipart")
        ]

    deadline = time.monotonic() + 30
    while single_put_temps() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not remote.corrupt(), "a killed upload left a half-written object"
    assert not single_put_temps()
    # the next run completes, and a fresh runner pulls good bytes only
    push(job, remote)
    assert not remote.corrupt()
    fresh = job_checkout(built_project, tmp_path / "fresh", remote, share_cache=False)
    fresh.run("git", "rm", "-q", "dvc.lock")
    assert fresh.repro("--pull", env=remote.env) == set()
    assert fresh.changed() == set()


def test_a_remote_that_refuses_writes_is_one_error_line(
    built_project: Project, s3: S3Server, tmp_path
):
    """The remote refuses this job's writes (a key it does not know: a rotated or mistyped
    secret): one line naming the remote, its answer and what to fix; DVC's own output is kept.
    (``rclone serve s3 --read-only`` would be the closer fake, but it never answers a PUT, and
    ``dvc push`` then waits for ever; a real S3 answers AccessDenied.)"""
    remote = s3.bucket("refusing")
    job = job_checkout(built_project, tmp_path / "job", remote)
    p = job.run(
        "python",
        "-m",
        "kokoro_tvm.pipeline.ci",
        "push",
        check=False,
        env=remote.env | {"AWS_ACCESS_KEY_ID": "rotated-key"},
    )
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(
        f"error: dvc push to remote '{remote.url}' failed: the server answered InvalidAccessKeyId"
    )
    assert "accept writes" in lines[0] and "AWS_ACCESS_KEY_ID" in lines[0]
    assert (job.root / ".dvc/tmp/ci-push.log").read_text().count("ERROR")  # DVC's own words, kept
    assert not remote.objects()  # nothing was written


def test_a_remote_that_never_answers_is_one_error_line_in_bounded_time(
    built_project: Project, tmp_path
):
    """A remote that accepts connections and answers nothing (a listening socket nobody reads):
    dvc would wait for ever; the push fails after its timeout, in one line that says so.
    Negative control of the bound: the refusing remote above fails at once, without it."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshakes; nothing ever reads a request
        env = {
            "DVC_REMOTE_URL": "s3://silent/cache",
            "DVC_REMOTE_ENDPOINT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "AWS_ACCESS_KEY_ID": "key",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
        job = checkout(built_project, tmp_path / "job")
        job.run("python", "-m", "kokoro_tvm.pipeline.ci", "remote", env=env)
        t0 = time.monotonic()
        p = job.run(
            "python",
            "-m",
            "kokoro_tvm.pipeline.ci",
            "push",
            "--timeout-s",
            "10",
            env=env,
            check=False,
        )
        assert time.monotonic() - t0 < 40
    assert p.returncode == 1
    (line,) = p.stderr.strip().splitlines()
    assert (
        line.startswith("error: dvc push to remote 's3://silent/cache' did not finish in 10 s")
        and "does not answer" in line
    )


def test_missing_remote_secret_is_a_clear_error(built_project: Project, tmp_path):
    job = checkout(built_project, tmp_path / "job")
    p = job.run(
        "python", "-m", "kokoro_tvm.pipeline.ci", "remote", env={"DVC_REMOTE_URL": ""}, check=False
    )
    assert p.returncode == 1 and "DVC_REMOTE_URL is not set" in p.stderr


def test_job_stages_partition_the_library_stages(built_project: Project):
    """prepare + one job per target and axis own every stage but the gather job's, each once."""
    names = ci.stage_names(built_project.root)
    targets = list(built_project.params["targets"])
    jobs = [ci.shared(names, targets, built_project.root)] + [
        ci.owned(names, m["target"], m["axis"]) for m in ci.matrix(targets)["include"]
    ]
    owned = [n for job in jobs for n in job]
    assert len(owned) == len(set(owned)), "a stage belongs to two jobs"
    rest = set(names) - set(owned)
    assert rest == {"manifest", "bench_e2e", "bench_cold", "bench_cuts"} | {
        f"{k}@{t}" for k in ("devices", "bench_summary") for t in targets
    }
    assert "build_frames@decoder-12-generic" in ci.owned(names, "generic", "frames")
    assert ci.owned(names, "generic", "tokens") and ci.owned(names, "elsewhere", "frames") == []
    with pytest.raises(ci.CIError, match="unknown length axis"):
        ci.owned(names, "generic", "decoder")


def test_gather_check_fails_on_a_library_built_there():
    cached = (
        "Stage 'build_frames@decoder-12-generic' is cached - skipping run, checking out outputs\n"
    )
    gathers_own = "".join(
        f"Running stage '{s}':\n" for s in ("manifest", "bench_summary@generic", "bench_e2e")
    )
    assert ci.library_stages_ran(cached + gathers_own) == []
    assert ci.library_stages_ran("Running stage 'validate_tokens@duration-8-generic':\n") == [
        "validate_tokens@duration-8-generic"
    ]


def test_the_workflow_fans_out_and_gather_rebuilds_nothing(tmp_path_factory, tmp_path):
    """The shipped workflow on the tiny pipeline, from nothing (its first run is the shared build,
    ``conftest.build_tiny``): ``prepare`` builds the shared stages, the per-target jobs build their
    libraries at the same time, ``gather`` restores them all from the remote; a second run with
    nothing changed builds nothing anywhere."""
    root = once(tmp_path_factory, "pipeline", build_tiny, copy=True, into=tmp_path / "own")
    first = WorkflowRun((root / FIRST_RUN_LOG).read_text())
    proj = Project(root / "repo")
    jobs = set(first.ran)
    builds = sorted(j for j in jobs if j.startswith("build/"))
    assert builds == ["build/frames/generic", "build/tokens/generic"], jobs
    assert {"prepare", "gather"} <= jobs
    # each build job built its own libraries, and nothing a neighbour or prepare owns
    for job in builds:
        _, axis, target = job.split("/")
        owned = set(ci.owned(sorted(proj.stages()), target, axis))
        assert first.built(job) and first.built(job) <= owned, (job, first.built(job))
        assert {s for s in owned if s.startswith("build_")} <= first.built(job)
    assert not first.built("prepare") & {s for j in builds for s in first.built(j)}
    # ... at the same time: each started before the other ended
    (a0, a1), (b0, b1) = (first.span[j] for j in builds)
    assert a0 < b1 and b0 < a1, f"the build jobs ran one after the other: {first.span}"
    # gather made the manifest from libraries it pulled, and its own check found no library built
    assert "manifest" in first.built("gather")
    assert not ci.library_stages_ran("\n".join(f"Running stage '{s}'" for s in first.ran["gather"]))
    assert "gather built no library" in first.log

    server = S3Server(root / "s3")  # the remote the first run pushed to
    try:
        remote = S3Remote(server, "workflow")
        assert remote.objects() and not remote.corrupt()
        second = run_workflow(proj, remote)
    finally:
        server.stop()
    assert {j: second.built(j) for j in second.ran} == {j: set() for j in second.ran}


def test_a_failed_workflow_run_names_its_failing_step(tmp_path):
    """``act``'s own JSON log of a workflow whose second step fails, read as the workflow test
    reads a run: the failure names the step and shows that job's lines, whatever came before
    (the control: a run with no failure names none)."""
    repo = tmp_path / "repo"
    (repo / ".github/workflows").mkdir(parents=True)
    (repo / ".github/workflows/x.yml").write_text(
        "on: push\njobs:\n  one:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - name: fine step\n        run: echo hello\n"
        "      - name: the failing step\n        run: echo about to fail; exit 3\n"
    )
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    act = [shutil.which("act", path=str(BIN)) or "act", "push", "-P", "ubuntu-latest=-self-hosted"]
    p = subprocess.run([*act, "--json"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    run = WorkflowRun("\n".join(["{}"] * 5000 + [p.stdout]))  # a long log before it
    assert run.failed == ["one: the failing step"]
    shown = run.failure()
    assert "failed steps: one: the failing step" in shown and "exit status 3" in shown
    assert WorkflowRun("").failure() == "failed steps: none reported"
