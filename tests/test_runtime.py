"""Runtime: chunking, host alignment, voices, errors, and end-to-end parity with eager kokoro.

Parity compares ``KokoroTVM.synthesize`` with ``KModel.forward_with_tokens`` on the same weights,
chunks and decoder draws (``kokoro_tvm.e2e``). Libraries come from ``runtime_project`` (tiny
config, tokens [6, 12], frames [16, 32]); the decoder runs unscheduled, so decoder calls are few.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from runtime_project import RUNTIME_PARAMS, artifacts_copy, runtime_artifacts

from kokoro_tvm import artifacts as A
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.e2e import compare
from kokoro_tvm.eval.eager import as_float64
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.runtime import alignment, chunking, seams, voices
from kokoro_tvm.runtime.synthesizer import BucketError, KokoroTVM
from kokoro_tvm.toolchain import ToolchainError

# Kokoro phonemes (misaki output for a few English sentences).
TEXT = (
    "kˈOkəɹO ɪz ɐn ˈOpən wˈAt tˌitˌiˈɛs mˈɑdᵊl, wɪð ˈATi tˈu mˈɪljən pəɹˈæməTəɹz. dəspˈIt ɪts "
    "lˈItwˌAt ˈɑɹkətˌɛkʧəɹ, ɪt dəlˈɪvəɹz kˈɑmpəɹəbᵊl kwˈɑləTi; wˌIl bˈiɪŋ fˈæstəɹ!"
)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def tts(artifacts) -> KokoroTVM:
    return KokoroTVM.from_manifest(artifacts)


@pytest.fixture(scope="module")
def km():
    m = RUNTIME_PARAMS["model"]
    return build_kmodel(load_model_config(m["config"]), m["checkpoint"], m["seed"])


@pytest.fixture(scope="module")
def km64(km):
    return as_float64(km)


def eager_durations(km, phonemes: str, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """kokoro's ``pred_dur`` for one chunk, from its duration path alone (the decoder is slow)."""
    from kokoro_tvm.eval.eager import reference

    ids = torch.from_numpy(chunking.token_ids(phonemes, km.vocab)).unsqueeze(0)
    inputs = (ids, torch.tensor([ids.shape[1]]), torch.from_numpy(style[:, 128:]))
    dur = reference("duration", km, inputs, ids.shape[1], {})[0][0].numpy()
    return alignment.frame_durations(dur, speed)


def eager_frames(km, phonemes: str, style: np.ndarray, speed: float = 1.0) -> int:
    return int(eager_durations(km, phonemes, style, speed).sum())


def find_phonemes(km, lo: int, hi: int, seed: int = 0, max_len: int = 10) -> str:
    """A substring of TEXT, starting at a word, whose frames (one chunk) lie in [lo, hi].

    Random tiny weights give ~4 frames per token, so lengths near ``lo / 4 - 2`` are tried first.
    """
    style = voices.random_style(seed, 256)[0]
    starts = [i for i in range(len(TEXT)) if i == 0 or TEXT[i - 1] == " "]
    guess = max(1, lo // 4 - 2)
    for n in sorted(range(1, max_len + 1), key=lambda n: abs(n - guess)):
        for i in starts:
            ps = TEXT[i : i + n]
            if len(ps.strip()) == n and lo <= eager_frames(km, ps, style) <= hi:
                return ps
    raise AssertionError(f"no substring of TEXT predicts {lo}..{hi} frames")


# -- host code, no libraries --------------------------------------------------------------------


def test_join_keeps_every_sample_and_fades_only_inner_seams():
    a, b = np.ones(1000, np.float32), -np.ones(800, np.float32)
    out = seams.join([a, b])
    assert out.size == 1800
    assert out[0] == 1 and out[-1] == -1  # outer edges untouched
    assert abs(out[999]) < 1e-3 and abs(out[1000]) < 1e-3  # the seam meets near zero
    assert np.count_nonzero(out == 0) == 0  # no inserted silence
    assert np.all(np.abs(np.diff(out)) < 0.03)  # a step of 2 became a smooth ramp


def test_durations_and_alignment_match_kokoro():
    g = torch.Generator().manual_seed(0)
    dur = torch.rand(1, 40, generator=g) * 10
    dur[0, :4] = torch.tensor([2.5, 3.5, 0.2, 0.5])  # ties round to even, minimum 1
    for speed in (1.0, 0.7, 1.3):
        ref = torch.round(dur / speed).clamp(min=1).long().squeeze()
        got = alignment.frame_durations(dur.numpy()[0], speed)
        assert np.array_equal(got, ref.numpy())
        idx = torch.repeat_interleave(torch.arange(40), ref)
        aln = torch.zeros(40, idx.numel())
        aln[idx, torch.arange(idx.numel())] = 1
        x = torch.randn(1, 7, 40, generator=g)
        expanded = alignment.expand(x.numpy(), got, idx.numel() + 5)
        assert np.array_equal(expanded[..., : idx.numel()], (x @ aln).numpy())
        assert not expanded[..., idx.numel() :].any()
    with pytest.raises(ValueError, match="positive"):
        alignment.frame_durations(dur.numpy()[0], 0)


def test_voice_pack_rows_and_shapes(tmp_path):
    pack = torch.randn(510, 1, 256)
    torch.save(pack, tmp_path / "v.pt")
    loaded = voices.load_voice(tmp_path / "v.pt", 256)
    assert loaded.shape == (510, 1, 256)
    assert np.array_equal(voices.style_for(loaded, 7), pack[6].numpy())  # kokoro: pack[len(ps) - 1]
    assert voices.style_for(loaded, 900).shape == (1, 256)
    torch.save(torch.randn(510, 256), tmp_path / "flat.pt")
    with pytest.raises(voices.VoiceError, match=r"shape \[510, 256\]; expected .*\[510, 1, 256\]"):
        voices.load_voice(tmp_path / "flat.pt", 256)
    with pytest.raises(voices.VoiceError, match="does not exist"):
        voices.load_voice(tmp_path / "missing.pt", 256)
    assert voices.check_pack(np.zeros(256), 256).shape == (1, 1, 256)


# -- loading and refusing -----------------------------------------------------------------------


def test_missing_artifact_directory_says_dvc_repro(tmp_path):
    with pytest.raises(ArtifactError, match=r"does not exist; run `dvc repro`"):
        KokoroTVM.from_manifest(tmp_path / "artifacts")


def test_target_not_built_is_refused(artifacts):
    with pytest.raises(
        ArtifactError,
        match=r"target 'x86_avx512' was not built and validated \(validated targets: "
        r"\['generic'\]\); add it to params.yaml 'targets'",
    ):
        KokoroTVM.from_manifest(artifacts, target="x86_avx512")


def test_toolchain_mismatch_is_refused_before_loading(artifacts, tmp_path):
    manifest = json.loads(A.manifest_file(artifacts).read_text())
    manifest["toolchain"]["apache-tvm"] = "0.26.0"
    A.manifest_file(tmp_path).write_text(json.dumps(manifest))
    with pytest.raises(ToolchainError, match="built with apache-tvm 0.26.0 but 0.27"):
        KokoroTVM.from_manifest(tmp_path)


def test_tampered_library_is_refused(artifacts, tmp_path):
    copy = tmp_path / "artifacts"
    artifacts_copy(
        artifacts, copy, ignore=shutil.ignore_patterns("decoder*", "export", "relax", "legalize")
    )
    lib = copy / "build/generic/duration-6.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    tts = KokoroTVM.from_manifest(copy)
    with pytest.raises(
        ArtifactError, match="duration-6.so does not match the sha256 recorded in its manifest"
    ):
        tts.plan("hə", "random")  # 4 tokens: bucket 6
    # a manifest edited to the new bytes still holds the old validation: refused as well
    manifest = json.loads(A.manifest_file(copy).read_text())
    entry = next(e for e in manifest["libraries"] if e["path"].endswith("duration-6.so"))
    entry["sha256"] = A.sha256(lib)
    A.manifest_file(copy).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="duration-6.so .*is not what was built and validated"):
        KokoroTVM.from_manifest(copy).plan("hə", "random")


def test_lazy_vms_and_weights_held_once(artifacts, monkeypatch, tmp_path):
    """Without packed weights (a manifest that lists none), a component's raw weights are read
    once for all its buckets and each library transforms them at load, keeping nothing twice."""
    import kokoro_tvm.runtime.libraries as R
    from kokoro_tvm.runtime.component import ComponentWeights

    loads = []

    def counted(root, info):
        loads.append(info.path)
        return ComponentWeights(root, info)

    monkeypatch.setattr(R, "ComponentWeights", counted)
    raw = tmp_path / "raw"
    artifacts_copy(artifacts, raw, ignore=shutil.ignore_patterns("packed"))
    manifest = json.loads(A.manifest_file(raw).read_text())
    for entry in manifest["libraries"]:
        entry.pop("packed", None)
    A.manifest_file(raw).write_text(json.dumps(manifest))
    tts = KokoroTVM.from_manifest(raw)
    libs = tts.libraries
    assert libs._libs == {} and loads == []
    tts.plan("ab", "random")  # 4 tokens: bucket 6
    assert set(libs._libs) == {("duration", 6)}
    weights = libs._weights["duration"]
    lib6 = libs._libs[("duration", 6)]
    # after binding, the raw weights it transformed are gone: what remains is what it binds as is
    assert weights.tensors and {id(t) for t in weights.tensors.values()} <= {
        id(p) for p in lib6.params
    }
    assert len(weights.tensors) < len(weights.names)  # negative control: some were transformed
    tts.plan("ab cd ef", "random")  # 10 tokens: bucket 12
    assert set(libs._libs) == {("duration", 6), ("duration", 12)}
    # one verified file for both buckets
    assert loads == [A.weights_file("duration").relative_to(A.ROOT).as_posix()]
    assert weights.reads == 2  # the second bucket re-read the weights the first one transformed
    shared = {id(p) for p in lib6.params} & {id(p) for p in libs._libs[("duration", 12)].params}
    assert shared and shared == {id(t) for t in weights.tensors.values()}


def test_bad_input_errors(tts):
    with pytest.raises(chunking.InputError, match="empty input"):
        tts.plan("   ", "random")
    with pytest.raises(chunking.InputError, match="outside the Kokoro phoneme vocabulary"):
        tts.plan("hə$lO", "random", unknown="error")
    with pytest.raises(voices.VoiceError, match=r"shape \[510, 1, 128\]; expected"):
        tts.plan("həlO", voice=np.zeros((510, 1, 128), np.float32))
    with pytest.raises(chunking.InputError, match="speed must be a positive number"):
        tts.plan("həlO", "random", speed=0)
    with pytest.raises(BucketError, match="more than the largest frame bucket 32.*raise the speed"):
        tts.plan("ə", "random", speed=0.1)


# -- planning: token components only ------------------------------------------------------------


@pytest.mark.parametrize("speed", [1.0, 1.3])
def test_long_input_splits_to_fit_buckets_with_kokoro_durations(tts, km, speed):
    text = TEXT[:64]
    assert len(chunking.phoneme_utterances(text)) == 1  # kokoro: one utterance
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chunks = tts.plan(text, "random", speed=speed)
    assert len(chunks) > 1  # token and frame buckets forced cuts, and said so once
    assert len(caught) == 1 and str(caught[0].message).startswith(
        f"an utterance of {len(text.strip())} phonemes needs {len(text.strip()) + 2} tokens, more "
        "than the largest token bucket 12"
    ), caught
    # words longer than ~6 phonemes overflow 32 frames here, so some are cut; nothing is lost
    assert "".join(c.phonemes for c in chunks).replace(" ", "") == text.replace(" ", "")
    for c in chunks:
        assert c.n_tokens <= 12 and c.n_frames <= 32
        assert c.token_bucket == (6 if c.n_tokens <= 6 else 12)
        assert np.array_equal(c.durations, eager_durations(km, c.phonemes, c.style, speed)), (
            c.phonemes
        )


# -- end to end ---------------------------------------------------------------------------------


def _check(row) -> None:
    """The float64 criterion (``eval.verdicts``): no further from float64 kokoro than float32 is."""
    print({k: v for k, v in row.items() if k not in ("result", "reference")})
    assert row["finite"] and row["durations_equal"]
    assert row["ok"] and row["log_mel_snr_db"] >= row["min_snr_db"], row


@pytest.mark.parametrize("frames", [16, 32])
def test_parity_at_full_frame_bucket(tts, km, km64, frames):
    """Frames == bucket: exact even without masked decoder norms."""
    ps = find_phonemes(km, frames, frames)
    row = compare(tts, km, km64, ps)
    assert row["chunks"] == 1 and row["frame_buckets"] == [frames]
    # kokoro runs a phoneme string as one utterance; so did the runtime
    assert (
        row["kokoro_utterances"] == 1 and row["same_utterances"] and not row["split_beyond_kokoro"]
    )
    _check(row)


@pytest.mark.parametrize("bucket", [16, 32])
def test_parity_padded_frames(tts, km, km64, bucket):
    """Frames < bucket (in each frame bucket): needs the length-masked decoder."""
    ps = find_phonemes(km, bucket // 2 + 1, bucket - 3)
    row = compare(tts, km, km64, ps)
    assert row["chunks"] == 1 and row["frame_buckets"] == [bucket] and not row["at_bucket"]
    _check(row)


@pytest.fixture(scope="module")
def long_row(tts, km, km64, tmp_path_factory):
    pack = torch.randn(510, 1, 256, generator=torch.Generator().manual_seed(3)) * 0.3
    path = tmp_path_factory.mktemp("voice") / "voice.pt"
    torch.save(pack, path)
    # 14 phonemes > 10: cut after the comma; "ɐn ˈOpən," then overflows 32 frames and is cut again
    return compare(tts, km, km64, "ɐn ˈOpən, wˈAt", voice=path, speed=1.1, seed=5)


def test_parity_multi_chunk_with_voice_pack(long_row):
    assert [c.phonemes for c in long_row["result"].chunks] == ["ɐn", "ˈOpən,", "wˈAt"]
    # one kokoro utterance, cut because it does not fit the buckets: allowed, and flagged
    assert long_row["kokoro_utterances"] == 1 and not long_row["same_utterances"]
    assert long_row["split_beyond_kokoro"]
    _check(long_row)


def test_replayed_durations_drive_kokoros_alignment(tts, km):
    """The e2e reference runs kokoro on the runtime's durations: change one and kokoro's audio
    (and its ``pred_dur``) follows it, so the replay hook is live, not a no-op."""
    import dataclasses

    from kokoro_tvm.eval.e2e import eager_chunk

    part = tts.synthesize("ɐn ˈOp", "random").parts[0]
    chunk, noise = part.chunk, part.decoded.noise
    extra = np.zeros((1, 600, noise.shape[-1]), noise.dtype)  # SineGen's draws for one more frame
    longer = dataclasses.replace(
        part,
        chunk=dataclasses.replace(
            chunk, durations=chunk.durations + (np.arange(chunk.n_tokens) == 1)
        ),
        decoded=dataclasses.replace(part.decoded, noise=np.concatenate([noise, extra], axis=1)),
    )
    with torch.no_grad():
        audio, pred = eager_chunk(km, longer, 1.0, replay=True)
        plain, own = eager_chunk(km, part, 1.0)
    assert (
        np.array_equal(pred, longer.chunk.durations) and audio.size == longer.chunk.n_frames * 600
    )
    assert np.array_equal(own, chunk.durations) and plain.size == chunk.n_frames * 600


def test_chunks_join_without_gap_or_click(long_row):
    res = long_row["result"]
    audio, spf = res.audio, 600
    assert audio.dtype == np.float32 and res.sample_rate == 24000
    assert audio.size == sum(c.n_frames for c in res.chunks) * spf  # no gap, nothing dropped
    seams = np.cumsum([p.audio.size for p in res.parts])[:-1]
    steps = np.abs(np.diff(audio))
    typical = np.percentile(steps, 99)
    for s in seams:
        assert steps[s - 1] <= typical, (s, steps[s - 1], typical)  # the seam is no larger a step
        assert np.abs(audio[s - 3 : s + 3]).max() < 0.05 * np.abs(audio).max()


# -- end-to-end real-time factor (bench_e2e stage) ----------------------------------------------


def test_e2e_bench_stage_times_runtime_and_eager_on_the_same_audio(artifacts, tmp_path):
    """``bench_e2e`` on the runtime project at the lengths ``bench.phonemes`` names (a short
    input and one the runtime splits; the default lengths: the test below): each is checked for
    parity before it is timed, the ratios are the medians' own, and the metrics file says where
    it ran and which target the runtime picked, and why."""
    import contextlib

    from kokoro_tvm import artifacts as A
    from kokoro_tvm.params import load
    from kokoro_tvm.pipeline import bench_e2e

    lengths = [4, 30]  # bucket 6 filled; 2.5x bucket 12
    prm = load(artifacts.parent / "params.yaml").updated(
        bench={"repeats": 2, "onnxruntime": True, "phonemes": lengths}, runtime={"num_threads": 0}
    )
    with contextlib.chdir(artifacts.parent):
        bench_e2e.run(prm)
    path = artifacts / A.bench_e2e_file().relative_to(A.ROOT)
    doc = json.loads(path.read_text())
    assert doc["target"] == "generic" and doc["repeats"] == 2 and doc["cpu"]
    assert doc["picked"][-1] == "picked generic: the richest ISA this CPU runs"
    rows = [doc[f"phonemes_{n}"] for n in lengths]
    assert max(r["chunks"] for r in rows) > 1  # the long input is chunked
    for r in rows:
        assert r["log_mel_snr_db"] >= min(r["f32_log_mel_snr_db"] - 3, 60)
        assert r["speedup_vs_eager"] == pytest.approx(r["eager_s"] / r["tvm_s"], rel=1e-3)
        assert r["rtf_tvm"] == pytest.approx(r["tvm_s"] / r["audio_s"], rel=1e-3)
        # kokoro-onnx's whole model (fp32 export of these weights; the int8 file is Kokoro-82M's
        # only)
        assert r["speedup_vs_ort_fp32"] == pytest.approx(r["ort_fp32_s"] / r["tvm_s"], rel=1e-3)
        assert r["ort_fp32_durations_differ"] == 0 and r["ort_fp32_samples"] == round(
            r["audio_s"] * 24000
        )
        assert "ort_int8_s" not in r
        # the kokoro-onnx package's create() on the same phonemes and model, timed beside them
        assert r["speedup_vs_kokoro_onnx_fp32"] == pytest.approx(
            r["kokoro_onnx_fp32_s"] / r["tvm_s"], rel=1e-3
        )
        assert r["kokoro_onnx_fp32_audio_s"] > 0
    total = doc["total"]
    assert total["audio_s"] == pytest.approx(sum(r["audio_s"] for r in rows), rel=1e-3)
    assert total["speedup_vs_eager"] == pytest.approx(
        sum(r["eager_s"] for r in rows) / sum(r["tvm_s"] for r in rows), rel=1e-3
    )


@pytest.mark.parametrize(
    "buckets,lengths",
    [
        ([512], [30, 62, 126, 254, 510]),  # one bounded bucket is timed at short inputs too
        ([64, 128, 256, 512], [30, 62, 126, 254, 510]),
        (
            [6, 12],
            [3, 4, 10, 30],
        ),  # no half of 12 reaches 32 tokens: half the smallest; 2.5x the largest
    ],
)
def test_e2e_lengths_cover_every_bucket_and_short_inputs(buckets, lengths):
    from kokoro_tvm.eval import e2e

    assert e2e.default_lengths(buckets) == lengths


def test_e2e_bench_refuses_to_time_audio_that_differs(tts, km, km64, monkeypatch):
    from kokoro_tvm.eval import e2e, verdicts

    monkeypatch.setattr(verdicts, "SNR_CAP_DB", 1e9)  # no audio can pass: the row is not ok
    monkeypatch.setattr(verdicts, "SNR_SLACK_DB", -1e9)
    with pytest.raises(e2e.E2EError, match=r"4 phonemes: runtime audio differs from kokoro"):
        e2e.measure_rtf(tts, km, km64, [4], repeats=1, warmup=0, settle_s=0)


class _WrongDurationsSession:
    """An ORT session stand-in whose model predicts one more frame per token than kokoro."""

    def get_inputs(self):
        return [type("I", (), {"name": n}) for n in ("input_ids", "style", "speed")]

    def run(self, _, feeds):
        n = feeds["input_ids"].shape[1]
        return [np.zeros(600 * 2 * n, np.float32), np.full(n, 2, np.int64)]


def test_e2e_bench_refuses_to_time_an_onnx_model_that_is_not_kokoros(tts, km, km64):
    """Negative control of the ORT durations check in the bench stage test above."""
    from kokoro_tvm.eval import e2e

    with pytest.raises(e2e.E2EError, match=r"ONNX Runtime \(fp32\) predicts other durations"):
        e2e.measure_rtf(
            tts, km, km64, [4], repeats=1, settle_s=0, onnx={"fp32": _WrongDurationsSession()}
        )


def test_kokoro_onnx_export_runs_any_length_like_kokoro(artifacts):
    """The whole-model export (kokoro-onnx's recipe) is traced at 50 tokens; at other lengths it
    must still predict kokoro's durations and make audio of their length. (Its audio cannot be
    held to kokoro's: the draws are inside the graph, and kokoro's CustomSTFT, which the export
    needs, pads by replication where torch.stft reflects.)"""
    from kokoro_tvm.eval import onnx_kmodel
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.onnx_export import ort_session

    pth, config = A.kokoro_checkpoint_file(artifacts), A.model_config_file(artifacts)
    cfg, km = load_kokoro(pth, config)
    session = ort_session(onnx_kmodel.export_kmodel(km, cfg), 1)
    rng = np.random.default_rng(0)
    for tokens in (7, 20, 61):
        ids = np.concatenate([[0], rng.integers(1, 100, tokens - 2), [0]]).astype(np.int64)
        chunk = type(
            "C", (), {"input_ids": ids, "style": rng.standard_normal((1, 256)).astype(np.float32)}
        )()
        audio, durations = onnx_kmodel.run(session, chunk)
        with torch.no_grad():
            want_audio, want = km.forward_with_tokens(
                torch.from_numpy(ids)[None], torch.from_numpy(chunk.style), 1
            )
        assert np.array_equal(durations, want.numpy().reshape(-1)), tokens
        assert audio.size == want_audio.numel() == 600 * int(want.sum())
