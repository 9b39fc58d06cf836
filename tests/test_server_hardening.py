"""``kokoro-tvm serve`` against clients that misbehave: a real server process on loopback, fed
by raw sockets (clients that stall, hang up or read slowly) and httpx.

Uses the runtime test build (``runtime_project``: tiny config, random weights, chunks of a
fraction of a second). Every wait is bounded by a timeout, and nothing leaves loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from runtime_project import runtime_artifacts
from server_process import ServerProcess, wait_for

from kokoro_tvm.server.admission import Overloaded
from kokoro_tvm.server.metrics import Metrics, parse
from kokoro_tvm.server.scheduler import Scheduler
from kokoro_tvm.server.streams import AHEAD_SECONDS, SchedulerConfig

KEY = "sesame"
AUTH = {"Authorization": f"Bearer {KEY}"}
ORIGIN = "http://page.test"
SEND_TIMEOUT = 3
SPEECH = dict(model="kokoro", input="həlˈO", input_type="phonemes", voice="random")
LONG = " ".join(["ɐn ˈOpən, wˈAt"] * 12)  # dozens of chunks, over 10 s of audio
#: the main server: its clients must send the key and a whole request within a second, at most
#: 8 connections are served at once, and a client that takes nothing is dropped after 3 s
ARGS = (
    "--workers",
    "1",
    "--no-admission",
    "--api-key",
    KEY,
    "--allow-origin",
    ORIGIN,
    "--read-timeout",
    "1",
    "--max-connections",
    "8",
    "--send-timeout",
    str(SEND_TIMEOUT),
    "--log-level",
    "debug",
)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def server(artifacts):
    srv = ServerProcess(artifacts, *ARGS)
    yield srv
    assert srv.alive(), f"the server went down:\n{srv.log}"
    srv.stop()


def metrics(server) -> dict[str, float]:
    return parse(httpx.get(f"{server.url}/metrics", timeout=30).text)


def address(server) -> tuple[str, int]:
    host, port = server.url.split("//")[1].rsplit(":", 1)
    return host, int(port)


def connect(server, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:  # before connecting, so that the window is small from the start
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect(address(server))
    return s


def post_head(body: bytes, length: int | None = None, path: str = "/v1/audio/speech") -> bytes:
    n = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {n}\r\n\r\n"
    ).encode()


def read_all(s: socket.socket) -> bytes:
    """What the server sends until it closes the connection (within the socket's timeout)."""
    out = b""
    while piece := s.recv(65536):
        out += piece
    return out


def new_lines(server, since: int) -> list[str]:
    return server.lines[since:]


# -- input ---------------------------------------------------------------------------------------
def test_lone_surrogates_are_refused_and_pairs_spoken(server):
    url = f"{server.url}/v1/audio/speech"
    for field, raw in (
        ("input", b'"Hi \\ud800 there"'),
        ("input", b'"\\udc00"'),
        ("voice", b'"\\ud83d"'),
    ):
        doc = {"model": "kokoro", "input": "Hi.", "voice": "random"}
        body = json.dumps(doc).replace(f'"{doc[field]}"', raw.decode()).encode()
        r = httpx.post(url, content=body, headers=AUTH, timeout=60)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == field and err["code"] == "invalid_unicode", err
        assert "surrogate" in err["message"]
    # a pair is one character (an emoji), which the G2P leaves out: speech all the same
    body = b'{"model": "kokoro", "input": "Hi \\ud83d\\ude00 there.", "voice": "random"}'
    r = httpx.post(url, content=body, headers=AUTH, timeout=120)
    assert r.status_code == 200 and r.content


def test_bad_bodies_are_4xx_never_500(server):
    url = f"{server.url}/v1/audio/speech"
    bodies = [
        b"\xff\xfe\x00",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model": "kokoro", "input": "a", "voice": "random", "seed": ' + b"9" * 5000 + b"}",
        b'{"model": "kokoro", "input": "\\u0000", "voice": "random"}',
        b'{"model": "kokoro", "input": ["Hi"], "voice": {"id": {"id": 1}}}',
        b'{"model": "kokoro", "input": "Hi", "voice": "random", "speed": NaN}',
        b'{"\\ud800": 1}',
    ]
    for body in bodies:
        r = httpx.post(url, content=body, headers=AUTH, timeout=60)
        assert 400 <= r.status_code < 500, (body[:40], r.status_code, r.text)
        assert r.json()["error"]["message"]
    assert (
        metrics(server).get('kokoro_requests_total{path="/v1/audio/speech",status="500"}', 0) == 0
    )


# -- clients that leave, stall or read slowly --------------------------------------------------
def test_a_client_that_hangs_up_mid_body_is_one_debug_line(server):
    key = 'kokoro_requests_total{path="/v1/audio/speech",status="%s"}'
    before, since = metrics(server), len(server.lines)
    with connect(server) as s:
        s.sendall(post_head(b"", length=1000) + b'{"model": "ko')
    wait_for(lambda: metrics(server).get(key % "499", 0) == before.get(key % "499", 0) + 1)
    assert metrics(server).get(key % "500", 0) == before.get(key % "500", 0)
    lines = new_lines(server, since)
    assert not [x for x in lines if "Traceback" in x or x.startswith(("ERROR", "WARNING"))], lines
    assert sum("left before its request was read" in x for x in lines) == 1, lines


def test_stalled_sockets_are_closed_and_limited(server):
    """Sockets that send nothing, half a head or half a body: past --max-connections a request
    gets 503; within --read-timeout (1 s) the idle ones are closed, a late head gets 408, a
    late body 408 from its handler; then requests are served again."""
    half_body = connect(server)  # first: its request is within the limit
    half_body.sendall(post_head(b"", length=200) + b'{"model": "kokoro", ')
    silent = [connect(server) for _ in range(4)]
    half_head = [connect(server) for _ in range(4)]
    for s in half_head:
        s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: te")
    r = httpx.get(f"{server.url}/v1/models", headers=AUTH, timeout=30)
    assert r.status_code == 503, r.text  # 10 connections open, the limit is 8
    assert r.json()["error"]["code"] == "too_many_connections" and r.headers["retry-after"]
    for s in silent:
        assert read_all(s) == b""  # closed, nothing said: it asked nothing
    for s in half_head:
        head, _, body = read_all(s).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), head
        assert "not received within 1 s" in json.loads(body)["error"]["message"]
    head, _, body = read_all(half_body).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), head
    assert json.loads(body)["error"]["code"] == "request_timeout"
    for s in (*silent, *half_head, half_body):
        s.close()
    r = httpx.get(f"{server.url}/v1/models", headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text


def test_a_slow_reader_holds_a_few_seconds_of_audio_made_then_is_dropped(server):
    """A client that reads nothing (and lets its kernel take only a few KiB): the server makes
    at most AHEAD_SECONDS of audio beyond what it received, plus one chunk, however much the
    kernel's send buffer could hold; after --send-timeout its stream is dropped."""
    before = metrics(server)
    body = json.dumps({**SPEECH, "input": LONG, "response_format": "pcm"}).encode()
    with connect(server, rcvbuf=4096) as s:
        s.sendall(post_head(body) + body)
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        assert got.startswith(b"HTTP/1.1 200 "), got

        def settled():  # nothing running, nothing more made for a while
            m1 = metrics(server)
            time.sleep(1.0)
            m2 = metrics(server)
            same = m2["kokoro_chunks_total"] == m1["kokoro_chunks_total"]
            return same and m2["kokoro_workers_busy"] == 0 and m2

        m = wait_for(settled, timeout=60)
        made = m["kokoro_audio_seconds_total"] - before["kokoro_audio_seconds_total"]
        chunks = m["kokoro_chunks_total"] - before["kokoro_chunks_total"]
        chunk = made / chunks
        kernel = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) / 48000  # pcm: 48 kB/s
        assert made <= AHEAD_SECONDS + chunk + kernel + 0.1, (made, chunks, kernel)
        assert m["kokoro_streams_open"] == 1  # held, not dropped yet
        key = 'kokoro_streams_cancelled_total{reason="aborted"}'
        wait_for(lambda: metrics(server).get(key, 0) == before.get(key, 0) + 1, timeout=30)
        assert metrics(server)["kokoro_streams_open"] == 0
    full = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={**SPEECH, "input": LONG, "response_format": "pcm"},
        headers=AUTH,
        timeout=300,
    )
    assert len(full.content) / 48000 > 2 * (AHEAD_SECONDS + chunk) + kernel  # it held back


def test_malformed_requests_and_upgrades_log_no_warnings(server):
    since = len(server.lines)
    for raw in (
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 20000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    ):
        with connect(server) as s:
            s.sendall(raw)
            try:
                head = s.recv(4096)
            except ConnectionResetError:  # a head too large is refused unread
                continue
            assert head.split(b" ")[1][:1] in (b"2", b"4"), head[:80]
    time.sleep(0.5)
    lines = new_lines(server, since)
    assert not [x for x in lines if x.startswith(("WARNING", "ERROR"))], lines


# -- the scheduler's side of it, on stand-in streams ----------------------------------------------
def test_a_paced_stream_runs_ahead_of_what_its_client_received_in_seconds():
    """Chunks of 1.5 s, taken at once by the response (as a socket's buffers take them): only
    what the client received lets the stream go on, AHEAD_SECONDS of audio ahead of it."""
    from test_server_scheduler import Log, consume, fake_stream, scheduler

    log = Log()

    async def main():
        sched = scheduler(max_ahead=100)
        s = sched.reserve(10, 1.0, asyncio.get_running_loop())
        s.paced = True
        sched.attach(s, fake_stream(log, "S", 20, audio_s=1.5, cost_s=0.01))
        taken: list = []
        reader = asyncio.create_task(consume(sched, s, taken))
        await asyncio.sleep(0.3)
        held = len(log.runs)
        assert not sched.received(s, 3.0)  # two chunks received: it may go on
        await asyncio.sleep(0.3)
        after = len(log.runs)
        assert sched.received(s, 3.0)  # and waits again
        assert not sched.received(s, 30.0)
        await asyncio.wait_for(reader, 10)
        sched.stop()
        return held, after

    held, after = asyncio.run(main())
    assert held == 3  # 4.5 s made: the third chunk went past AHEAD_SECONDS beyond nothing
    assert after == 5  # received 3 s: made 7.5 s
    assert len(log.runs) == 20


def test_admission_runs_off_the_event_loop():
    """While admission decides (held here until released), the event loop goes on."""
    decided = threading.Event()
    entered = threading.Event()

    class Held(Scheduler):
        def _fits(self, *args):
            entered.set()
            decided.wait(10)
            return super()._fits(*args)

    async def main():
        sched = Held(Metrics(), SchedulerConfig(workers=1))
        first = await sched.admit(10, 1.0)  # an idle server admits without the test
        task = asyncio.create_task(sched.admit(10, 1.0))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, entered.wait, 10)
        ticks = 0
        while ticks < 5:  # the loop turns while the test is held
            await asyncio.sleep(0.01)
            ticks += 1
        assert not task.done()
        decided.set()
        try:
            sched.close(await asyncio.wait_for(task, 10))
        except Overloaded:  # what it decided does not matter here
            pass
        sched.close(first)
        sched.stop()

    asyncio.run(main())


# -- warnings --------------------------------------------------------------------------------------
def test_warnings_are_logged_once_per_kind_and_counted(server):
    """Each request drops a different symbol (a warning quoting it): one line in the log for all
    of them, and each counted."""
    key = 'kokoro_warnings_total{category="UserWarning"}'
    before, since = metrics(server), len(server.lines)
    for symbol in "ЖЗИЙК":
        body = {**SPEECH, "input": f"həlˈO {symbol}", "response_format": "pcm"}
        r = httpx.post(f"{server.url}/v1/audio/speech", json=body, headers=AUTH, timeout=120)
        assert r.status_code == 200, r.text
    assert metrics(server)[key] == before.get(key, 0) + 5
    logged = [x for x in new_lines(server, since) if "outside the Kokoro phoneme vocabulary" in x]
    assert len([x for x in logged if x.startswith("WARNING")]) <= 1, logged


def test_the_warning_log_remembers_kinds_not_messages():
    from kokoro_tvm.server.logs import MAX_KINDS, WarningLog

    log = WarningLog()
    with warnings.catch_warnings():
        log.install()
        for i in range(1000):
            warnings.warn(f"user text {i}", UserWarning, stacklevel=1)
        for i in range(MAX_KINDS + 10):  # as many places as it remembers, and more
            log.show(f"x {i}", UserWarning, "somewhere.py", i)
    assert len(log.kinds) == MAX_KINDS
    registry = globals().get("__warningregistry__", {})
    assert not [k for k in registry if isinstance(k, tuple) and "user text" in str(k[0])]


# -- the HTTP surface ----------------------------------------------------------------------------
def test_bearer_scheme_is_case_insensitive_the_key_is_not(server):
    url = f"{server.url}/v1/models"
    for given, status in (
        (f"Bearer {KEY}", 200),
        (f"bearer {KEY}", 200),
        (f"BEARER  {KEY}", 200),
        (f"Bearer {KEY.upper()}", 401),
        (f"Basic {KEY}", 401),
        (KEY, 401),
        ("", 401),
    ):
        r = httpx.get(url, headers={"Authorization": given}, timeout=30)
        assert r.status_code == status, (given, r.text)


def test_head_works_on_every_get_route(server):
    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    paths = ["/", *(p for p, ops in spec["paths"].items() if "get" in ops)]
    assert {"/", "/health", "/metrics", "/v1/models", "/v1/audio/voices"} <= set(paths)
    for path in paths:
        url = f"{server.url}{path.replace('{model}', 'kokoro')}"
        get = httpx.get(url, headers=AUTH, timeout=30)
        head = httpx.head(url, headers=AUTH, timeout=30)
        assert head.status_code == get.status_code != 405, (path, head.status_code)
        assert head.content == b""
        assert head.headers["content-type"] == get.headers["content-type"], path


def test_no_page_loads_anything_from_elsewhere(server):
    """FastAPI's /docs and /redoc load their scripts from a CDN, blank offline: they are off,
    the schema stays; the page at / loads nothing from another host."""
    for path in ("/docs", "/redoc"):
        assert httpx.get(f"{server.url}{path}", timeout=30).status_code == 404
    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    assert "/v1/audio/speech" in spec["paths"]
    page = httpx.get(f"{server.url}/", timeout=30).text
    assert (
        "http://" not in page and "https://" not in page and "//" not in page.split("<script>")[0]
    )


def test_cors_takes_the_openai_clients_headers(server):
    asked = [
        "authorization",
        "content-type",
        "x-stainless-os",
        "x-stainless-lang",
        "x-stainless-package-version",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-arch",
        "x-stainless-retry-count",
        "x-stainless-timeout",
        "openai-organization",
        "openai-project",
    ]
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": ",".join(asked),
    }
    r = httpx.options(f"{server.url}/v1/audio/speech", headers=preflight, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == ORIGIN
    allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
    assert set(asked) <= allowed
    refused = {**preflight, "Access-Control-Request-Headers": "x-stainless-os, x-other"}
    r = httpx.options(f"{server.url}/v1/audio/speech", headers=refused, timeout=30)
    assert r.status_code == 400 and "x-other" in r.text
    elsewhere = {**preflight, "Origin": "http://elsewhere.test"}
    r = httpx.options(f"{server.url}/v1/audio/speech", headers=elsewhere, timeout=30)
    assert "access-control-allow-origin" not in r.headers


# -- readiness and a burst ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cold_server(artifacts, tmp_path_factory, monkeypatch_module):
    """A server whose workers start cold (--no-warmup) and whose G2P cannot load (a spaCy
    that fails to import comes first on its path)."""
    fake = tmp_path_factory.mktemp("no-spacy")
    (fake / "spacy").mkdir()
    (fake / "spacy" / "__init__.py").write_text(
        "raise ImportError('no spaCy here', name='spacy')\n"
    )
    monkeypatch_module.setenv("PYTHONPATH", os.pathsep.join([str(fake), *_pythonpath()]))
    srv = ServerProcess(artifacts, "--no-warmup", "--workers", "1")
    yield srv
    assert srv.alive(), f"the server went down:\n{srv.log}"
    srv.stop()


def _pythonpath() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_health_says_ready_only_with_g2p_and_warm_workers(cold_server):
    r = httpx.get(f"{cold_server.url}/health", timeout=30)
    assert r.status_code == 503, r.text
    doc = r.json()
    assert doc["ready"] is False and doc["status"] == "not ready"
    reasons = " | ".join(doc["not_ready"])
    assert "English text input (G2P)" in reasons and "spacy" in reasons.lower(), reasons
    assert "not warm yet" in reasons, reasons
    # a phoneme request needs no G2P: it warms the one worker
    r = httpx.post(f"{cold_server.url}/v1/audio/speech", json=SPEECH, timeout=120)
    assert r.status_code == 200, r.text
    doc = httpx.get(f"{cold_server.url}/health", timeout=30).json()
    assert doc["workers_warm"] == 1 and len(doc["not_ready"]) == 1, doc
    assert doc["not_ready"][0].startswith("English text input (G2P)")


def test_a_burst_of_200_requests_is_answered_and_the_loop_keeps_turning(cold_server):
    """200 requests at once (admission on): each gets its audio or a 429/503 with Retry-After,
    and the event loop never pauses long (``kokoro_event_loop_lag_seconds``): admission runs
    on its own thread."""
    url = f"{cold_server.url}/v1/audio/speech"
    start = threading.Barrier(200)

    def one(i: int) -> int:
        with httpx.Client(timeout=300) as http:
            start.wait(timeout=60)
            r = http.post(url, json={**SPEECH, "seed": i, "response_format": "pcm"})
            if r.status_code != 200:
                assert r.headers["retry-after"] and r.json()["error"]["message"], r.text
            return r.status_code

    with ThreadPoolExecutor(200) as pool:
        statuses = list(pool.map(one, range(200)))
    assert set(statuses) <= {200, 429, 503} and 200 in statuses, statuses
    m = parse(httpx.get(f"{cold_server.url}/metrics", timeout=30).text)
    count = m["kokoro_event_loop_lag_seconds_count"]
    late = count - m['kokoro_event_loop_lag_seconds_bucket{le="0.25"}']
    assert count > 0 and late == 0, (count, late)


# -- the page with an API key, in a browser -----------------------------------------------------
@pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("chromedriver")),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)
def test_the_page_asks_for_the_api_key_and_plays(server, tmp_path):
    from test_server_page import WebDriver

    browser = WebDriver(tmp_path)
    try:
        browser.go(server.url + "/")
        shown = wait_for(lambda: browser.js("return !document.getElementById('keyform').hidden"))
        assert shown
        assert "API key" in browser.js("return document.getElementById('status').textContent")
        browser.js(
            "document.getElementById('key').value = arguments[0];"
            "document.getElementById('usekey').click();",
            KEY,
        )
        voices = wait_for(
            lambda: browser.js(
                "return [...document.querySelectorAll('#voice option')].map(o => o.value)"
            )
        )
        assert "random" in voices
        browser.js(
            "document.getElementById('voice').value = 'random';"
            "document.getElementById('text').value = arguments[0];"
            "document.getElementById('speak').click();",
            "Hello world, this page plays the speech as it streams.",
        )
        wait_for(
            lambda: browser.js("return document.getElementById('player').currentTime") > 0.5,
            timeout=120,
        )
    finally:
        browser.quit()
