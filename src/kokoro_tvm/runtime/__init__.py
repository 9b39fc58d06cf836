"""Synthesis from built artifacts with numpy and the TVM runtime only (no torch, no kokoro).

``synthesizer.KokoroTVM`` (also ``from kokoro_tvm import KokoroTVM``) is the API; beneath it
``libraries`` (a target's verified libraries), ``planner`` (utterances and durations),
``decoder`` (one chunk's audio) and ``stream`` (chunks out, joined, timed). ``cli`` is the
``kokoro-tvm`` command.

TVM is imported by ``synthesizer`` (``tvm_import``), not here, so that the command line can ask
for TVM's runtime library alone before anything imports it.
"""
