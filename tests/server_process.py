"""A real ``kokoro-tvm serve`` process on loopback for tests, and decoding what it sends.

The server runs as its users run it: the console command in its own process, on a free port
(``--port 0``), ready when it prints ``listening on http://...``. Decoding uses PyAV (FFmpeg's
decoders), a different code path from the server's encoders for every format but wav/pcm, which
are also read back with the runtime's own WAV reader.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

SR = 24000
READY = re.compile(r"listening on (http://\S+)")


class ServerProcess:
    """``kokoro-tvm serve --artifacts A --port 0 ARGS...`` until ``stop()``."""

    def __init__(self, artifacts: Path, *args: str, timeout: float = 240.0):
        cmd = [
            sys.executable,
            "-m",
            "kokoro_tvm.runtime.cli",
            "serve",
            "--artifacts",
            str(artifacts),
            "--port",
            "0",
            "--log-level",
            "warning",
            *args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        ready = threading.Event()
        self.url = ""

        def read() -> None:
            for line in self.proc.stderr:
                self.lines.append(line)
                m = READY.search(line)
                if m:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout) or not self.url:
            self.stop()
            raise RuntimeError(f"the server did not start:\n{self.log}")

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def decode(data: bytes, rate: int = SR) -> tuple[np.ndarray, int]:
    """Any of the server's formats but pcm, decoded whole by FFmpeg: float32 mono at ``rate``
    (Opus decodes at 48 kHz and is resampled), and the decoder's own sample rate."""
    import av

    out: list[np.ndarray] = []
    with av.open(io.BytesIO(data)) as container:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        native = None
        for frame in container.decode(audio=0):
            native = frame.sample_rate
            out += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
        out += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return (np.concatenate(out) if out else np.zeros(0, np.float32)), native


def decode_s16(data: bytes) -> np.ndarray:
    """A lossless format (flac, wav) decoded to its 16-bit samples."""
    import av

    out: list[np.ndarray] = []
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            arr = frame.to_ndarray().reshape(-1)
            assert frame.format.name in ("s16", "s16p"), frame.format.name
            out.append(arr)
    return np.concatenate(out)


def align(ref: np.ndarray, got: np.ndarray, max_lag: int = 4096) -> np.ndarray:
    """``got`` shifted by the lag that best matches ``ref`` (a lossy codec's start delay)."""
    n = min(ref.size, got.size) - max_lag
    best = max(
        range(0, max_lag + 1),
        key=lambda lag: float(np.dot(ref[: n // 2], got[lag : lag + n // 2])),
    )
    return got[best:]


def wait_for(check, timeout: float = 30.0, every: float = 0.1):
    """Poll ``check()`` until it returns something true; that value, or an AssertionError."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {check}")
        time.sleep(every)
