"""``kokoro-tvm serve``: load the model once, warm every worker, then serve on uvicorn.

The port opens only when the workers are warm, and the line ``listening on http://HOST:PORT``
(with the real port when ``--port 0`` asked for any free one) says the server is ready.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import warnings

from .engine import Engine, ServerConfig

log = logging.getLogger("kokoro_tvm.server")


def run(
    config: ServerConfig,
    host: str = "127.0.0.1",
    port: int = 8880,
    log_level: str = "info",
    access_log: bool = False,
) -> None:
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s: %(message)s")
    # the runtime's warnings (a cut utterance, dropped symbols) go to the log, once per place
    # they come from rather than once per request; other packages' deprecations not at all
    logging.captureWarnings(True)
    warnings.simplefilter("default")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    engine = Engine(config)
    log.info(
        "target %s; %d worker(s) x %d TVM thread(s); chunk limits %s phonemes",
        engine.tts.target,
        engine.scheduler.workers,
        engine.scheduler.threads_per_worker,
        list(config.chunk_limits),
    )
    engine.start()
    app = create_app(engine)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            lifespan="off",
            timeout_graceful_shutdown=5,
        )
    )
    try:
        asyncio.run(_serve(server, host))
    finally:
        engine.stop()


async def _serve(server, host: str) -> None:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # it could not bind: uvicorn said why; exit with its status
            raise SystemExit(1)
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"kokoro-tvm serve: listening on http://{shown}:{bound}", file=sys.stderr, flush=True)
    await task
