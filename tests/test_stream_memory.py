"""A stream's memory does not grow with its length: each chunk's audio and draws are gone once
it is written, in the API and in the CLI's ``-o -``.

numpy reports its buffers to ``tracemalloc``, so the traced peak is the arrays a stream holds.
The tiny test build cuts a long input into many small chunks; ten times the chunks must not
raise the peak by more than a fraction of one chunk's arrays. The full-size figure (20 chunks
of ~400 phonemes against one, peak RSS) is ``benchmarks/once/stream_memory.py``.
"""

from __future__ import annotations

import io
import sys
import tracemalloc
import warnings

import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm.runtime import cli
from kokoro_tvm.runtime.synthesizer import KokoroTVM

SENTENCE = "həlˈO wˈɜɹld. "


@pytest.fixture(scope="module")
def tts(tmp_path_factory) -> KokoroTVM:
    return KokoroTVM.from_manifest(runtime_artifacts(tmp_path_factory))


def _peak(run) -> tuple[int, int]:
    """(traced peak bytes above the start, what ``run`` returned: chunks)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny buckets cut the input
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        try:
            n = run()
            return tracemalloc.get_traced_memory()[1] - base, n
        finally:
            tracemalloc.stop()


def _stream(tts: KokoroTVM, repeats: int, keep: list | None = None) -> int:
    n = 0
    for part in tts.stream(SENTENCE * repeats, "random"):
        n += 1
        if keep is not None:
            keep.append(part)
    return n


def test_a_stream_ten_times_longer_peaks_no_higher(tts):
    _stream(tts, 2)  # load every library before measuring
    short, n_short = _peak(lambda: _stream(tts, 3))
    long, n_long = _peak(lambda: _stream(tts, 30))
    assert n_long >= 10 * n_short // 2 and n_long >= 40
    per_chunk = short / n_short
    assert long - short < 2 * per_chunk, (short, long, n_short, n_long)
    # negative control: a consumer that keeps every chunk (what the CLI did) grows with length
    kept: list = []
    grown, _ = _peak(lambda: _stream(tts, 30, kept))
    assert grown - short > 10 * per_chunk


def test_cli_stdout_stream_peaks_no_higher(tts, monkeypatch):
    """``kokoro-tvm synth -o -`` with ten times the input: the same peak (stdout discarded)."""

    class Null(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            return len(b)

    def run(repeats: int) -> int:
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(Null())))
        argv = ["synth", "--artifacts", str(tts.libraries.root), "--voice", "random", "-q"]
        assert cli.main([*argv, "--phonemes", SENTENCE * repeats, "-o", "-"]) == 0
        return repeats

    run(2)
    short, _ = _peak(lambda: run(3))
    long, _ = _peak(lambda: run(30))
    assert long - short < short, (short, long)
