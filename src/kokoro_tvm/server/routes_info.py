"""What the server says about itself: the web page, ``/health``, ``/metrics``, the models and
the voices. None of it waits for a worker, so it answers at once however busy they are."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, Response

from . import page
from .engine import Engine
from .errors import APIError
from .metrics import CONTENT_TYPE
from .voices import MODEL, MODEL_ALIASES


def add_routes(app: FastAPI, engine: Engine) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page.PAGE)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 and ``"ready": true`` once English text input (G2P) is loaded and every worker
        is alive and warm; else 503, ``not_ready`` saying what is missing. ``precision``
        says what each component's libraries compute in."""
        doc = _health(engine)
        return JSONResponse(doc, status_code=200 if doc["ready"] else 503)

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(engine.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model(m, engine) for m in (MODEL, *MODEL_ALIASES)]}

    @app.get("/v1/models/{model}")
    async def one_model(model: str) -> dict[str, Any]:
        if model not in (MODEL, *MODEL_ALIASES):
            raise APIError(404, f"model {model!r} does not exist", code="model_not_found")
        return _model(model, engine)

    @app.get("/v1/audio/voices")
    async def voices(legacy: bool = False) -> dict[str, Any]:
        """Kokoro-FastAPI's ``{"voices": [{"id", "name"}]}``; ``?legacy=true``: names."""
        return engine.voices.listing(legacy)


def _health(engine: Engine) -> dict[str, Any]:
    s = engine.scheduler
    missing = []
    if engine.text_ready is not None:
        missing.append(f"English text input (G2P): {engine.text_ready}")
    workers, alive = s.config.workers, s.workers_alive()
    if alive < workers:
        missing.append(f"{workers - alive} of {workers} workers have stopped")
    elif s.warm < workers:
        missing.append(
            f"{workers - s.warm} of {workers} workers not warm yet (started with "
            "--no-warmup: each warms on its first chunk)"
        )
    return {
        "status": "not ready" if missing else "ok",
        "ready": not missing,
        "not_ready": missing,
        "streams": s.open_streams(),
        "queue_depth": s.queue_depth(),
        "workers": workers,
        "workers_warm": s.warm,
        "workers_busy": s.busy,
        "precision": engine.precision,
    }


def _model(name: str, engine: Engine) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": int(engine.started),
        "owned_by": "kokoro-tvm",
        "root": MODEL,
    }
