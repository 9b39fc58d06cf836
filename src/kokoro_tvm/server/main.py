"""``kokoro-tvm serve``: load the model once, warm every worker, then serve on uvicorn.

The port opens only when the workers are warm, and the line ``listening on http://HOST:PORT``
(with the real port when ``--port 0`` asked for any free one) says the server is ready.

uvicorn runs with this server's connection class (``connections.py``: a deadline for reading
each request, a limit on connections), no WebSocket support (nothing here speaks it), request
heads of at most ``MAX_HEAD`` bytes, and keep-alive connections closed after
``KEEP_ALIVE`` idle seconds.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass

from .engine import Engine, ServerConfig
from .logs import WarningLog
from .metrics import Metrics

log = logging.getLogger("kokoro_tvm.server")

#: bytes of a request's head (request line and headers) at most; h11's own default
MAX_HEAD = 16 * 1024
#: seconds an idle keep-alive connection is kept
KEEP_ALIVE = 5
#: seconds between two looks at the event loop's lag
LAG_EVERY = 0.05


@dataclass(frozen=True)
class HttpConfig:
    """Where the server listens and how it treats connections (``serve``'s options of the same
    names)."""

    host: str = "127.0.0.1"
    port: int = 8880  # 0: any free one
    log_level: str = "info"
    access_log: bool = False
    read_timeout: float = 10.0  # seconds a request may take to arrive, head and body
    max_connections: int = 256


def run(config: ServerConfig, http: HttpConfig = HttpConfig()) -> None:
    import uvicorn

    from .app import create_app
    from .connections import protocol

    logging.basicConfig(level=http.log_level.upper(), format="%(levelname)s: %(message)s")
    # the runtime's warnings (a cut utterance, dropped symbols) go to the log once per kind
    warning_log = WarningLog()
    warning_log.install()
    engine = Engine(config)
    warning_log.count_in(engine.metrics)
    log.info(
        "target %s; %d worker(s) x %d TVM thread(s); cuts: %s",
        engine.tts.target,
        engine.scheduler.config.workers,
        engine.scheduler.config.threads_per_worker,
        config.cuts.name,
    )
    engine.start()
    app = create_app(engine, http.read_timeout)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=http.host,
            port=http.port,
            log_level=http.log_level,
            access_log=http.access_log,
            lifespan="off",
            timeout_graceful_shutdown=5,
            http=protocol(http.read_timeout, http.max_connections),
            ws="none",
            timeout_keep_alive=KEEP_ALIVE,
            h11_max_incomplete_event_size=MAX_HEAD,
        )
    )
    try:
        asyncio.run(_serve(server, http.host, engine.metrics))
    finally:
        engine.stop()


async def _serve(server, host: str, metrics: Metrics) -> None:
    lag = asyncio.create_task(_watch_lag(metrics))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # it could not bind: uvicorn said why; exit with its status
            raise SystemExit(1)
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"kokoro-tvm serve: listening on http://{shown}:{bound}", file=sys.stderr, flush=True)
    try:
        await task
    finally:
        lag.cancel()


async def _watch_lag(metrics: Metrics) -> None:
    """How late the event loop wakes from a short sleep: the longest pause anything running on
    it (the HTTP layer, admission's hand-off) imposed on every connection."""
    metrics.histogram(
        "event_loop_lag_seconds",
        f"How late the event loop woke from each {LAG_EVERY:g} s sleep.",
        (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    )
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(LAG_EVERY)
        metrics.observe("event_loop_lag_seconds", max(0.0, time.monotonic() - t0 - LAG_EVERY))
