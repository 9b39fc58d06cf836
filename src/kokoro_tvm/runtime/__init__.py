"""Synthesis from built artifacts with numpy and the TVM runtime only (no torch, no kokoro).

``synthesizer.KokoroTVM`` (also ``from kokoro_tvm import KokoroTVM``) is the API; beneath it
``libraries`` (a target's verified libraries), ``planner`` (utterances and durations),
``decoder`` (one chunk's audio) and ``stream`` (chunks out, joined, timed). ``cli`` is the
``kokoro-tvm`` command.
"""

from .tvm_import import import_tvm

import_tvm()
