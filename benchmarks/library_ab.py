"""One component's library at two revisions, on real phonemes: same outputs? how much faster?

usage: python benchmarks/library_ab.py OLD_REV [NEW_REV] [--component duration] [--bucket 512]
           [--target x86_64_v4] [--phonemes 30 126 510] [--rounds 11] [--threads 2]

Each revision's library comes out of the DVC cache through that commit's ``dvc.lock`` (the
outputs of ``build_…@<component>-<bucket>-<target>``), so the script needs the cache that built
them, not a checkout of either; NEW_REV defaults to the working tree's ``artifacts/``. The
weights, voice and planner are the working tree's (``dvc repro`` ran). Per phoneme count
(``eval.samples``, voice ``jf_alpha``) the runtime plans one chunk, both libraries take the same
inputs, and the script prints the largest absolute difference of each output and the medians
of ``--rounds`` interleaved calls (old, new, old, new, ...) with the load average.
Components: ``duration`` and ``text_encoder`` (the decoder has ``decoder_threads.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import yaml

from kokoro_tvm import artifacts

ROOT = Path(__file__).resolve().parents[1]


def library_at(rev: str, component: str, bucket: int, target: str, into: Path) -> Path:
    """An artifacts root under ``into`` holding ``rev``'s library (and its build record) from
    the DVC cache, the working tree's weights beside it."""
    lock = yaml.safe_load(
        subprocess.run(
            ["git", "show", f"{rev}:dvc.lock"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    )
    wanted = {
        f(component, bucket, target).as_posix()
        for f in (artifacts.library_file, artifacts.build_info_file)
    }
    outs = {
        o["path"]: o["md5"]
        for st in lock["stages"].values()
        for o in st.get("outs", [])
        if o["path"] in wanted
    }
    if set(outs) != wanted:
        raise SystemExit(f"{rev}'s dvc.lock has no build of {component}-{bucket} for {target}")
    root = into / rev
    for path, md5 in outs.items():
        cached = ROOT / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
        if not cached.exists():
            raise SystemExit(f"{path} of {rev} is not in the DVC cache ({cached}): `dvc pull` it")
        dest = root / Path(path).relative_to(artifacts.ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached, dest)
    artifacts.weights_dir(root).symlink_to(ROOT / artifacts.weights_dir())
    return root


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("old_rev")
    ap.add_argument(
        "new_rev", nargs="?", default=None, help="default: the working tree's artifacts/"
    )
    ap.add_argument("--component", choices=("duration", "text_encoder"), default="duration")
    ap.add_argument("--bucket", type=int, default=512)
    ap.add_argument("--target", default="x86_64_v4")
    ap.add_argument("--phonemes", type=int, nargs="+", default=[30, 126, 510])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    from kokoro_tvm import KokoroTVM
    from kokoro_tvm.eval import samples
    from kokoro_tvm.eval.timing import time_interleaved
    from kokoro_tvm.runtime import planner
    from kokoro_tvm.runtime.built import Built, load_built

    tts = KokoroTVM.from_manifest(ROOT / artifacts.ROOT, num_threads=a.threads)
    pack = tts.voice_pack("jf_alpha")
    with tempfile.TemporaryDirectory() as tmp:
        roots = {
            "old": library_at(a.old_rev, a.component, a.bucket, a.target, Path(tmp)),
            "new": library_at(a.new_rev, a.component, a.bucket, a.target, Path(tmp))
            if a.new_rev
            else ROOT / artifacts.ROOT,
        }
        which = Built(a.component, a.bucket, a.target)
        libs = {k: load_built(r, which) for k, r in roots.items()}
        for n in a.phonemes:
            (chunk,) = tts.plan(samples.phonemes(n), pack)
            ids = planner.token_input(chunk.input_ids, libs["old"])
            inputs = [ids, np.array([chunk.n_tokens])]
            if a.component == "duration":
                inputs.append(chunk.style[:, chunk.style.shape[1] // 2 :])
            args = {k: lib.device_args(*inputs) for k, lib in libs.items()}
            outs = {k: [x.numpy() for x in libs[k].vm["main"](*args[k])] for k in libs}
            diff = [
                float(np.abs(o.astype("float64") - w).max())
                for o, w in zip(outs["old"], outs["new"])
            ]
            ms = time_interleaved(
                {k: (lambda k=k: libs[k].vm["main"](*args[k])) for k in libs}, a.rounds, warmup=1
            )
            med = {k: round(1e3 * float(np.median(v)), 2) for k, v in ms.items()}
            print(
                f"{a.component}-{a.bucket} {a.target}, {chunk.n_tokens} tokens: old {med['old']} "
                f"ms, new {med['new']} ms, new/old {med['new'] / med['old']:.3f}; max |diff| per "
                f"output {diff}; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
