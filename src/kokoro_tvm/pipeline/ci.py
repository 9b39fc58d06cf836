"""What the CI workflow (``.github/workflows/build.yml``) runs between its ``dvc`` calls.

The workflow fans one DVC graph out over jobs that share a DVC remote and its run-cache:

- ``prepare`` reproduces the stages no target owns (weights, code fingerprints, export, relax,
  legalize, reference), pushes them, and prints the build matrix;
- one ``build`` job per target and length axis (``tokens``: duration + text encoder, ``frames``:
  the decoder, the long one) reproduces its own stages; what ``prepare`` made comes back from the
  run-cache instead of being built again;
- ``gather`` reproduces the rest (the manifest and the stages that read it, the summaries) and
  fails if it had to build a library: every one must come from a build job through the remote.

Every job runs ``dvc repro --pull --allow-missing`` on its stages, then ``push``. DVC does the
distribution; this module only names the stages, configures the remote from the job's secrets,
and turns a failed push into one line that says what to fix.

    python -m kokoro_tvm.pipeline.ci matrix
    python -m kokoro_tvm.pipeline.ci stages shared | TARGET AXIS
    python -m kokoro_tvm.pipeline.ci remote      # from $DVC_REMOTE_URL [$DVC_REMOTE_ENDPOINT_URL]
    python -m kokoro_tvm.pipeline.ci push
    python -m kokoro_tvm.pipeline.ci reused LOG  # gather: no library stage in a repro's log ran
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from .. import artifacts
from ..commands import exit_status
from ..errors import KokoroTVMError
from ..spec import COMPONENTS, FP32, PRECISIONS, Axis

REMOTE = "ci"
#: what the runtime loads: the stage that writes it needs every library, and so do its readers
MANIFEST = artifacts.manifest_file().as_posix()
#: Stages a library's build or check runs in: ``gather`` must find every one of them built.
LIBRARY_KINDS = ("tune", "build", "validate", "bench")
#: DVC of this interpreter's environment, whether or not its ``bin`` is on PATH (a job's step, or a
#: test run as ``.venv/bin/python -m pytest``)
DVC = [sys.executable, "-m", "dvc"]
_RAN = re.compile(r"Running stage '([^']+)'")
#: a narrower precision's suffix on a library's stage item
_NARROW = "(?:" + "|".join(p for p in PRECISIONS if p != FP32) + ")"


class CIError(KokoroTVMError):
    """A CI configuration or remote problem; the message names it and the fix."""


def stage_names(root: Path = Path(".")) -> list[str]:
    out = subprocess.run(
        [*DVC, "stage", "list", "--name-only"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def _item(name: str) -> tuple[str, str]:
    """``kind_axis@item`` -> (``kind_axis``, ``item``); ``("toolchain", "")`` for plain stages."""
    kind, _, item = name.partition("@")
    return kind, item


def after_libraries(root: Path = Path(".")) -> set[str]:
    """The stages that write the manifest or read it (``root/dvc.yaml``): they need every
    library, so ``gather`` runs them."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {
        name
        for name, stage in stages.items()
        if MANIFEST in _paths(stage.get("deps")) | _paths(stage.get("outs"))
    }


def _paths(entries: list | None) -> set[str]:
    """A stage's ``deps``/``outs`` paths (an entry is a path, or a path with options)."""
    return {e if isinstance(e, str) else next(iter(e)) for e in entries or []}


def shared(names: list[str], targets: list[str], root: Path = Path(".")) -> list[str]:
    """The stages no target owns and the per-target jobs all need: built once, by ``prepare``."""
    last = after_libraries(root)
    return [
        n
        for n in names
        if _item(n)[0] not in last
        and not _item(n)[0].startswith(("devices", "bench_summary"))
        and not any(_of_target(_item(n)[1], t) for t in targets)
    ]


def _of_target(item: str, target: str) -> bool:
    """Whether a stage's matrix item (``decoder-1536-x86_64_v4``, or a narrower precision's
    ``decoder-1536-x86_64_v4-bf16``) is one of ``target``'s libraries."""
    return re.fullmatch(rf"[a-z_]+-\d+-{re.escape(target)}(-{_NARROW})?", item) is not None


def owned(names: list[str], target: str, axis: str) -> list[str]:
    """The per-library stages of ``target`` on the length axis ``axis`` (``tokens`` |
    ``frames``)."""
    components = [name for name, c in COMPONENTS.items() if c.axis.value == axis]
    if not components:
        raise CIError(
            f"unknown length axis {axis!r}; choose one of {sorted(a.value for a in Axis)}"
        )
    return [
        n
        for n in names
        if _of_target(_item(n)[1], target) and _item(n)[1].split("-")[0] in components
    ]


def matrix(targets: list[str]) -> dict:
    """GitHub Actions' ``strategy.matrix``: one job per target and axis (the decoder's stages,
    ``frames``, take most of the time, so they get a runner of their own)."""
    return {"include": [{"target": t, "axis": a.value} for t in targets for a in Axis]}


def library_stages_ran(log: str) -> list[str]:
    """Per-library stages (``build_frames@…``; not gather's own ``bench_summary@…`` or
    ``bench_e2e``) that a ``dvc repro`` log shows running, i.e. not restored from the run-cache."""
    kinds = {
        f"{k}_{group}" for k in LIBRARY_KINDS for group in (*(a.value for a in Axis), "narrow")
    }
    return [s for s in _RAN.findall(log) if _item(s)[0] in kinds]


#: Per-request bounds, so a remote that accepts a connection and then says nothing fails a
#: ``dvc repro --pull`` within minutes (with DVC's retries) instead of never.
REMOTE_TIMEOUTS = {
    "s3": {"connect_timeout": "30", "read_timeout": "120"},
    "ssh": {"timeout": "120"},
}


def configure_remote(env: dict[str, str] | None = None, root: Path = Path(".")) -> str:
    """Make the remote named by ``$DVC_REMOTE_URL`` this checkout's default, in
    ``.dvc/config.local`` (never committed). Credentials stay in the environment, where dvc-s3
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) and dvc-ssh (an ssh agent or ``~/.ssh``) read
    them."""
    env = dict(os.environ if env is None else env)
    url = env.get("DVC_REMOTE_URL", "").strip()
    if not url:
        raise CIError(
            "DVC_REMOTE_URL is not set: add it to the repository's secrets "
            "(e.g. s3://bucket/kokoro-tvm; docs/scaling-out.md)"
        )
    dvc = [*DVC, "remote"]
    subprocess.run(
        [*dvc, "add", "--local", "--default", "--force", REMOTE, url], cwd=root, check=True
    )
    for option, value in REMOTE_TIMEOUTS.get(url.split("://", 1)[0], {}).items():
        subprocess.run([*dvc, "modify", "--local", REMOTE, option, value], cwd=root, check=True)
    endpoint = env.get("DVC_REMOTE_ENDPOINT_URL", "").strip()
    if endpoint:  # S3-compatible servers (MinIO, rclone, R2, ...): AWS itself needs none
        subprocess.run(
            [*dvc, "modify", "--local", REMOTE, "endpointurl", endpoint], cwd=root, check=True
        )
    return url


#: A push that takes longer is a remote that never answers (``rclone serve s3 --read-only`` never
#: answers a PUT; dvc then waits for ever): the job fails with the cause instead of its own timeout.
PUSH_TIMEOUT_S = 1800


def push(
    root: Path = Path("."), log: Path | None = None, timeout_s: float = PUSH_TIMEOUT_S
) -> None:
    """``dvc push --run-cache``: outputs and the run records that let other jobs skip the stages.
    DVC's own report of a failure is several lines of retries; this raises one line that names
    the remote, what it answered, and the fix, and keeps DVC's output in ``log``."""
    log = log or root / ".dvc" / "tmp" / "ci-push.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run(
            [*DVC, "push", "--run-cache"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as e:
        log.write_text(_text(e.stdout) + _text(e.stderr))
        raise CIError(
            f"dvc push to remote {_remote_url(root)!r} did not finish in {timeout_s:g} s: the "
            "remote accepts connections but does not answer; check it takes writes (DVC's output "
            f"is in {log})"
        ) from None
    log.write_text(p.stdout + p.stderr)
    if p.returncode == 0:
        print(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "everything is up to date")
        return
    raise CIError(
        f"dvc push to remote {_remote_url(root)!r} failed: {_cause(p.stdout + p.stderr)}. "
        "The remote must accept writes with this job's credentials (secrets DVC_REMOTE_URL, "
        f"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); DVC's output is in {log}"
    )


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def _remote_url(root: Path) -> str:
    p = subprocess.run([*DVC, "remote", "list"], cwd=root, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        name, _, url = line.partition("\t")
        if name.strip() == REMOTE:
            return url.strip()
    return p.stdout.split()[1] if len(p.stdout.split()) > 1 else "(none)"


def _cause(output: str) -> str:
    """The server's answer in DVC's output, e.g.
    ``the server answered AccessDenied to PutObject``."""
    m = re.search(r"An error occurred \((\w+)\) when calling the (\w+) operation", output)
    if m:
        return f"the server answered {m.group(1)} to {m.group(2)}"
    errors = [
        line.removeprefix("ERROR:").strip()
        for line in output.splitlines()
        if line.startswith("ERROR")
    ]
    return errors[0] if errors else "no error message (exit status only)"


def _targets(params: str) -> list[str]:
    from ..params import load

    return list(load(params).targets)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kokoro_tvm.pipeline.ci", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--params", default="params.yaml")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("matrix", help="the build jobs' matrix, as JSON")
    st = sub.add_parser("stages", help="the stages of one job: `shared`, or TARGET AXIS")
    st.add_argument("job", nargs="+")
    sub.add_parser("remote", help="configure the DVC remote from $DVC_REMOTE_URL")
    pu = sub.add_parser("push", help="dvc push --run-cache, one error line on failure")
    pu.add_argument(
        "--timeout-s", type=float, default=PUSH_TIMEOUT_S, help="fail a push that takes longer"
    )
    re_ = sub.add_parser("reused", help="fail if a dvc repro log shows a library stage running")
    re_.add_argument("log", type=Path)
    a = ap.parse_args(argv)
    return exit_status(lambda: _run(a))


def _run(a: argparse.Namespace) -> None:
    if a.cmd == "matrix":
        print(json.dumps(matrix(_targets(a.params))))
    elif a.cmd == "stages":
        names, targets = stage_names(), _targets(a.params)
        if a.job == ["shared"]:
            print(" ".join(shared(names, targets)))
        elif len(a.job) == 2 and a.job[0] in targets:
            print(" ".join(owned(names, *a.job)))
        else:
            raise CIError(
                f"`stages` takes `shared` or TARGET AXIS with TARGET one of {targets}, got {a.job}"
            )
    elif a.cmd == "remote":
        print(f"DVC remote {REMOTE!r}: {configure_remote()}")
    elif a.cmd == "push":
        push(timeout_s=a.timeout_s)
    elif a.cmd == "reused":
        ran = library_stages_ran(a.log.read_text())
        if ran:
            raise CIError(
                f"gather built {len(ran)} library stage(s) that a build job should have pushed: "
                f"{', '.join(ran)}. Check that job's `dvc push` step and the remote"
            )
        print("gather built no library: every one came from the remote")


if __name__ == "__main__":
    sys.exit(main())
