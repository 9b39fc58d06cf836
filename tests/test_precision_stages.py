"""Precision as a pipeline axis, seen through DVC on the tiny pipeline: ``precision.decoder``
adds the narrow stages of every frames bucket and target and nothing else; a target whose ISA
cannot run bf16 (the tiny pipeline's generic LLVM target has no AVX-512) builds none, says why in
one line, and keeps float32 in the manifest; float32's libraries stay the bytes they were."""

from __future__ import annotations

import json
import re

from conftest import Project

from kokoro_tvm import artifacts as A
from kokoro_tvm.pipeline import ci


def _library_bytes(proj: Project) -> dict[str, bytes]:
    return {
        p.relative_to(proj.root).as_posix(): p.read_bytes()
        for p in A.build_dir(proj.root / A.ROOT).rglob("*.so")
    }


def test_bf16_adds_its_stages_only_and_a_target_without_the_isa_builds_none(
    built_project: Project,
):
    proj, p = built_project, built_project.params
    before = _library_bytes(proj)
    manifest_before = A.manifest_file(proj.root / A.ROOT).read_bytes()
    assert p["precision"] == {"decoder": []}  # float32 only, as the tiny pipeline was built
    p["precision"] = {"decoder": ["bf16"]}
    proj.set_params(p)
    try:
        narrow = {s for s in proj.stages() if "_narrow" in s}
        frames, targets = p["buckets"]["frames"], p["targets"]
        assert len(narrow) == len(frames) * (
            1 + 3 * len(targets)
        )  # legalize; build, validate, bench
        # CI: prepare legalizes it once; the target's frames job builds, validates and benches it
        names = ci.stage_names(proj.root)
        shared = ci.shared(names, list(targets), proj.root)
        framed = {n for t in targets for n in ci.owned(names, t, "frames")}
        assert {n for n in narrow if n.startswith("legalize_")} <= set(shared)
        assert {n for n in narrow if not n.startswith("legalize_")} <= framed
        assert not framed & set(shared)
        built = f"build_narrow@decoder-{frames[0]}-generic-bf16"
        assert ci.library_stages_ran(f"Running stage '{built}':\n") == [built]
        out = proj.run("dvc", "repro").stdout
        ran = {s for s in re.findall(r"Running stage '([^']+)'", out) if "devices@" not in s}
        readers = {"manifest", "bench_e2e", "bench_cold", "bench_cuts"}
        # the manifest's params include `precision`; its readers rerun only if its bytes change
        assert narrow <= ran and ran - narrow <= readers, sorted(ran)
        (line,) = [l for l in out.splitlines() if l.startswith("manifest: decoder bf16 on generic")]
        assert "no AVX-512" in line
        art = proj.root / A.ROOT
        narrow_info = A.build_info_file("decoder", frames[0], "generic", art, precision="bf16")
        build = json.loads(narrow_info.read_text())
        assert build["built"] is False and "no AVX-512" in build["reason"]
        assert not list((A.build_dir(art) / "generic").glob("decoder-*-bf16/*.so"))
        m = json.loads(A.manifest_file(proj.root / A.ROOT).read_text())
        assert all(lib.get("precision", "fp32") == "fp32" for lib in m["libraries"])
        assert A.manifest_file(proj.root / A.ROOT).read_bytes() == manifest_before
        assert _library_bytes(proj) == before  # float32's libraries untouched
        assert proj.repro() == set()
    finally:
        p["precision"] = {"decoder": []}
        proj.set_params(p)
    assert proj.repro() <= {"manifest"} and proj.up_to_date()
    # DVC keeps the lock entries of the stages the empty list removed; the lockfile prunes them
    # (as `make repro` does), leaving the project as the other tests expect it
    out = proj.run("python", "-m", "kokoro_tvm.pipeline.lockfile").stdout
    assert f"dropped {len(narrow)} entries" in out
