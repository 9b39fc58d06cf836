"""Granular caching, seen through ``dvc`` itself, on the tiny config (issue: DVC build graph).

Tests share one built project and run in file order; each states the change it makes and undoes
it, except the added bucket, the one real incremental rebuild. Changes whose rebuild would only
repeat that one (LSTM strategy, checkpoint, target) are checked through ``dvc status``.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import TINY_PARAMS, Project

from kokoro_tvm import artifacts as A
from kokoro_tvm.eval import cold_start
from kokoro_tvm.pipeline.code import kinds

pytestmark = pytest.mark.pipeline  # whole-project tests: `make test`, not `make test-fast`


def _stage_names(proj: Project, *fragments: str) -> set[str]:
    """Stages named with every fragment (the code fingerprint stage aside)."""
    return {s for s in proj.stages() if all(f in s for f in fragments) and s != "code"}


def test_second_repro_runs_no_stage(built_project: Project):
    assert built_project.repro() == set()
    assert built_project.up_to_date()
    status = json.loads(built_project.run("dvc", "status", "--json").stdout)
    assert status == {
        s: ["always changed"] for s in built_project.stages() if s.startswith("devices@")
    }


def test_manifest_lists_every_library(built_project: Project):
    m = json.loads(A.manifest_file(built_project.root / A.ROOT).read_text())
    libs = {(l["component"], l["bucket"], l["target"]) for l in m["libraries"]}
    assert libs == {
        (c, b, "generic") for c, b in [("duration", 8), ("text_encoder", 8), ("decoder", 12)]
    }
    assert m["toolchain"]["llvm_major"] == 22 and m["toolchain"]["torch"] == "2.13.0"
    for lib in m["libraries"]:  # bound to the bytes validation ran
        assert lib["validation"]["library_sha256"] == lib["sha256"]
        assert lib["validation"]["weights_sha256"] == m["weights"][lib["component"]]["sha256"]
    for lib in m["libraries"]:
        so = built_project.root / A.ROOT / lib["path"]
        # weights are inputs: a library is far smaller than its component's weights file
        assert so.stat().st_size < m["weights"][lib["component"]]["bytes"] / 4


def test_bench_cold_times_one_utterance_of_the_largest_bucket(built_project: Project):
    """The tiny model's 8-token bucket holds 6 phonemes of the cold-start sentence: it speaks
    those words, one utterance, not the whole sentence cut into bucket-sized pieces."""
    spoken = json.loads(A.bench_cold_file(built_project.root / A.ROOT).read_text())["input"]
    (tokens,) = built_project.params["buckets"]["tokens"]
    assert spoken["phonemes"] == cold_start.sentence(tokens - 2) != cold_start.SENTENCE


def _changed(proj: Project) -> set[str]:
    return proj.changed()


def _fingerprints(proj: Project) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in A.code_dir(proj.root / A.ROOT).glob("*.json")}


def _edit_code(proj: Project, rel: str) -> tuple[set[str], set[str]]:
    """Append a statement to a package file (a comment would change no fingerprint: code.code_hash)
    and rerun stage ``code`` (what ``dvc repro`` does
    first); returns the stage kinds whose fingerprint changed and the stages DVC then sees
    changed."""
    path = proj.root / "src/kokoro_tvm" / rel
    old, before = path.read_text(), _fingerprints(proj)
    path.write_text(old + "\n_AN_EDIT = 1\n")
    try:
        assert proj.repro("code") == {"code"}
        after = _fingerprints(proj)
        return {k for k in before if after[k] != before[k]}, _changed(proj)
    finally:
        path.write_text(old)
        proj.repro("code")
        assert proj.up_to_date()


def test_editing_a_stage_body_reruns_only_that_stage(built_project: Project):
    """A stage depends on the files it imports: the per-library bench body is read by the
    per-library bench stages alone (the summary and e2e bench have bodies of their own)."""
    ran, changed = _edit_code(built_project, "pipeline/bench.py")
    assert ran == {"bench"}
    expected = _stage_names(built_project, "bench_tokens") | _stage_names(
        built_project, "bench_frames"
    )
    assert expected and changed == expected


def test_editing_a_schedule_rule_reruns_tune_build_and_bench_only(built_project: Project):
    """A rule shapes the kernels of tune and build; validation and what comes after rerun only if
    the library's bytes change (DVC compares the outputs). The bench reruns too: its roofline
    reads the target's lanes and the kernels' reduction blocks through the schedule package. So
    does legalize: it runs its phase through ``compile.phases``, which knows the build phase's
    pass names (a dump may name them), and its output stays the same bytes."""
    ran, changed = _edit_code(built_project, "compile/schedule/conv.py")
    assert ran == {"legalize", "tune", "build", "bench"}
    assert changed == (
        _stage_names(built_project, "legalize")
        | _stage_names(built_project, "tune")
        | _stage_names(built_project, "build")
        | _stage_names(built_project, "bench_tokens")
        | _stage_names(built_project, "bench_frames")
    )


def test_editing_a_module_every_stage_imports_reruns_every_stage(built_project: Project):
    """Negative control of the two above: an edit to the shared base must reach every stage, the
    per-library ones through every fingerprint."""
    ran, changed = _edit_code(built_project, "errors.py")
    assert ran == set(_fingerprints(built_project)) and len(ran) == len(
        kinds(built_project.root / "src")
    )
    # every stage but the devices@ ones, which run on every repro anyway (``Project.changed``)
    assert changed == {s for s in built_project.stages() - {"code"} if not s.startswith("devices@")}


def test_editing_the_runtime_reruns_what_runs_it(built_project: Project):
    """The runtime is imported by the stages that synthesize (bench_e2e, bench_cold, bench_cuts)
    and by those
    that load libraries through its ``library`` module, never by the compile stages: the
    package's lazy ``from kokoro_tvm import KokoroTVM`` must not make every stage depend on it."""
    ran, changed = _edit_code(built_project, "runtime/synthesizer.py")
    assert ran == {"bench_e2e", "bench_cold", "bench_cuts"}
    assert changed == {"bench_e2e", "bench_cold", "bench_cuts"}


def test_temp_files_of_a_killed_write_are_ignored(built_project: Project):
    """A SIGKILLed atomic write leaves its temp file in an output directory; .dvcignore keeps it
    out of that directory's hash, so it neither invalidates nor gets cached."""
    art = built_project.root / A.ROOT
    stray = [
        A.weights_dir(art) / ".decoder.npz.k1ll3d.tmp.npz",
        A.tune_dir("decoder", 12, "generic", art).with_name(".decoder-12.abc.tmp"),
    ]
    stray[0].write_bytes(b"half")
    stray[1].mkdir()
    try:
        assert built_project.up_to_date()
    finally:
        stray[0].unlink()
        stray[1].rmdir()


def test_tampered_library_is_refused_by_the_manifest_stage(built_project: Project):
    lib = A.library_file("text_encoder", 8, "generic", built_project.root / A.ROOT)
    good = lib.read_bytes()
    lib.write_bytes(good + b"\0")
    try:
        p = built_project.run("python", "-m", "kokoro_tvm.pipeline.manifest", check=False)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert "text_encoder-8.so" in p.stderr and "not what was built and validated" in p.stderr
    finally:
        lib.write_bytes(good)
    assert built_project.run("python", "-m", "kokoro_tvm.pipeline.manifest").returncode == 0


def test_lstm_strategy_reruns_relax_onward_not_export(built_project: Project):
    """``lstm.strategy`` is read from the Relax import on: DVC sees every relax stage changed and
    no export stage (the rest follows from the relax outputs, as test_adding_a_bucket shows on a
    real rebuild; checked through ``dvc status`` here to keep the suite short)."""
    p = built_project.params
    p["lstm"]["strategy"] = "loop" if p["lstm"]["strategy"] == "unroll" else "unroll"
    built_project.set_params(p)
    try:
        assert _changed(built_project) == _stage_names(built_project, "relax")
    finally:
        p["lstm"]["strategy"] = TINY_PARAMS["lstm"]["strategy"]
        built_project.set_params(p)
    assert built_project.up_to_date()


@pytest.mark.parametrize("axis", ["tokens", "frames"])
def test_bounded_shapes_rerun_their_axis_exports_onward_only(built_project: Project, axis: str):
    """``shapes.<axis>`` changes the exported graphs of that axis's components and nothing else:
    DVC sees exactly their export stages changed; the rest follows from their outputs. The
    bounded build itself is test_bounded.py's."""
    before, p = built_project.params, built_project.params
    assert p["lstm"]["strategy"] == "loop"  # what a bounded library needs
    p["shapes"][axis] = "bounded"
    built_project.set_params(p)
    try:
        changed = _changed(built_project)
    finally:
        built_project.set_params(before)
    assert changed == _stage_names(built_project, f"export_{axis}") != set()
    assert built_project.up_to_date()


def test_tune_trials_touch_only_tune_stages(built_project: Project):
    """``tune.trials`` is read by the tune stages alone; with 0 they write an empty database,
    which every build applies (nothing), so the default costs no compile."""
    p = built_project.params
    assert p["tune"]["trials"] == 0
    libs = {s.split("@")[1] for s in _stage_names(built_project, "build")}
    for lib in libs:
        component, bucket = lib.rsplit("-", 2)[:2]
        db = A.tune_dir(component, int(bucket), "generic", built_project.root / A.ROOT)
        report = json.loads((db / A.TUNE_REPORT).read_text())
        assert report["trials_per_task"] == 0 and report["kept"] == 0
        assert (db / "database_tuning_record.json").read_text() == ""
    p["tune"]["trials"] = 16
    built_project.set_params(p)
    changed = built_project.changed()
    assert changed == _stage_names(built_project, "tune"), sorted(changed)
    p["tune"]["trials"] = 0
    built_project.set_params(p)
    assert built_project.up_to_date()


def test_bench_lengths_touch_only_bench_e2e(built_project: Project):
    """``bench.phonemes`` picks the end-to-end bench's inputs; the per-library benches read the
    rest of the section (rounds, ONNX Runtime) but not it. Its timed lengths are the param's."""
    p = built_project.params
    rows = json.loads(A.bench_e2e_file(built_project.root / A.ROOT).read_text())
    assert {k for k in rows if k.startswith("phonemes_")} == {
        f"phonemes_{n}" for n in p["bench"]["phonemes"]
    }
    before = p["bench"]["phonemes"]
    p["bench"]["phonemes"] = [4, 20]
    built_project.set_params(p)
    try:
        assert built_project.changed() == {"bench_e2e"}
        p["bench"]["phonemes"] = before
        p["bench"]["repeats"] += 1
        built_project.set_params(p)
        assert built_project.changed() == (
            _stage_names(built_project, "bench_")
            - _stage_names(built_project, "summary")
            - {"bench_cuts"}  # its texts and bounds are its own, not the bench section's
        )
    finally:
        p["bench"]["repeats"] -= 1
        built_project.set_params(p)
    assert built_project.up_to_date()


def test_new_checkpoint_reruns_weights_not_compiles(built_project: Project, tmp_path):
    """Graphs do not depend on weight values: new weights must not recompile anything, but every
    library must be validated and benched again against them. The weights stage really runs;
    DVC then reports which stages its new outputs invalidate."""
    import torch

    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.model.checkpoint import build_kmodel

    km = build_kmodel(load_model_config("tiny"), "random", seed=7)
    ckpt = tmp_path / "tiny.pth"
    torch.save(
        {
            k: getattr(km, k).state_dict()
            for k in ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
        },
        ckpt,
    )
    p = built_project.params
    p["model"]["checkpoint"] = str(ckpt)
    built_project.set_params(p)
    try:
        assert built_project.repro("weights") == {"weights"}
        changed = _changed(built_project)
        compiled = {
            s
            for s in built_project.stages()
            if s.startswith(("export", "relax", "legalize", "tune", "build"))
        }
        assert not changed & compiled, sorted(changed & compiled)
        per_library = (
            _stage_names(built_project, "validate")
            | _stage_names(built_project, "bench_tokens")
            | _stage_names(built_project, "bench_frames")
        )
        assert per_library <= changed, sorted(per_library - changed)
    finally:
        p["model"]["checkpoint"] = TINY_PARAMS["model"]["checkpoint"]
        built_project.set_params(p)
    assert built_project.repro("weights") == set()  # the run-cache restores the old weights
    assert built_project.up_to_date()


def test_adding_a_bucket_runs_only_that_bucket(built_project: Project):
    p = built_project.params
    p["buckets"]["tokens"] = [8, 10]
    built_project.set_params(p)
    ran = built_project.repro()
    expected = (
        _stage_names(built_project, "-10")
        | _stage_names(built_project, "bench_summary")
        | _stage_names(built_project, "bench_e2e")
        | _stage_names(built_project, "bench_cold")
        | _stage_names(built_project, "bench_cuts")
        | {"manifest"}
    )
    assert ran == expected, sorted(ran ^ expected)
    # manifest + bench summary + e2e, cold and cuts benches + (export, relax, legalize, reference,
    # tune, build, validate, bench) x 2
    assert len(expected) == 1 + 1 + 3 + 8 * 2


def test_removing_a_bucket_prunes_only_its_lock_entries(built_project: Project):
    """DVC keeps the dvc.lock entries of stages dvc.yaml no longer defines (treeverse/dvc#5293);
    ``pipeline.lockfile`` drops exactly those, and DVC still sees every other stage as it was."""
    lock = built_project.root / "dvc.lock"
    before = lock.read_bytes()
    p = built_project.params
    assert p["buckets"]["tokens"] == [8, 10]  # left by test_adding_a_bucket
    p["buckets"]["tokens"] = [8]
    built_project.set_params(p)
    try:
        gone = _stage_names(built_project, "-10")
        assert not gone  # dvc.yaml defines none of them now, but the lockfile still holds them
        held = set(yaml.safe_load(before)["stages"])
        stale = {s for s in held if "-10" in s}
        assert len(stale) == 8 * 2
        out = built_project.run("python", "-m", "kokoro_tvm.pipeline.lockfile").stdout
        assert f"dropped {len(stale)} entries" in out
        after = yaml.safe_load(lock.read_bytes())["stages"]
        assert set(after) == held - stale
        assert all(after[s] == yaml.safe_load(before)["stages"][s] for s in after)
        assert (
            built_project.run("python", "-m", "kokoro_tvm.pipeline.lockfile").stdout == ""
        )  # idempotent
        # the removed bucket's outputs left the workspace, the kept ones' did not
        artifacts = built_project.root / A.ROOT
        assert not [f for f in artifacts.rglob("*-10*")]
        assert [f for f in artifacts.rglob("*-8.*")]
        # only the stages that read buckets.tokens (or the manifest's inputs) are out of date;
        # the manifest reads it, so an empty answer (DVC seeing nothing) fails too
        changed = _changed(built_project)
        assert "manifest" in changed and changed <= {"manifest"} | _stage_names(
            built_project, "bench_"
        )
    finally:
        p["buckets"]["tokens"] = [8, 10]
        built_project.set_params(p)
        lock.write_bytes(before)
        built_project.run("dvc", "checkout")  # the removed outputs, back from the cache
    assert built_project.up_to_date()


def test_lock_pruning_refuses_a_pipeline_dvc_cannot_read(tmp_path):
    """Never prune against an empty stage list: a broken dvc.yaml must not empty the lockfile."""
    from kokoro_tvm.errors import KokoroTVMError
    from kokoro_tvm.pipeline import lockfile

    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  a:\n    cmd: x\n")
    with pytest.raises(KokoroTVMError, match="dvc stage list"):
        lockfile.main(tmp_path)
    assert "  a:" in (tmp_path / "dvc.lock").read_text()
