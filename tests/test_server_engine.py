"""The server's engine on a stand-in runtime: what it does once loaded, before serving."""

from __future__ import annotations

import gc
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from kokoro_tvm.runtime.manifest import Model
from kokoro_tvm.server.engine import Engine, ServerConfig


class Standin:
    """Shaped like ``KokoroTVM`` where the engine reads it, with nothing to compute."""

    def __init__(self) -> None:
        self.manifest = SimpleNamespace(model=Model("tiny", "random", seed=0))
        self.voices = ["af_heart"]

    def voice_pack(self, name: str) -> np.ndarray:
        return np.zeros((510, 1, 256), np.float32)

    def __call__(self, *args, **kwargs):
        yield from ()


def test_what_the_server_loaded_is_frozen_out_of_the_collector():
    """A full collection walks every tracked object while it holds the GIL: with a server's
    lexicons and tables (~300k objects) that is a pause of every thread, /health included.
    After start, what was loaded is frozen, so a full collection skips it; the control (the
    same objects, no start) leaves them to the collector."""
    gc.unfreeze()
    loaded = [[i] for i in range(100_000)]  # stands for what loading creates
    assert gc.get_freeze_count() < len(loaded)  # the control
    engine = Engine(ServerConfig(artifacts=Path("."), warmup=False), tts=Standin())
    try:
        engine.start()
        assert gc.get_freeze_count() >= len(loaded)
    finally:
        engine.stop()
        gc.unfreeze()
    del loaded
