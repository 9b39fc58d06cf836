"""The web page at ``/`` in a real browser: Debian's headless Chromium, driven over the W3C
WebDriver protocol (Debian's ``chromedriver``, spoken with plain HTTP), autoplay allowed.

The page loads, lists the server's voices, and when its button is pressed plays the speech as it
streams: the audio element's ``currentTime`` passes 1 s. CI installs both packages
(``.ci/run``); a machine without them skips this module.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import httpx
import pytest
from runtime_project import runtime_artifacts
from server_process import ServerProcess, wait_for

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)
#: the flags that keep Chromium quiet on a machine without network, and let it play unprompted
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--mute-audio",
]
#: speech of several seconds (dozens of chunks on the test build): the player must pass 1 s
#: while the stream is still coming
TEXT = (
    "Hello world, this page plays the speech as the server streams it, chunk by chunk, so the "
    "first words are heard while the rest of this rather long sentence is still being made, "
    "and a listener never waits for the whole of it."
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few WebDriver commands the test needs: a session, navigate, run a script."""

    def __init__(self, tmp_path):
        port = free_port()
        self.proc = subprocess.Popen(
            [DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(timeout=60)
        wait_for(self._ready, timeout=30)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"],
                    },
                }
            }
        }
        r = self.http.post(f"{self.base}/session", json=caps)
        r.raise_for_status()
        self.session = f"{self.base}/session/{r.json()['value']['sessionId']}"

    def _ready(self) -> bool:
        try:
            return self.http.get(f"{self.base}/status").json()["value"]["ready"]
        except (httpx.HTTPError, KeyError, ValueError):
            return False

    def go(self, url: str) -> None:
        self.http.post(f"{self.session}/url", json={"url": url}).raise_for_status()

    def js(self, script: str, *args):
        r = self.http.post(f"{self.session}/execute/sync", json={"script": script, "args": args})
        r.raise_for_status()
        return r.json()["value"]

    def quit(self) -> None:
        try:
            self.http.delete(self.session)
        finally:
            self.proc.terminate()
            self.proc.wait(10)


def test_page_plays_the_stream_as_it_arrives(tmp_path_factory, tmp_path):
    artifacts = runtime_artifacts(tmp_path_factory)
    server = ServerProcess(artifacts, "--no-admission", "--workers", "2")
    browser = WebDriver(tmp_path)
    try:
        browser.go(server.url + "/")
        voices = wait_for(
            lambda: browser.js(
                "return [...document.querySelectorAll('#voice option')].map(o => o.value)"
            )
        )
        assert "random" in voices
        assert browser.js("return MediaSource.isTypeSupported('audio/mpeg')")
        browser.js(
            "document.getElementById('voice').value = 'random';"
            "document.getElementById('text').value = arguments[0];"
            "document.getElementById('speak').click();",
            TEXT,
        )
        played = wait_for(
            lambda: (
                (t := browser.js("return document.getElementById('player').currentTime")) > 1 and t
            ),
            timeout=120,
        )
        status = browser.js("return document.getElementById('status').textContent")
        assert played > 1 and status.startswith("Playing: first audio after"), status
        assert "streamed" not in status, status  # the page had not read the whole response yet
        wait_for(
            lambda: (
                "streamed" in browser.js("return document.getElementById('status').textContent")
            ),
            timeout=120,
        )
    finally:
        browser.quit()
        assert server.alive(), server.log
        server.stop()
