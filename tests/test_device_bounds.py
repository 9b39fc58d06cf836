"""Faults with bounds: a remote device that stops answering, a silent DVC remote and a stuck CI
job each end in a clear error within minutes instead of holding the run for ever."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from kokoro_tvm.pipeline import ci

REPO = Path(__file__).resolve().parents[1]
HANG = """
import time
from kokoro_tvm.devices import watchdog
with watchdog.deadline("the board 'pi5' of the tracker 10.0.0.2:9190", {bound}):
    time.sleep({sleep})
print("returned")
"""


def _run(bound: float, sleep: float) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", HANG.format(bound=bound, sleep=sleep)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p, time.monotonic() - t0


def test_a_silent_device_ends_the_process_with_one_error_line():
    p, took = _run(bound=0.5, sleep=30)
    assert p.returncode == 1 and took < 10, (p, took)
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: the board 'pi5' of the tracker 10.0.0.2:9190 did not answer")
    assert "KOKORO_TVM_RPC_CALL_TIMEOUT" in line and "returned" not in p.stdout
    # control: a call that answers in time is left alone
    p, _ = _run(bound=5, sleep=0.1)
    assert p.returncode == 0 and p.stdout.strip() == "returned" and not p.stderr


def test_every_workflow_job_has_a_time_limit():
    workflow = yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())
    limits = {name: job.get("timeout-minutes") for name, job in workflow["jobs"].items()}
    assert all(isinstance(m, int) and 0 < m <= 360 for m in limits.values()), limits


def test_the_remote_gets_request_timeouts(tmp_path):
    """``ci remote`` writes DVC's per-request timeouts for S3 and SSH remotes."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*ci.DVC, "init", "-q"], cwd=tmp_path, check=True)
    ci.configure_remote({"DVC_REMOTE_URL": "s3://bucket/prefix"}, tmp_path)
    config = (tmp_path / ".dvc" / "config.local").read_text()
    assert "read_timeout = 120" in config and "connect_timeout = 30" in config
    ci.configure_remote({"DVC_REMOTE_URL": "ssh://user@host/path"}, tmp_path)
    assert "timeout = 120" in (tmp_path / ".dvc" / "config.local").read_text()
