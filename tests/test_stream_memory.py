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
import weakref

import numpy as np
import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm.runtime import cli, decoder
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


def _draws_alive_at_each_decode(tts: KokoroTVM, monkeypatch, **fields) -> list[int]:
    """For each chunk of a stream, how many earlier chunks' noise arrays were still alive when
    its decode began (the consumer keeps only the chunk it was last given, as a loop does)."""
    module = sys.modules["kokoro_tvm.runtime.stream"]  # the package exports a function of that name
    drawn: list[weakref.ref] = []
    alive: list[int] = []

    def watched(libs, chunk, rng):
        alive.append(sum(ref() is not None for ref in drawn))
        decoded = decoder.decode(libs, chunk, rng)
        buffer = decoded.noise  # the memory itself: the array a view of it was cut from
        while isinstance(buffer.base, np.ndarray):
            buffer = buffer.base
        drawn.append(weakref.ref(buffer))
        return decoded

    monkeypatch.setattr(module, "decode", watched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny buckets cut the input
        for _part in tts.stream(SENTENCE * 6, "random", **fields):
            pass
    return alive


def test_the_next_decode_holds_no_earlier_draws(tts, monkeypatch):
    """The decoder's noise is as large as its biggest activation at kokoro's longest utterance:
    a stream that held the last chunk's while decoding the next would peak that much higher."""
    alive = _draws_alive_at_each_decode(tts, monkeypatch)
    assert len(alive) >= 3 and alive == [0] * len(alive), alive
    # negative control: chunks that keep their draws, the last one held by the loop
    kept = _draws_alive_at_each_decode(tts, monkeypatch, keep_draws=True)
    assert kept[1:] and all(n >= 1 for n in kept[1:]), kept


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
