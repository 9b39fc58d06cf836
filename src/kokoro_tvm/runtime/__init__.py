"""Synthesis from built artifacts with numpy and the TVM runtime only (no torch, no kokoro).

Entry points: ``kokoro_tvm.runtime.synthesizer.KokoroTVM`` and the ``kokoro-tvm`` CLI.
"""
