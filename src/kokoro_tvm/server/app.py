"""The HTTP API: OpenAI's speech endpoints, captioned speech, voices, models, health, metrics and
the web page, as one FastAPI app over an ``Engine``.

Nothing slow runs on the event loop: request checks, the voice and the G2P run on the engine's
prep thread, synthesis on the scheduler's workers, encoding on the encode threads. The loop only
moves bytes, so ``/health`` answers at once however busy the workers are.

Each speech response is one stream: admitted by the scheduler, prepared (``intake.py``), then
fed chunk by chunk from the workers through one encoder to the socket (``streaming.py``;
Kokoro-FastAPI's ``"stream": false`` gathers it into one body first, ``fastapi_compat.py``,
which also holds Kokoro-FastAPI's own routes). When the client leaves, the response's
``finally`` cancels the stream's remaining chunks.

The routes are grouped by concern (``routes_info.py``, ``routes_speech.py``,
``fastapi_compat.py``), what every request passes through is ``middleware.py``, and errors get
OpenAI's shape in ``errors.py``.
"""

from __future__ import annotations

from fastapi import FastAPI

from . import errors, middleware, routes_info, routes_speech
from .engine import Engine
from .families import declare_http
from .fastapi_compat import Compat
from .intake import READ_TIMEOUT


def create_app(engine: Engine, read_timeout: float = READ_TIMEOUT) -> FastAPI:
    """The app; ``read_timeout``: seconds a request's body may take to arrive."""
    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN, so they are blank on
    # a machine offline; the schema they would show is /openapi.json.
    app = FastAPI(
        title="kokoro-tvm",
        summary="OpenAI-compatible speech from Kokoro-82M compiled with TVM",
        docs_url=None,
        redoc_url=None,
    )
    app.state.read_timeout = read_timeout
    declare_http(engine.metrics)
    middleware.install(app, engine.config, engine.metrics)
    errors.add_handlers(app)
    compat = Compat(engine)
    routes_info.add_routes(app, engine)
    routes_speech.add_routes(app, engine, compat)
    compat.add_routes(app)
    return app
