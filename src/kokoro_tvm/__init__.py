"""kokoro-tvm-pipeline: compile Kokoro-82M into cached, per-bucket TVM libraries, and speak with
them.

    from kokoro_tvm import KokoroTVM
    tts = KokoroTVM.from_manifest("artifacts")
    audio, sample_rate = tts.create("Hello world.", voice="jf_alpha")

The runtime is imported on first use of one of its names (PEP 562), so the pipeline's stages,
which import this package for everything else, neither load it nor depend on its code.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

#: the public names and the module each lives in (relative to this package); the runtime's load
#: TVM, the errors do not
_PUBLIC = {
    "KokoroTVM": "runtime.synthesizer",
    "Synthesis": "runtime.synthesizer",
    "ChunkAudio": "runtime.synthesizer",
    "KokoroTVMError": "errors",
    "InputError": "errors",
    "ArtifactError": "artifacts",
    "BucketError": "runtime.libraries",
    "VoiceError": "runtime.voices",
    "ToolchainError": "toolchain",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'kokoro_tvm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
