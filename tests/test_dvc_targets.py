"""Targets and the CPU under a cache, seen through ``dvc`` itself, on the tiny config (issue 26).

A module of its own, on a copy of the shared build of its own: the longest whole-pipeline test,
it runs beside ``test_dvc_graph`` on another pytest-xdist worker, and on the project as built
(``test_dvc_graph`` leaves a second token bucket behind, which would double what a new target
builds here).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator

import pytest
from conftest import Project, build_tiny
from run_once import once

from kokoro_tvm import artifacts as A

pytestmark = pytest.mark.pipeline  # whole-project tests: `make test`, not `make test-fast`


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Iterator[Project]:
    root = once(tmp_path_factory, "pipeline", build_tiny, copy=True)
    yield Project(root / "repo")
    shutil.rmtree(root, ignore_errors=True)  # a copy of the whole pipeline: not kept all run


#: a CPU without AVX (SSE4.2 at most): x86-64-v3 libraries cannot run on it
#: the manifest's stage and the stages that read the manifest and artifacts/build
READERS = {"manifest", "bench_e2e", "bench_cold", "bench_cuts"}
SSE_ONLY = "fpu cmov cx8 mmx fxsr sse sse2 pni ssse3 cx16 sse4_1 sse4_2 popcnt lahf_lm"


def test_targets_and_the_cpu_rerun_exactly_their_stages(project: Project, tmp_path):
    """A new target runs its own stages only. On a CPU that lacks its ISA it is built but not
    validated: the repro still succeeds, says so in one line, and the manifest leaves it out. The
    same cache on a CPU that has the ISA reruns exactly that
    target's validations (and what reads them); the other target's stay cached. Removing the
    target leaves the other stages as they were."""
    proj, p = project, project.params
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {SSE_ONLY}\n")
    old_cpu = {"KOKORO_TVM_CPUINFO": str(cpuinfo)}
    p["targets"]["v3"] = {"kind": "llvm", "mcpu": "x86-64-v3"}
    proj.set_params(p)
    try:
        own = {
            s for s in proj.stages() if s.endswith(("-v3", "@v3")) and not s.startswith("devices@")
        }
        libraries = 2 * len(p["buckets"]["tokens"]) + len(p["buckets"]["frames"])
        assert (
            len(own) == 4 * libraries + 1
        )  # (tune, build, validate, bench) per library + bench summary
        out = proj.run("dvc", "repro", env=old_cpu).stdout
        ran = {
            s for s in re.findall(r"Running stage '([^']+)'", out) if not s.startswith("devices@")
        }
        assert ran == own | READERS, sorted(ran)
        (line,) = [l for l in out.splitlines() if l.startswith("v3: built but NOT validated")]
        assert "lacks avx" in line and "Fix:" in line
        m = json.loads(A.manifest_file(proj.root / A.ROOT).read_text())
        assert {l["target"] for l in m["libraries"]} == {"generic"} and "v3" in m["unvalidated"]
        # the cache on this CPU, which runs v3: only v3's validations and what reads them rerun,
        # and its tune stages, which measure on the device (trials 0: the same empty database,
        # so no library is rebuilt)
        ran = proj.repro()
        validations = {s for s in own if s.startswith(("tune_", "validate_", "bench_"))}
        assert ran == validations | READERS, sorted(ran)
        m = json.loads(A.manifest_file(proj.root / A.ROOT).read_text())
        assert {l["target"] for l in m["libraries"]} == {"generic", "v3"} and not m["unvalidated"]
    finally:
        del p["targets"]["v3"]
        proj.set_params(p)
    proj.run("python", "-m", "kokoro_tvm.pipeline.lockfile")
    # the manifest listed v3's libraries, and the e2e and cold benches read artifacts/build (v3's
    # folder left it)
    assert proj.changed() == READERS
    assert proj.repro() <= READERS and proj.up_to_date()  # or restored from the run-cache
