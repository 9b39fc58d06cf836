"""``kokoro-tvm serve`` as its users call it: a real server process on loopback, the ``openai``
client and plain HTTP, every answer checked against the runtime's own output.

Uses the runtime test build (``runtime_project``: tiny config, random weights; chunks are the
few phonemes its small buckets hold, so every input here is several chunks). The build is slower
than real time, so the main server runs without admission control; admission has its own server
below, and its arithmetic is tested in ``test_server_scheduler.py``.

Lossless formats must give the runtime's samples exactly. Lossy ones must decode to the same
length (after the codec's start delay, within one codec frame) and stay above a log-mel SNR
floor against the runtime's audio. The floors are for this build's audio, which is quiet and
noise-like and so hard on codecs: measured mp3 12.6, opus 12.3, aac 14.8 dB at the bit rates in
``server/encoders.py``; trained voices measure far higher (docs/serving.md).
"""

from __future__ import annotations

import base64
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from runtime_project import runtime_artifacts
from server_process import ServerProcess, align, decode, decode_s16, wait_for

from kokoro_tvm.eval.metrics import log_mel_snr
from kokoro_tvm.runtime import voices
from kokoro_tvm.runtime.synthesizer import KokoroTVM
from kokoro_tvm.server.metrics import parse

TEXT = "Hello world."  # 3 chunks on this build
PHONEMES = "həlˈO wˈɜɹld"  # 2 chunks
LONG = " ".join(["ɐn ˈOpən, wˈAt"] * 12)  # dozens of chunks: seconds of work to cancel
MAX_CHARS = 300
LOSSY = {  # format: (log-mel SNR floor in dB, samples a decoder may add past the start delay)
    "mp3": (10.0, 1152),
    "opus": (10.0, 0),
    "aac": (12.0, 1024),
}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def voice_dir(tmp_path_factory):
    """Two voices under Kokoro names, so OpenAI's names and blends resolve on this build."""
    d = tmp_path_factory.mktemp("voices")
    for i, name in enumerate(("af_alloy", "bm_fable")):
        pack = 0.3 * np.random.default_rng(10 + i).standard_normal((510, 1, 256))
        np.save(d / f"{name}.npy", pack.astype(np.float32))
    return d


@pytest.fixture(scope="module")
def server(artifacts, voice_dir):
    srv = ServerProcess(
        artifacts,
        "--workers",
        "2",
        "--no-admission",
        "--max-streams",
        "4",
        "--max-input-chars",
        str(MAX_CHARS),
        "--voices-dir",
        str(voice_dir),
    )
    yield srv
    assert srv.alive(), f"the server went down:\n{srv.log}"
    srv.stop()


@pytest.fixture(scope="module")
def tts(artifacts):
    return KokoroTVM.from_manifest(artifacts)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def reference(tts, text, voice="random", seed=0, speed=1.0, phonemes=False, lang="en-us"):
    """The runtime's own audio for what the server is asked: the server's chunking (its
    default cuts, ``sentences``)."""
    parts = tts(
        text,
        voice=voice,
        speed=speed,
        lang=lang,
        is_phonemes=phonemes,
        seed=seed,
        cuts="sentences",
    )
    return np.concatenate([p.audio for p in parts])


def metrics(server) -> dict[str, float]:
    return parse(httpx.get(f"{server.url}/metrics").text)


def pcm16(audio: np.ndarray) -> np.ndarray:
    """16-bit samples as the runtime's WAV writer rounds them (``kokoro-tvm synth``)."""
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def check_audio(fmt: str, data: bytes, ref: np.ndarray) -> None:
    """``data`` in ``fmt`` decodes whole to ``ref``: exactly, or within the lossy bounds."""
    want = pcm16(ref)
    if fmt == "pcm":
        assert np.array_equal(np.frombuffer(data, "<i2"), want)
        return
    if fmt in ("wav", "flac"):
        assert np.array_equal(decode_s16(data), want)
        if fmt == "wav":  # the runtime's reader takes a streamed WAV too
            from kokoro_tvm.runtime.wav import read_wav

            with tempfile.TemporaryDirectory(prefix="kokoro-server-test-") as tmp:
                path = Path(tmp) / "streamed.wav"
                path.write_bytes(data)
                y, rate = read_wav(path)
            assert rate == 24000 and np.array_equal(np.round(y * 32767).astype(np.int16), want)
        return
    floor, extra = LOSSY[fmt]
    got, native = decode(data)
    assert native == (48000 if fmt == "opus" else 24000)
    aligned = align(ref, got)
    assert 0 <= aligned.size - ref.size <= extra, (fmt, aligned.size, ref.size)
    snr = log_mel_snr(ref, aligned[: ref.size])
    assert snr >= floor, (fmt, snr)


FORMATS = ["pcm", "wav", "flac", "mp3", "opus", "aac"]


def test_openai_client_every_format_streaming_and_not(client, tts):
    ref = reference(tts, PHONEMES, seed=4, phonemes=True)
    extra = {"seed": 4, "input_type": "phonemes"}

    def one(fmt: str, streaming: bool) -> None:
        args = dict(model="tts-1", input=PHONEMES, voice="random", response_format=fmt)
        if streaming:
            with client.audio.speech.with_streaming_response.create(**args, extra_body=extra) as r:
                assert r.headers["content-type"].startswith("audio/")
                data = b"".join(r.iter_bytes())
        else:
            data = client.audio.speech.create(**args, extra_body=extra).content
        check_audio(fmt, data, ref)

    jobs = [(fmt, streaming) for fmt in FORMATS for streaming in (True, False)]
    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(one, *job) for job in jobs]:
            f.result()


def test_bytes_leave_after_every_chunk(server, tts):
    """Captioned speech shows what left after each chunk: every chunk's line carries audio, in
    every format, so nothing waits for the end (Ogg/Opus included: short pages)."""
    ref = reference(tts, PHONEMES, phonemes=True)
    n_chunks = len(list(tts(PHONEMES, voice="random", is_phonemes=True, cuts="sentences")))
    assert n_chunks >= 2

    def one(fmt: str) -> None:
        body = dict(model="kokoro", input=PHONEMES, input_type="phonemes", voice="random")
        r = httpx.post(
            f"{server.url}/v1/audio/captioned_speech",
            json={**body, "response_format": fmt},
            timeout=120,
        )
        lines = [json.loads(x) for x in r.text.splitlines()]
        chunks = [x for x in lines if not x["last"]]
        assert len(chunks) == n_chunks, fmt
        assert all(base64.b64decode(x["audio"]) for x in chunks), fmt
        data = b"".join(base64.b64decode(x["audio"]) for x in lines)
        check_audio(fmt, data, ref)

    with ThreadPoolExecutor(3) as pool:
        for f in [pool.submit(one, fmt) for fmt in FORMATS]:
            f.result()


def test_sse_events(client, tts):
    events = []
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        input=TEXT,
        voice="random",
        response_format="pcm",
        stream_format="sse",
        instructions="Speak calmly.",  # accepted and ignored
        extra_body={"seed": 2},
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    assert len(kinds) >= 4  # one delta per chunk at least
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    check_audio("pcm", audio, reference(tts, TEXT, seed=2))
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_captioned_speech_words_and_whole_document(server, tts):
    url = f"{server.url}/v1/audio/captioned_speech"
    body = dict(model="kokoro", input=TEXT, voice="random", response_format="pcm", seed=1)
    lines = [json.loads(x) for x in httpx.post(url, json=body, timeout=120).text.splitlines()]
    words = [w for x in lines for w in x["timestamps"]]
    assert [w["word"] for w in words] == ["Hello", "world", "."]
    assert all(0 <= w["start_time"] < w["end_time"] for w in words if w["word"] != ".")
    assert [x["text"] for x in lines[:-1]] == ["Hello", "world", "."]
    audio = b"".join(base64.b64decode(x["audio"]) for x in lines)
    check_audio("pcm", audio, reference(tts, TEXT, seed=1))
    doc = httpx.post(url, json={**body, "stream": False}, timeout=120).json()
    assert base64.b64decode(doc["audio"]) == audio
    assert doc["timestamps"] == words and doc["audio_format"] == "pcm"


def test_phoneme_input(client, tts):
    data = client.audio.speech.create(
        model="kokoro",
        input=PHONEMES,
        voice="random",
        response_format="pcm",
        extra_body={"input_type": "phonemes", "seed": 9},
    ).content
    check_audio("pcm", data, reference(tts, PHONEMES, seed=9, phonemes=True))


def test_voices_models_and_openai_names(server, client, tts, voice_dir):
    listed = httpx.get(f"{server.url}/v1/audio/voices", params={"legacy": "true"}).json()
    built = set(tts.get_voices())  # the build's own voices, served beside the folder's
    assert set(listed["voices"]) == built | {"af_alloy", "bm_fable", "random"}
    assert listed["openai"]["alloy"] == "af_alloy" and listed["openai"]["fable"] == "bm_fable"
    assert set(listed["openai"].values()) <= set(listed["voices"])
    assert "echo" not in listed["openai"]  # am_echo is neither built nor in the folder
    ids = {m.id for m in client.models.list().data}
    assert {"kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= ids
    alloy = np.load(voice_dir / "af_alloy.npy")
    fable = np.load(voice_dir / "bm_fable.npy")
    cases = [  # (voice, its pack, the text, its language: a British voice reads British)
        ("alloy", alloy, PHONEMES, None),
        ({"id": "af_alloy"}, alloy, PHONEMES, None),
        ("af_alloy(2)+bm_fable(1)", voices.blend([alloy, fable], [2, 1]), PHONEMES, None),
        ("fable", fable, TEXT, "en-gb"),
        ("bm_fable:1,af_alloy:3", voices.blend([fable, alloy], [1, 3]), TEXT, "en-gb"),
    ]

    def one(voice, pack, text, lang) -> None:
        extra = {} if lang else {"input_type": "phonemes"}
        data = client.audio.speech.create(
            model="tts-1-hd", input=text, voice=voice, response_format="pcm", extra_body=extra
        ).content
        ref = reference(tts, text, voice=pack, lang=lang or "en-us", phonemes=lang is None)
        check_audio("pcm", data, ref)

    with ThreadPoolExecutor(3) as pool:
        for f in [pool.submit(one, *case) for case in cases]:
            f.result()


def post(server, body, **kw) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=60, **kw, **body)


GOOD = dict(model="kokoro", input="Hi.", voice="random")
BAD_REQUESTS = [
    (dict(content=b"{bad json"), 400, None, "not valid JSON"),
    (dict(content=b"[1, 2]"), 400, None, "JSON object"),
    (dict(json={**GOOD, "model": 5}), 400, "model", "'model'"),
    (dict(json={"model": "kokoro", "voice": "random"}), 400, "input", "'input'"),
    (dict(json={**GOOD, "input": "   "}), 400, "input", "empty"),
    (dict(json={**GOOD, "input": "a" * (MAX_CHARS + 1)}), 400, "input", f"limit of {MAX_CHARS}"),
    (dict(json={**GOOD, "input": 5}), 400, "input", "string"),
    (dict(json={**GOOD, "voice": "nobody"}), 400, "voice", "on this server; it has: af_alloy"),
    (dict(json={**GOOD, "voice": "echo"}), 400, "voice", "OpenAI's 'echo' is Kokoro's 'am_echo'"),
    (dict(json={**GOOD, "voice": {"id": 5}}), 400, "voice", "voice name"),
    (dict(json={**GOOD, "voice": "a(x)+b"}), 400, "voice", "blend"),
    (dict(json={**GOOD, "voice": "random+af_alloy"}), 400, "voice", "cannot be blended"),
    (dict(json={**GOOD, "response_format": "ogg"}), 400, "response_format", "mp3, opus"),
    (dict(json={**GOOD, "speed": 0.1}), 400, "speed", "between 0.25 and 4.0"),
    (dict(json={**GOOD, "speed": 4.5}), 400, "speed", "between 0.25 and 4.0"),
    (dict(json={**GOOD, "speed": "fast"}), 400, "speed", "number"),
    (dict(json={**GOOD, "speed": True}), 400, "speed", "number"),
    (dict(json={**GOOD, "model": "whisper-1"}), 404, "model", "does not exist"),
    (dict(json={**GOOD, "stream_format": "chunks"}), 400, "stream_format", "audio, sse"),
    (dict(json={**GOOD, "input_type": "ipa"}), 400, "input_type", "text, phonemes"),
    (dict(json={**GOOD, "seed": -1}), 400, "seed", ">= 0"),
    (dict(json={**GOOD, "lang": "xx"}), 400, None, "'xx'"),
    (dict(json={**GOOD, "input": "123", "input_type": "phonemes"}), 400, "input", "vocabulary"),
    (dict(content=b"{" + b" " * 40000 + b"}"), 413, None, "bytes"),
]


@pytest.mark.parametrize(("request_args", "status", "param", "needle"), BAD_REQUESTS)
def test_bad_requests_get_openai_errors_and_the_server_stays_up(
    server, request_args, status, param, needle
):
    r = post(server, request_args)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert needle in err["message"], err
    if param is not None:
        assert err["param"] == param, err
    assert err["type"] == "invalid_request_error"
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_openai_client_raises_its_own_errors(client):
    with pytest.raises(openai.BadRequestError, match="between 0.25 and 4.0"):
        client.audio.speech.create(model="kokoro", input="Hi.", voice="random", speed=9)
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="nope", input="Hi.", voice="random")


def test_unknown_paths_and_methods_are_openai_errors(server):
    r = httpx.get(f"{server.url}/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/health")
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"


def test_disconnect_cancels_the_rest_of_the_stream(server):
    before = metrics(server)
    body = dict(
        model="kokoro", input=LONG, input_type="phonemes", voice="random", response_format="pcm"
    )
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert next(r.iter_bytes())  # first audio arrived; now the client leaves
    key = 'kokoro_streams_cancelled_total{reason="disconnect"}'
    wait_for(lambda: metrics(server).get(key, 0) == before.get(key, 0) + 1)
    settled = wait_for(lambda: (m := metrics(server))["kokoro_workers_busy"] == 0 and m)
    time.sleep(1.0)  # nothing more runs for it
    after = metrics(server)
    assert after["kokoro_chunks_total"] == settled["kokoro_chunks_total"]
    assert after["kokoro_streams_open"] == 0 and after["kokoro_queue_depth"] == 0
    made = after["kokoro_chunks_total"] - before["kokoro_chunks_total"]
    assert made <= 6, made  # of dozens: the first, those 2 ahead, the ones running


def test_concurrent_clients_get_what_sequential_calls_get(server, tts):
    """Four clients at once on two workers sharing one model: each gets the audio that the
    same request gets alone, and the runtime's; /health answers meanwhile."""
    inputs = [
        (f"həlˈO {w}", seed) for w, seed in (("wˈɜɹld", 1), ("ðˈɛɹ", 2), ("jˈu", 3), ("ˈɔl", 4))
    ]

    def call(text: str, seed: int) -> bytes:
        body = dict(model="kokoro", input=text, input_type="phonemes", voice="random")
        return post(server, dict(json={**body, "seed": seed, "response_format": "pcm"})).content

    alone = [call(*x) for x in inputs]
    health: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            t0 = time.monotonic()
            assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
            health.append(time.monotonic() - t0)
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    with ThreadPoolExecutor(len(inputs)) as pool:
        together = list(pool.map(lambda x: call(*x), inputs))
    done.set()
    poller.join()
    assert together == alone
    for (text, seed), data in zip(inputs, together):
        check_audio("pcm", data, reference(tts, text, seed=seed, phonemes=True))
    assert len(health) >= 5 and max(health) < 1.0, health


def test_too_many_streams_get_429_and_closing_frees_them(server):
    body = dict(
        model="kokoro", input=LONG, input_type="phonemes", voice="random", response_format="pcm"
    )
    with httpx.Client(timeout=60) as http:
        held = []
        for _ in range(4):  # --max-streams 4
            r = http.send(
                http.build_request("POST", f"{server.url}/v1/audio/speech", json=body), stream=True
            )
            assert r.status_code == 200
            held.append(r)
        r = http.post(f"{server.url}/v1/audio/speech", json=GOOD)
        assert r.status_code == 429, r.text
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "too_many_streams"
        for r in held:
            r.close()
    wait_for(lambda: metrics(server)["kokoro_streams_open"] == 0)
    assert post(server, dict(json={**GOOD, "response_format": "pcm"})).status_code == 200


def test_admission_refuses_what_it_cannot_serve_in_time(artifacts):
    """This build is slower than real time, so a server that keeps first audio within 1 ms
    admits one stream (an idle server refuses no one) and refuses the next while it plays: 503,
    Retry-After, an OpenAI error; /health and /metrics say so. The same server wants an API
    key: without it, 401 first."""
    srv = ServerProcess(artifacts, "--first-audio", "0.001", "--no-warmup", "--api-key", "sesame")
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.post(f"{srv.url}/v1/audio/speech", json=GOOD, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sesame", max_retries=0)
        assert {m.id for m in client.models.list().data} >= {"kokoro", "tts-1"}
        auth = {"Authorization": "Bearer sesame"}
        body = dict(model="kokoro", input=LONG, input_type="phonemes", voice="random")
        http = httpx.Client(timeout=60, headers=auth)
        playing = http.send(
            http.build_request("POST", f"{srv.url}/v1/audio/speech", json=body), stream=True
        )
        assert playing.status_code == 200  # alone on the server
        r = http.post(f"{srv.url}/v1/audio/speech", json=GOOD)
        playing.close()
        http.close()
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) >= 1
        err = r.json()["error"]
        assert err["code"] == "overloaded" and err["type"] == "server_error"
        assert httpx.get(f"{srv.url}/health").json()["status"] == "ok"
        m = parse(httpx.get(f"{srv.url}/metrics").text)
        assert m['kokoro_requests_rejected_total{reason="overloaded"}'] == 1
    finally:
        srv.stop()


def test_metrics_page(server):
    assert post(server, dict(json={**GOOD, "response_format": "pcm"})).status_code == 200
    text = httpx.get(f"{server.url}/metrics").text
    m = parse(text)
    for name in (
        "kokoro_queue_depth",
        "kokoro_time_to_first_audio_seconds_count",
        "kokoro_real_time_factor",
        "kokoro_late_chunks_total",
        "kokoro_chunks_total",
        "process_resident_memory_bytes",
    ):
        assert name in m, name
    assert m["kokoro_time_to_first_audio_seconds_count"] >= 1
    assert m['kokoro_requests_total{path="/v1/audio/speech",status="200"}'] >= 1
    assert "# TYPE kokoro_time_to_first_audio_seconds histogram" in text


def test_serve_options_are_checked_before_loading(artifacts, capsys):
    from kokoro_tvm.runtime import cli

    for argv, needle in (
        (["--load-factor", "2"], "--load-factor"),
        (["--voices-dir", "/nowhere"], "is not a folder"),
        (["--workers", "-1"], "workers"),
    ):
        rc = cli.main(["serve", "--artifacts", str(artifacts), *argv])
        err = capsys.readouterr().err
        assert rc == 1 and err.startswith("error: ") and needle in err, err


def test_readme_serve_examples_run(server, tmp_path):
    """The README's curl line and openai example, as written but for the address."""
    import re
    import shlex
    import subprocess

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Serve\n", 1)[1].split("\n## ", 1)[0]
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    curl = re.search(r"^curl .*\n(?:  .*\n)*", bash, re.M).group(0)
    curl = curl.replace("\\\n", " ").replace("localhost:8880", server.url.split("//")[1])
    out = tmp_path / "hello.mp3"
    argv = [a if a != "hello.mp3" else str(out) for a in shlex.split(curl)]
    argv = [a.replace('"af_heart"', '"random"') for a in argv]  # this build's voice
    subprocess.run(argv, check=True, timeout=120)
    assert decode(out.read_bytes())[0].size > 0
    code = re.search(r"```python\n(from openai import OpenAI.*?)```", section, re.S).group(1)
    code = code.replace("http://127.0.0.1:8880", server.url).replace("...", "pieces.append(piece)")
    ns: dict = {"pieces": []}
    exec(compile(code, "README.md", "exec"), ns)
    assert len(b"".join(ns["pieces"])) > 24000  # over half a second of 16-bit audio
