"""Artifacts for runtime/CLI tests: the tiny config at realistic buckets, built once per session.

Runs the very stage bodies DVC calls (``kokoro_tvm.pipeline``), in-process and in stage order,
so the artifact layout and manifest are the pipeline's own (every library validated) without
paying ``dvc``'s per-stage interpreter start-ups. Random tiny weights give ~4 frames per token,
so tokens [6, 12] with frames [16, 32] make short inputs fit, and 10 phonemes already overflow
the frame buckets. The libraries are built as ``params.yaml`` ships them (bounded, loop LSTM); the
DVC tests' project (``conftest.TINY_PARAMS``) is a padded one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml
from run_once import once

RUNTIME_PARAMS = {
    "model": {"config": "tiny", "checkpoint": "random", "seed": 0},
    "buckets": {"tokens": [6, 12], "frames": [16, 32]},
    "lstm": {"strategy": "loop"},
    "shapes": {"tokens": "bounded", "frames": "bounded"},  # what params.yaml ships
    "targets": {"generic": {"kind": "llvm"}},
    "toolchain": {"llvm_major": 22, "kokoro": "0.9.4"},
    "runtime": {"num_threads": 0},
    # a Kokoro-82M voices/ folder the build writes (``write_voice_packs``): one voice per language
    "voices": {"source": "voice-packs"},
}
#: the voices of the runtime tests' project: one per language Kokoro speaks, and a second
#: American one to blend with
TEST_VOICES = (
    "af_heart",
    "am_adam",
    "bf_emma",
    "ef_dora",
    "ff_siwis",
    "hf_alpha",
    "if_sara",
    "jf_alpha",
    "pf_dora",
    "zf_xiaobei",
)


def write_voice_packs(folder: Path, names=TEST_VOICES, width: int = 256) -> Path:
    """Seeded random voice packs [510, 1, width] as Kokoro-82M ships them (``voices/<name>.pt``,
    ``torch.save``); a different pack per name."""
    import zlib

    import numpy as np
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        pack = 0.3 * rng.standard_normal((1, 1, width)) + 0.02 * rng.standard_normal(
            (510, 1, width)
        )
        torch.save(torch.from_numpy(pack.astype(np.float32)), folder / f"{name}.pt")
    return folder


#: artifact folders a test that edits the manifest, a library or the voices reads unchanged
SHARED = ("weights", "packed")


def artifacts_copy(src: Path, dst: Path, share: tuple[str, ...] = SHARED, ignore=None) -> Path:
    """A copy of the artifacts ``src`` for a test to edit, except ``share``: those top folders
    (most of the bytes) are links to ``src``'s, so a suite of such tests does not fill the disk
    with copies. Writing through a link would change the shared build for every later test: a
    test that edits a file under one of them leaves that folder out of ``share``. ``ignore``:
    as ``shutil.copytree``'s."""
    import shutil

    linked: list[str] = []

    def skip(folder: str, names: list[str]) -> set[str]:
        own = set(ignore(folder, names)) if ignore is not None else set()
        if Path(folder) == src:
            linked.extend(n for n in share if n in names and n not in own and (src / n).is_dir())
        return own | set(linked)

    shutil.copytree(src, dst, ignore=skip)
    for name in linked:
        (dst / name).symlink_to((src / name).resolve(), target_is_directory=True)
    return dst


def _graph_files(component: str, bucket: int, root: Path) -> list[Path]:
    """What the stages before build make of one (component, bucket): the same for every target."""
    from kokoro_tvm import artifacts

    return [
        f(component, bucket, root)
        for f in (
            artifacts.export_file,
            artifacts.relax_file,
            artifacts.signature_file,
            artifacts.legalized_file,
            artifacts.reference_file,
        )
    ]


def build_artifacts(root: Path, params: dict = RUNTIME_PARAMS, reuse: Path | None = None) -> Path:
    """Build every library of ``params`` under ``root/artifacts``; returns that directory.

    ``reuse``: an artifact directory built from the same model and shapes (``RUNTIME_PARAMS``' for
    another target): its weights and the graphs and references of the buckets it has are copied,
    not made again; what is left of the stages (build, validate) runs for ``params``' targets."""
    import shutil

    from kokoro_tvm import artifacts
    from kokoro_tvm.pipeline import (
        build,
        devices,
        export,
        legalize,
        manifest,
        reference,
        relax,
        toolchain,
        validate,
        voices,
        weights,
    )
    from kokoro_tvm.pipeline.common import setup
    from kokoro_tvm.spec import COMPONENTS

    if reuse is not None:
        theirs = yaml.safe_load((reuse.parent / "params.yaml").read_text())
        assert all(theirs[k] == params[k] for k in ("model", "lstm", "shapes")), (
            "reuse: another model or shapes"
        )
    params = {"voices": {"source": "none"}, **params}  # never npm's: tests stay offline
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with contextlib.chdir(root):
        prm = setup("params.yaml")
        toolchain.run(prm)
        if reuse is not None:
            shutil.copytree(artifacts.weights_dir(reuse), artifacts.weights_dir())
        else:
            weights.run(prm)
        for target in prm.targets:
            devices.run(prm, target)
        if prm.voices.source == RUNTIME_PARAMS["voices"]["source"]:
            write_voice_packs(Path(prm.voices.source))
        voices.run(prm)  # before reference, which reads the validation sentences' voices
        for component in COMPONENTS:
            for bucket in prm.buckets.of(component):
                kept = _graph_files(component, bucket, reuse) if reuse is not None else []
                if kept and all(f.exists() for f in kept):
                    for f, to in zip(kept, _graph_files(component, bucket, artifacts.ROOT)):
                        to.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(f, to)
                else:
                    export.run(prm, component, bucket)
                    relax.run(prm, component, bucket)
                    legalize.run(prm, component, bucket)
                    reference.run(prm, component, bucket)
                for target in prm.targets:
                    build.run(prm, component, bucket, target)
                    validate.run(prm, component, bucket, target)
        manifest.run(prm)
    return root / artifacts.ROOT


def runtime_artifacts(tmp_path_factory) -> Path:
    """The shared build: one per test run, whichever module asks first (``run_once.once``: one
    for every pytest-xdist worker too); tests that change artifacts change a copy.

    ``KOKORO_TVM_TEST_ARTIFACTS=dir`` reuses a directory built by ``build_artifacts`` (while
    iterating on runtime code; the code under test must not have changed the graphs)."""
    from kokoro_tvm import artifacts

    if os.environ.get("KOKORO_TVM_TEST_ARTIFACTS"):
        return Path(os.environ["KOKORO_TVM_TEST_ARTIFACTS"])
    tree = once(
        tmp_path_factory, "runtime", lambda root: build_artifacts(root / "repo"), copy=False
    )
    return tree / "repo" / artifacts.ROOT
