"""Every kind of bad input is one ``error:`` line (CLI) or a ``KokoroTVMError`` (API), checked
before any work, and no output is left half-written.

Uses the runtime test build (``runtime_project``: tiny config, tokens [6, 12], frames [16, 32]).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from runtime_project import artifacts_copy, runtime_artifacts

import kokoro_tvm
from kokoro_tvm import artifacts as A
from kokoro_tvm.runtime import cli, decoder
from kokoro_tvm.runtime.synthesizer import KokoroTVM

PHONEMES = "həlˈO wˈɜɹld"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def tts(artifacts) -> KokoroTVM:
    return KokoroTVM.from_manifest(artifacts)


def synth(capsys, artifacts: Path, *argv: str) -> tuple[int, str]:
    base = ["synth", "--artifacts", str(artifacts), "--voice", "random", "-q"]
    rc = cli.main([*base, *argv])
    return rc, capsys.readouterr().err


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing/out.wav", "folder .*missing does not exist; create it first"),
        (".", "is a folder; give a file path inside it"),
        ("", "path is empty"),
    ],
)
@pytest.mark.parametrize("flag", ["-o", "--timestamps"])
def test_bad_output_paths_fail_before_any_work(
    capsys, artifacts, tmp_path, monkeypatch, flag, where, message
):
    """A path the end of the run could not write is refused before the G2P or a library runs."""
    ran = []
    monkeypatch.setattr(KokoroTVM, "stream", lambda *a, **k: ran.append(1))
    path = str(tmp_path / where) if where else ""
    out = path if flag == "-o" else str(tmp_path / "ok.wav")
    extra = ["--timestamps", path] if flag == "--timestamps" else []
    rc, err = synth(capsys, artifacts, "--phonemes", PHONEMES, "-o", out, *extra)
    assert rc == 1 and not ran
    import re

    assert re.search(message, one_error_line(err)), err
    assert not (tmp_path / "ok.wav").exists()


def test_timestamps_to_stdout_and_to_the_wav_itself_are_refused(capsys, artifacts, tmp_path):
    rc, err = synth(capsys, artifacts, "--phonemes", PHONEMES, "-o", "x.wav", "--timestamps", "-")
    assert rc == 1 and "cannot go to stdout" in one_error_line(err)
    wav = str(tmp_path / "x.wav")
    rc, err = synth(capsys, artifacts, "--phonemes", PHONEMES, "-o", wav, "--timestamps", wav)
    assert rc == 1 and "name the same file" in one_error_line(err)


@pytest.mark.parametrize("stream", [[], ["--stream"]])
def test_a_failure_mid_synthesis_leaves_no_file(capsys, artifacts, tmp_path, monkeypatch, stream):
    """The second chunk fails: neither the WAV (streamed or not) nor the timestamps appear, and
    nothing temporary is left beside them."""
    calls = []
    real = decoder.decode

    def fail_second(libs, chunk, rng):
        calls.append(1)
        if len(calls) == 2:
            raise kokoro_tvm.InputError("planted failure in the second chunk")
        return real(libs, chunk, rng)

    monkeypatch.setattr("kokoro_tvm.runtime.stream.decode", fail_second)
    wav, ts = tmp_path / "a.wav", tmp_path / "a.json"
    long = "wˈʌn. tˈu. θɹˈi. fˈɔɹ. fˈIv. sˈɪks."  # several utterances
    rc, err = synth(
        capsys, artifacts, "--phonemes", long, "-o", str(wav), "--timestamps", str(ts), *stream
    )
    assert rc == 1 and "planted failure" in one_error_line(err) and len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # control: the same run without the plant writes both
    monkeypatch.setattr("kokoro_tvm.runtime.stream.decode", real)
    rc, _ = synth(
        capsys, artifacts, "--phonemes", long, "-o", str(wav), "--timestamps", str(ts), *stream
    )
    assert rc == 0 and wav.stat().st_size > 44 and json.loads(ts.read_text())["words"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "-1"], "seed must be a whole number >= 0"),
        (["--threads", "-1"], "--threads must be a positive whole number"),
        (["--speed", "nan"], "speed must be a positive number"),
        (["--speed", "0"], "speed must be a positive number"),
    ],
)
def test_bad_numbers_are_one_error(capsys, artifacts, tmp_path, argv, message):
    rc, err = synth(capsys, artifacts, "--phonemes", PHONEMES, "-o", str(tmp_path / "x.wav"), *argv)
    assert rc == 1 and message in one_error_line(err)
    assert not (tmp_path / "x.wav").exists()


def test_api_refuses_bad_seeds_speeds_and_unknowns(tts):
    for seed in (-1, 1.5, "3", True):
        with pytest.raises(kokoro_tvm.InputError, match="seed must be"):
            tts.create(PHONEMES, voice="random", is_phonemes=True, seed=seed)
    with pytest.raises(kokoro_tvm.InputError, match="unknown must be one of"):
        tts.plan(PHONEMES, "random", unknown="ignore")
    with pytest.raises(kokoro_tvm.KokoroTVMError, match="threads must be a positive"):
        KokoroTVM.from_manifest(tts.libraries.root, num_threads=-2)


def test_an_utterance_with_no_known_symbol_is_skipped_not_a_crash(tts):
    """A long input one of whose utterances holds only symbols outside the vocabulary: that
    utterance is skipped with a warning; the rest is spoken."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        audio, _ = tts.create("həlˈO. 你好。 wˈɜɹld.", voice="random", is_phonemes=True)
    assert audio.size > 0
    assert any("outside the Kokoro phoneme vocabulary" in str(w.message) for w in seen)
    # as separate utterances (text input gives them), the empty one is named
    from kokoro_tvm.runtime.chunking import Utterance, phoneme_tokens

    utts = [Utterance(p, phoneme_tokens(p), p) for p in ("həlˈO.", "你好。", "wˈɜɹld.")]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        audio = tts.synthesize(utts, "random").audio
    assert audio.size > 0
    assert any("hold no symbol of the Kokoro vocabulary" in str(w.message) for w in seen)
    with pytest.raises(kokoro_tvm.InputError, match="no phoneme of the input is in the"):
        tts.create("你好。", voice="random", is_phonemes=True)


def _manifest_copy(artifacts: Path, tmp_path: Path, edit) -> Path:
    root = tmp_path / "art"
    artifacts_copy(artifacts, root)
    manifest = json.loads(A.manifest_file(root).read_text())
    edit(manifest)
    A.manifest_file(root).write_text(json.dumps(manifest))
    return root


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("model"), r"lacks 'model' \(the model config and checkpoint\)"),
        (lambda m: m.update(format=99), "has format 99, and this runtime reads format 3"),
        (lambda m: m["libraries"][0].pop("sha256"), r"'libraries\[0\].sha256' should be a str"),
        (lambda m: m["libraries"][0].update(bucket="6"), r"'libraries\[0\].bucket' should be"),
        (lambda m: m.update(weights=[]), "'weights' should be a dict"),
        (lambda m: m["weights"].pop("decoder"), "component 'decoder' has no weights entry"),
    ],
)
def test_a_manifest_this_runtime_cannot_read_is_refused_with_the_fix(
    capsys, artifacts, tmp_path, edit, message
):
    root = _manifest_copy(artifacts, tmp_path, edit)
    with pytest.raises(kokoro_tvm.ArtifactError, match=message):
        KokoroTVM.from_manifest(root)
    for command in (["info", "--artifacts", str(root)], ["synth", "--artifacts", str(root)]):
        extra = ["--voice", "random", "--phonemes", PHONEMES, "-o", str(tmp_path / "x.wav")]
        rc = cli.main(command + (extra if command[0] == "synth" else []))
        err = capsys.readouterr().err
        assert rc == 1 and "dvc repro" in one_error_line(err)


def test_corrupt_voice_files_are_voice_errors(tts, tmp_path):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(kokoro_tvm.VoiceError, match="bad.npy"):
        tts.create(PHONEMES, voice=str(bad), is_phonemes=True)
    np.save(tmp_path / "wrong.npy", np.zeros((3, 7), np.float32))
    with pytest.raises(kokoro_tvm.VoiceError, match="shape"):
        tts.create(PHONEMES, voice=str(tmp_path / "wrong.npy"), is_phonemes=True)


def test_errors_are_exported_from_the_package():
    for name in ("KokoroTVMError", "InputError", "ArtifactError", "VoiceError", "BucketError"):
        cls = getattr(kokoro_tvm, name)
        assert issubclass(cls, kokoro_tvm.KokoroTVMError), name


def test_text_past_spacys_limit_reaches_the_g2p_in_sentence_pieces():
    """spaCy refuses a paragraph of over 1,000,000 characters (kokoro's own call fails there):
    the English G2P gets it in pieces of at most ``PIECE_CHARS``, cut after sentence ends."""
    from kokoro_tvm.runtime.g2p import en, text_utterances
    from kokoro_tvm.runtime.g2p.reading import Seen

    paragraph = "The cat sat on the mat. " * 50_000  # 1.2 million characters, one paragraph
    seen: list[int] = []

    def g2p(text):
        seen.append(len(text))
        if len(text) > 1_000_000:
            raise ValueError("[E088] Text of length ... exceeds maximum of 1000000")
        return "", []

    with pytest.raises(kokoro_tvm.InputError, match="nothing to say"):  # the stub says nothing
        text_utterances(paragraph, g2p=g2p)
    assert len(seen) > 1 and max(seen) <= en.PIECE_CHARS
    pieces = list(en.pieces([paragraph], Seen()))
    assert all(p.endswith(". ") for p in pieces[:-1])  # whole sentences
    assert "".join(pieces) == paragraph  # nothing lost
    # control: without the cut the G2P would have been handed the whole paragraph
    assert list(en.pieces([paragraph], Seen(), limit=len(paragraph))) == [paragraph]
