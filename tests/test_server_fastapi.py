"""``kokoro-tvm serve`` as Kokoro-FastAPI's clients call it: a real server process on loopback,
driven with Kokoro-FastAPI's request and response shapes.

Each answer is checked against another the same server gives for what it must equal (a blend
against a voice file holding the pack this test blended, a gain against the audio without it,
a whole file against the stream, ...), so the checks hold whatever the server's chunking; the
default voice's audio is also checked against the runtime's own (``test_server.reference``,
where the server's OpenAI route is checked in depth).

Uses the runtime test build (``runtime_project``: tiny config, random weights, seeded random
voice packs under Kokoro's names). The server wants an API key, so the routes added here are
checked behind it too; it keeps two download files, so eviction shows after three.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
from runtime_project import runtime_artifacts
from server_process import ServerProcess, decode_s16
from test_server import reference

from kokoro_tvm.runtime.g2p import NormalizationOptions, phonemize
from kokoro_tvm.runtime.synthesizer import KokoroTVM
from kokoro_tvm.server.downloads import DownloadStore
from kokoro_tvm.server.errors import APIError
from kokoro_tvm.server.schema import speech_request
from kokoro_tvm.server.voices import MAX_BLEND_VOICES

KEY = "sesame"
TEXT = "Hello world."
PHONEMES = "həlˈO wˈɜɹld"
#: the extra voices in --voices-dir: enough American ones to pass the blend cap, and one whose
#: name has a '-' (a blend's minus sign elsewhere)
EXTRA = [f"af_x{i:02d}" for i in range(MAX_BLEND_VOICES + 1)] + ["am_my-voice"]
#: blends of the build's af_heart (a) and am_adam (b) as Kokoro-FastAPI computes them: each
#: weight over the sum of all weights, added or subtracted by its sign. The test writes each
#: pack as a voice file; the server must give the blend the file's audio.
BLENDS = {
    "af_heart(2)+am_adam(1)": ("af_blend_2_1", lambda a, b: (2 / 3) * a + (1 / 3) * b),
    "af_heart + af_heart + am_adam": ("af_blend_2_1", None),  # a voice named twice is one
    "af_heart-am_adam": ("af_blend_1_m1", lambda a, b: 0.5 * a - 0.5 * b),
    "af_heart(3)-am_adam(1)": ("af_blend_3_m1", lambda a, b: 0.75 * a - 0.25 * b),
    "+".join(["af_heart"] * 1500): ("af_heart_copy", lambda a, b: a),  # one pack, not 1500
}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def voice_dir(tmp_path_factory, tts):
    d = tmp_path_factory.mktemp("voices")
    for i, name in enumerate(EXTRA):
        pack = 0.3 * np.random.default_rng(100 + i).standard_normal((510, 1, 256))
        np.save(d / f"{name}.npy", pack.astype(np.float32))
    a = np.asarray(tts.voice_pack("af_heart"), np.float64)
    b = np.asarray(tts.voice_pack("am_adam"), np.float64)
    for name, blend in BLENDS.values():
        if blend is not None:
            np.save(d / f"{name}.npy", blend(a, b).astype(np.float32))
    return d


@pytest.fixture(scope="module")
def server(artifacts, voice_dir):
    srv = ServerProcess(
        artifacts,
        "--workers",
        "2",
        "--no-admission",
        "--max-streams",
        "6",
        "--max-input-chars",
        "300",
        "--voices-dir",
        str(voice_dir),
        "--download-files",
        "2",
        "--api-key",
        KEY,
    )
    yield srv
    assert srv.alive(), f"the server went down:\n{srv.log}"
    srv.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120
    ) as client:
        yield client


@pytest.fixture(scope="module")
def tts(artifacts):
    return KokoroTVM.from_manifest(artifacts)


def pcm16(audio: np.ndarray) -> np.ndarray:
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2")


def speech(http, **body) -> httpx.Response:
    """Kokoro-FastAPI's speech request: no model, phonemes of the tiny build, raw samples."""
    body = {"input": PHONEMES, "input_type": "phonemes", "response_format": "pcm", **body}
    return http.post("/v1/audio/speech", json=body)


def wav_sizes(data: bytes) -> tuple[int, int]:
    """A 16-bit WAV's RIFF size and data size as its header says them."""
    assert data[:4] == b"RIFF" and data[36:40] == b"data"
    return struct.unpack_from("<I", data, 4)[0], struct.unpack_from("<I", data, 40)[0]


def test_voices_are_objects_with_ids_and_legacy_names(http, tts):
    listed = http.get("/v1/audio/voices").json()["voices"]
    files = {name for name, blend in BLENDS.values() if blend is not None}
    want = set(tts.get_voices()) | set(EXTRA) | files | {"random"}
    assert all(set(v) == {"id", "name"} and v["id"] == v["name"] for v in listed)
    assert {v["id"] for v in listed} == want
    legacy = http.get("/v1/audio/voices", params={"legacy": "true"}).json()["voices"]
    assert legacy == [v["id"] for v in listed]
    r = http.get("/v1/audio/voices", params={"legacy": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "legacy"


def test_model_and_voice_may_be_left_out(http, tts):
    """Kokoro-FastAPI's defaults: model kokoro, voice af_heart."""
    r = speech(http)
    assert r.status_code == 200, r.text
    assert r.content == speech(http, model="kokoro", voice="af_heart").content
    ref = reference(tts, PHONEMES, voice="af_heart", phonemes=True)
    assert np.array_equal(samples(r.content), pcm16(ref))


def test_stream_false_is_one_file_with_its_length(http):
    ref = samples(speech(http).content)
    for fmt in ("wav", "mp3", "pcm"):
        streamed = speech(http, response_format=fmt)
        whole = speech(http, response_format=fmt, stream=False)
        assert whole.status_code == 200, whole.text
        assert "content-length" not in streamed.headers  # the default still streams
        assert int(whole.headers["content-length"]) == len(whole.content) > 0
        assert whole.headers["content-disposition"] == f"attachment; filename=speech.{fmt}"
        if fmt == "wav":
            # the whole file says its sizes; the streamed one cannot ("until the end")
            assert wav_sizes(streamed.content) == (0xFFFFFFFF, 0xFFFFFFFF)
            assert wav_sizes(whole.content) == (len(whole.content) - 8, len(whole.content) - 44)
            assert whole.content[44:] == streamed.content[44:]
            assert np.array_equal(decode_s16(whole.content), ref)
        else:
            assert whole.content == streamed.content
    r = speech(http, stream=False, stream_format="sse")
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"


def within_a_step(got: bytes, plain: np.ndarray, volume: float) -> bool:
    """``got`` is the audio ``plain`` was rounded from, times ``volume``, rounded again: within
    the two roundings (this build's audio is quiet: nothing clips)."""
    diff = samples(got).astype(np.float64) - volume * plain.astype(np.float64)
    return samples(got).size == plain.size and np.abs(diff).max() <= 0.5 * volume + 0.5


def test_volume_multiplier_scales_the_samples(server, http):
    plain = samples(speech(http).content)
    assert np.abs(plain).max() > 1000  # loud enough for a wrong gain to show
    for volume in (0.5, 10, 0):
        r = speech(http, volume_multiplier=volume)
        assert r.status_code == 200, r.text
        assert within_a_step(r.content, plain, volume), volume
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    data = client.audio.speech.create(
        model="tts-1",
        voice="af_heart",
        input=PHONEMES,
        response_format="pcm",
        extra_body={"input_type": "phonemes", "volume_multiplier": 0.5},
    ).content
    assert within_a_step(data, plain, 0.5)
    for bad in (-1, 11, "loud", True):
        r = speech(http, volume_multiplier=bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == "volume_multiplier", bad


def test_blends_as_kokoro_fastapi_computes_them(http):
    """Each blend gives the audio of the voice file holding the pack it must be (``BLENDS``),
    and not af_heart's own; a name with a '-' is still a name."""
    plain = speech(http, voice="af_heart").content

    def one(voice: str, file: str) -> None:
        r = speech(http, voice=voice)
        assert r.status_code == 200, (voice[:40], r.text)
        assert r.content == speech(http, voice=file).content, voice[:40]
        if file != "af_heart_copy":
            assert r.content != plain, voice[:40]

    cases = [(voice, file) for voice, (file, _) in BLENDS.items()]
    with ThreadPoolExecutor(3) as pool:
        for f in [pool.submit(one, *case) for case in cases]:
            f.result()
    assert speech(http, voice="am_my-voice").status_code == 200
    # 2:1 is 4:2
    assert (
        speech(http, voice="af_heart(4)+am_adam(2)").content
        == speech(http, voice="af_heart(2)+am_adam(1)").content
    )


@pytest.mark.parametrize(
    ("voice", "code", "needle"),
    [
        ("+".join(EXTRA[: MAX_BLEND_VOICES + 1]), "too_many_voices", f"at most {MAX_BLEND_VOICES}"),
        ("af_heart-", "invalid_voice", "before and after each + and -"),
        ("af_heart+-am_adam", "invalid_voice", "before and after each + and -"),
        ("af_heart(0)+am_adam", "invalid_voice", "positive weight"),
        ("af_heart(2", "invalid_voice", "positive weight"),
        ("af_heart+nobody", "voice_not_found", "does not exist"),
    ],
)
def test_bad_blends_are_400s(http, voice, code, needle):
    r = speech(http, voice=voice)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "voice" and err["code"] == code and needle in err["message"], err


def test_the_blend_cap_admits_its_limit(http):
    r = speech(http, voice="+".join(EXTRA[:MAX_BLEND_VOICES]))
    assert r.status_code == 200, r.text


def test_lang_code_picks_the_language(http):
    def say(**lang) -> bytes:
        body = {"input": TEXT, "voice": "af_heart", "response_format": "pcm", **lang}
        r = http.post("/v1/audio/speech", json=body)
        assert r.status_code == 200, r.text
        return r.content

    british = say(lang_code="b")
    assert british == say(lang="en-gb")
    assert british != say()  # af_heart's own: American
    r = speech(http, lang_code="xx")
    assert r.status_code == 400 and r.json()["error"]["param"] == "lang_code"


def test_normalization_options_are_parsed_with_kokoro_fastapi_defaults(http):
    doc = {"input": "Hi.", "voice": "af_heart"}
    assert speech_request(doc, 100).normalization is None
    assert speech_request({**doc, "normalization_options": {}}, 100).normalization == (
        NormalizationOptions(
            normalize=True,
            unit_normalization=False,
            url_normalization=True,
            email_normalization=True,
            optional_pluralization_normalization=True,
            phone_normalization=True,
            replace_remaining_symbols=True,
        )
    )
    given = {
        "unit_normalization": True,
        "url_normalization": False,
        "markdown": False,  # the runtime's own
        "not_a_field": 1,
    }
    got = speech_request({**doc, "normalization_options": given}, 100).normalization
    assert got.unit_normalization is True and got.url_normalization is False
    assert got.markdown is False
    assert got.normalize is True and got.phone_normalization is True
    with pytest.raises(APIError) as e:
        speech_request({**doc, "normalization_options": {"normalize": "yes"}}, 100)
    assert e.value.param == "normalization_options.normalize"
    # through the server: a good one is served, a bad one names its field
    assert speech(http, normalization_options={"normalize": False}).status_code == 200
    r = speech(http, normalization_options=[True])
    assert r.status_code == 400 and r.json()["error"]["param"] == "normalization_options"


def test_features_this_server_lacks_are_refused(http):
    assert speech(http, allow_voice_tags=False, ssml=False).status_code == 200
    for name in ("allow_voice_tags", "ssml", "return_timing"):
        r = speech(http, **{name: True})
        assert r.status_code == 400 and r.json()["error"]["param"] == name, name
    r = speech(http, voice_aliases={"narrator": "af_heart"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice_aliases"


def test_phonemize_and_generate_from_phonemes(http, tts):
    r = http.post("/dev/phonemize", json={"text": TEXT, "language": "a"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == {"phonemes", "tokens"}
    want = " ".join(p for _, p in phonemize(TEXT, "a"))
    assert doc["phonemes"] == want
    vocab = tts.libraries.vocab
    assert doc["tokens"] == [0, *(vocab[c] for c in want if c in vocab), 0]
    assert http.post("/dev/phonemize", json={"text": TEXT}).json() == doc  # "a" by default
    british = http.post("/dev/phonemize", json={"text": TEXT, "language": "b"}).json()
    assert british["phonemes"] == " ".join(p for _, p in phonemize(TEXT, "b"))
    for body, param in (
        ({"text": TEXT, "language": "xx"}, "language"),
        ({"text": "  "}, "text"),
        ({"language": "a"}, "text"),
    ):
        r = http.post("/dev/phonemize", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, body

    r = http.post(
        "/dev/generate_from_phonemes", json={"phonemes": doc["phonemes"], "voice": "af_heart"}
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    same = speech(http, input=doc["phonemes"], voice="af_heart", response_format="wav")
    assert r.content == same.content
    r = http.post("/dev/generate_from_phonemes", json={"phonemes": PHONEMES})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"


def test_dev_captioned_speech(http):
    body = {"input": TEXT, "voice": "af_heart", "response_format": "pcm"}
    r = http.post("/dev/captioned_speech", json=body)
    assert r.status_code == 200, r.text
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert all(set(x) == {"audio", "audio_format", "timestamps"} for x in lines)
    assert all(x["audio_format"] == "audio/pcm" and x["audio"] for x in lines)
    audio = b"".join(base64.b64decode(x["audio"]) for x in lines)
    assert audio == speech(http, input=TEXT, input_type="text").content
    words = [w for x in lines for w in x["timestamps"]]
    assert [w["word"] for w in words] == ["Hello", "world", "."]
    assert all(set(w) == {"word", "start_time", "end_time"} for w in words)
    assert all(0 <= w["start_time"] < w["end_time"] for w in words[:2])

    whole = http.post("/dev/captioned_speech", json={**body, "stream": False})
    assert int(whole.headers["content-length"]) == len(whole.content)
    doc = whole.json()
    assert set(doc) == {"audio", "audio_format", "timestamps"}
    assert base64.b64decode(doc["audio"]) == audio and doc["timestamps"] == words

    quiet = http.post("/dev/captioned_speech", json={**body, "return_timestamps": False})
    assert all(json.loads(x)["timestamps"] == [] for x in quiet.text.splitlines())


def test_download_links(http):
    """The file a response leaves: its own bytes, or the same samples in download_format; a
    whole WAV with its sizes; from the OpenAI route, a whole file and captioned speech."""
    ref = samples(speech(http).content)
    r = speech(http, return_download_link=True, download_format="wav")
    path = r.headers["x-download-path"]
    assert path.startswith("/download/") and path.endswith(".wav")
    got = http.get(f"/v1{path}")
    assert got.status_code == 200 and got.headers["content-type"] == "audio/wav"
    assert np.array_equal(samples(r.content), ref)
    assert np.array_equal(decode_s16(got.content), ref)
    assert wav_sizes(got.content) == (len(got.content) - 8, len(got.content) - 44)
    assert got.headers["content-disposition"] == f'attachment; filename="{path[10:]}"'
    # ?name= sets the saved name, cut to safe characters, the stored suffix kept
    named = http.get(f"/v1{path}", params={"name": "../../etc/my talk.sh"})
    assert named.headers["content-disposition"] == 'attachment; filename="etc_my_talk.wav"'

    whole = speech(http, return_download_link=True, stream=False, response_format="mp3")
    assert http.get(f"/v1{whole.headers['x-download-path']}").content == whole.content

    cap = http.post(
        "/dev/captioned_speech",
        json={
            "input": TEXT,
            "voice": "af_heart",
            "response_format": "pcm",
            "stream": True,
            "return_download_link": True,
        },
    )
    audio = b"".join(base64.b64decode(json.loads(x)["audio"]) for x in cap.text.splitlines())
    assert http.get(f"/v1{cap.headers['x-download-path']}").content == audio

    plain = speech(http)  # none asked for, none given
    assert "x-download-path" not in plain.headers


def test_a_download_asked_for_early_waits_for_its_response(http):
    """A fetch while the response is still being made (this build is slower than real time,
    so a dozen chunks are far from done when the first arrives) gets the whole file."""
    body = {
        "input": " ".join([PHONEMES] * 12),
        "input_type": "phonemes",
        "response_format": "pcm",
        "return_download_link": True,
    }
    with http.stream("POST", "/v1/audio/speech", json=body) as r:
        path = r.headers["x-download-path"]
        it = r.iter_bytes()
        first = next(it)  # the response has started, and not ended
        result = {}
        fetch = threading.Thread(target=lambda: result.update(r=http.get(f"/v1{path}")))
        fetch.start()
        rest = b"".join(it)
    fetch.join(120)
    assert result["r"].status_code == 200
    assert result["r"].content == first + rest
    assert first + rest == speech(http, input=body["input"]).content
    # a response its client leaves early leaves nothing
    with http.stream("POST", "/v1/audio/speech", json=body) as r:
        path = r.headers["x-download-path"]
        next(r.iter_bytes())
    r = http.get(f"/v1{path}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "download_not_found"


def test_downloads_are_bounded_and_never_a_path(server, http):
    paths = [speech(http, return_download_link=True).headers["x-download-path"] for _ in range(3)]
    got = [http.get(f"/v1{p}").status_code for p in paths]
    assert got == [404, 200, 200]  # --download-files 2: the oldest went
    name = paths[-1][len("/download/") :]
    for bad in (
        "/v1/download/..%2F..%2Fetc%2Fpasswd",
        "/v1/download/%2e%2e",
        f"/v1/download/..%2F{name}",
        f"/v1/download/{name[:-4]}.pt",
        "/v1/download/AAAAAAAAAAAAAAAA.wav",
    ):
        r = http.get(bad)
        assert r.status_code == 404, bad
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    # behind the API key like the rest of /v1/, and so are the /dev/ routes
    bare = httpx.get(f"{server.url}/v1{paths[-1]}")
    assert bare.status_code == 401
    assert httpx.post(f"{server.url}/dev/phonemize", json={"text": "Hi."}).status_code == 401


def test_download_store_expires_and_keeps_its_bytes():
    """Age and size bounds, on a clock the test moves."""
    now = [0.0]
    store = DownloadStore(max_files=10, max_bytes=100, ttl=60, clock=lambda: now[0])

    async def run() -> None:
        loop = asyncio.get_running_loop()

        def made(size: int) -> str:
            d = store.open("pcm", loop)
            d.data += bytes(size)
            store.finish(d)
            return d.name

        a = made(40)
        now[0] = 30
        b = made(40)
        assert (await store.get(a, 0)).data == bytes(40) and store.stats() == (2, 80)
        now[0] = 50
        c = made(40)  # 120 bytes > 100: the oldest goes
        assert await store.get(a, 0) is None and store.stats() == (2, 80)
        now[0] = 91  # b finished at 30: kept until 90
        assert await store.get(b, 0) is None and await store.get(c, 0) is not None
        assert made(101) and store.stats() == (1, 40)  # over the whole store: not kept
        d = store.open("pcm", loop)  # never finished: a fetch waits, then finds nothing
        assert await store.get(d.name, 0.01) is None
        store.drop(d)
        assert await store.get(d.name, 1) is None

    asyncio.run(run())


def test_openai_requests_are_unchanged(http):
    """An OpenAI request, as the openai client sends it, still streams, with no header of
    Kokoro-FastAPI's."""
    with http.stream(
        "POST",
        "/v1/audio/speech",
        json={"model": "tts-1", "input": PHONEMES, "voice": "af_heart", "input_type": "phonemes"},
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers and "x-download-path" not in r.headers
        assert "content-disposition" not in r.headers
        assert b"".join(r.iter_bytes())
