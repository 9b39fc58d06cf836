"""Text in as people write it: kokoro's whole call surface and input of any length.

* kokoro's README loop and a list of strings against kokoro's own ``KPipeline`` (a quiet one,
  ``model=False``, around the runtime's G2P) on Kokoro-82M's trained weights through eager
  kokoro (``eager_libraries``), ``split_pattern`` as ``KPipeline.__call__`` takes it;
* kokoro-onnx's ``create_stream`` and ``create(..., trim=True)`` against kokoro-onnx's own trim;
* input read a piece at a time (``g2p.reading``): a file read in any pieces, long paragraphs in
  sentence pieces, giving kokoro's utterances; the first chunk of a long input out before the
  G2P has read the input (tiny test build), and ``synth --text - --stream`` speaking before
  stdin ends, ended by Ctrl-C with status 130 and no file.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import random
import re
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from runtime_project import runtime_artifacts
from test_chunking import kpipeline

import kokoro_tvm
from kokoro_tvm.eval.samples import PARAGRAPHS
from kokoro_tvm.runtime import chunking
from kokoro_tvm.runtime import g2p as G
from kokoro_tvm.runtime import trim as T
from kokoro_tvm.runtime.chunking import InputError
from kokoro_tvm.runtime.g2p import en, reading, sentences
from kokoro_tvm.runtime.languages import resolve

VOICE = "jf_alpha"  # a voice the weights' package ships (offline); it reads English with lang="a"
README_TEXT = (
    "Kokoro is an open-weight TTS model. Despite its size, it sounds good.\n\n"
    "It is fast, and cheap!\nIs it?"
)
ITEMS = ["First item, with a line\nbreak that kokoro keeps in its segment.", "Second item!"]


@pytest.fixture(scope="module")
def g2p():
    try:
        return G.load_g2p(False)
    except G.G2PUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def tts(tmp_path_factory):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    return KokoroTVM.from_manifest(runtime_artifacts(tmp_path_factory))


def said(utts) -> list[tuple[str, str, list]]:
    return [
        (u.text, u.phonemes, [(t.text, t.phonemes, t.whitespace) for t in u.tokens]) for u in utts
    ]


def kokoros(g2p, text, **kw) -> list[tuple[str, str, list]]:
    return [
        (r.graphemes, r.phonemes, [(t.text, t.phonemes, t.whitespace) for t in r.tokens])
        for r in kpipeline(g2p)(text, **kw)
    ]


# -- kokoro's call surface, on the trained weights ---------------------------------------------


@pytest.fixture(scope="module")
def eager():
    from eager_libraries import EagerLibraries

    from kokoro_tvm.model.checkpoint import CheckpointError, load
    from kokoro_tvm.runtime.synthesizer import KokoroTVM
    from kokoro_tvm.runtime.voices import read_named_file, registry_voices_file

    try:
        cfg, km = load("kokoro-82m", "kokoro-onnx-int8")
        pack = read_named_file(registry_voices_file())[VOICE]
    except CheckpointError as e:  # the weights extra is part of `make test`'s install
        pytest.fail(f"Kokoro-82M's trained weights did not load: {e}")
    return KokoroTVM(EagerLibraries(km, cfg)), pack


def test_readme_loop_and_a_list_give_kokoros_results(eager, g2p):
    """kokoro's README loop, ``for gs, ps, audio in pipeline(text, voice=...)``, and a list of
    strings (one segment per item): the runtime's results are kokoro's, each with its audio."""
    tts, pack = eager
    for text in (README_TEXT, ITEMS):
        ours = []
        for gs, ps, audio in tts(text, voice=pack, lang="a"):
            assert audio.dtype == np.float32 and audio.size > 0 and np.isfinite(audio).all()
            ours.append((gs, ps))
        assert ours == [(r.graphemes, r.phonemes) for r in kpipeline(g2p)(text)]
        assert len(ours) > 1
    # controls: the items joined as one string are other segments (the line break splits one),
    # and the list's printed form, what a list was read as before, is other text
    joined = [(u.text, u.phonemes) for u in G.text_utterances("\n".join(ITEMS), "a")]
    assert joined != [(r.graphemes, r.phonemes) for r in kpipeline(g2p)(ITEMS)]
    printed = [(u.text, u.phonemes) for u in G.text_utterances(str(ITEMS), "a")]
    assert printed != [(r.graphemes, r.phonemes) for r in kpipeline(g2p)(ITEMS)]


@pytest.mark.parametrize("pattern", [r"\n+", None, r"[.!?]\s+", r"(\n)", r",\s*"])
def test_split_pattern_is_kokoros(tts, g2p, pattern):
    text = README_TEXT + "\n\n\nA last line, then the end."
    source = tts.source(text, "a", normalize=False, split_pattern=pattern)  # kokoro's text as is
    theirs = [(r.graphemes, r.phonemes) for r in kpipeline(g2p)(text, split_pattern=pattern)]
    assert [(u.text, u.phonemes) for u in source] == theirs
    default = [(r.graphemes, r.phonemes) for r in kpipeline(g2p)(text)]
    assert (theirs == default) == (pattern in (r"\n+", r"(\n)"))  # control: others split elsewhere


# -- any type, a clear error ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        (5, "text must be a str, a list of str .* or a text file .*; got a int"),
        (b"Hello.", "got a bytes \\(decode it first"),
        (None, "got None"),
        (["Hello.", 3], r"text\[1\] is a int"),
        ({"text": "Hello."}, "got a dict"),
        (io.BytesIO(b"Hello."), "open it in text mode"),
    ],
)
def test_any_other_text_is_a_clear_error(tts, g2p, text, message):
    with pytest.raises(InputError, match=message):
        list(tts(text, voice="af_heart"))
    with pytest.raises(InputError, match=message):
        tts.create(text, voice="af_heart")
    with pytest.raises(InputError, match="phonemes are one str"):
        tts.create(["həlˈO"], voice="af_heart", is_phonemes=True)
    with pytest.raises(InputError, match="split_pattern .* is not a regular expression"):
        tts.create("Hello.", voice="af_heart", split_pattern="(")


# -- kokoro-onnx's create_stream and trim --------------------------------------------------------


def test_create_stream_has_kokoro_onnxs_signature_and_yields_the_chunks(tts, g2p):
    from kokoro_onnx import Kokoro

    theirs = list(inspect.signature(Kokoro.create_stream).parameters)[1:7]
    ours = list(inspect.signature(tts.create_stream).parameters)[:6]
    assert ours == theirs == ["text", "voice", "speed", "lang", "is_phonemes", "trim"]
    assert list(inspect.signature(tts.create).parameters)[:6] == theirs
    text = "Hello there. How are you?"

    async def collect(**kw):
        return [piece async for piece in tts.create_stream(text, "af_heart", seed=3, **kw)]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test buckets cut the sentences
        pieces = asyncio.run(collect())
        parts = list(tts(text, "af_heart", seed=3))
        trimmed = asyncio.run(collect(trim=True))
    assert all(rate == 24000 for _, rate in pieces) and len(pieces) == len(parts) > 2
    assert all(np.array_equal(a, p.audio) for (a, _), p in zip(pieces, parts))
    assert [a.size for a, _ in trimmed] != [a.size for a, _ in pieces]  # control: trim=True trims

    async def first_only():
        stream = tts.create_stream(text, "af_heart")
        async for piece in stream:
            await stream.aclose()  # a consumer that stops early: the stream stops, no error
            return piece
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert asyncio.run(first_only())[0].size > 0
    with pytest.raises(InputError, match="speed must be a positive number"):
        tts.create_stream(text, "af_heart", speed=0)  # options: at the call
    with pytest.raises(InputError, match="text must be a str"):
        asyncio.run(collect_bad(tts))  # the text: when the first piece is awaited


async def collect_bad(tts):
    return [piece async for piece in tts.create_stream(5, "af_heart")]


def test_trim_is_kokoro_onnxs():
    """librosa's trim as kokoro-onnx calls it, on speech-like bursts in silence and noise."""
    from kokoro_onnx.trim import trim as theirs

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(600, 50_000))
        x = rng.standard_normal(n).astype(np.float32) * float(rng.choice([0, 1e-6, 1e-4]))
        a, b = sorted(rng.integers(0, n, 2))
        x[a:b] += rng.standard_normal(b - a).astype(np.float32) * float(rng.choice([1, 1e-2]))
        kept, span = T.trim(x)
        want, where = theirs(x)
        assert span == tuple(where) and np.array_equal(kept, want)
    x = np.concatenate([np.zeros(8000), np.ones(4000), np.full(8000, 2e-3)]).astype(np.float32)
    assert T.trim(x)[1] == tuple(theirs(x)[1]) == (7168, 20000)  # the tail is 54 dB down: kept
    assert theirs(x, top_db=50)[1].tolist() == [7168, 13312]  # control: the threshold matters


def test_create_trim_trims_each_chunk_and_pauses_after_it(tts, g2p):
    text = "Hello there, friend. Bye!"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = list(tts(text, "af_heart", seed=1))
        audio, rate = tts.create(text, "af_heart", seed=1, trim=True, sentence_pause=0.5)
        untrimmed, _ = tts.create(text, "af_heart", seed=1)
    want = []
    for p in parts:
        want.append(T.trim(p.audio)[0])
        pause = 0.0 if p.last else T.pause_after(p.phonemes, 0.5, T.CLAUSE_PAUSE)
        want.append(np.zeros(int(pause * rate), np.float32))
    assert rate == 24000 and np.array_equal(audio, np.concatenate(want))
    assert any(p.phonemes.endswith((".", ",")) for p in parts[:-1])  # pauses were added
    assert np.array_equal(untrimmed, np.concatenate([p.audio for p in parts]))  # default: kokoro's
    with pytest.raises(InputError, match="sentence_pause must be a number of seconds"):
        tts.create(text, "af_heart", trim=True, sentence_pause=-1)


# -- a piece at a time -----------------------------------------------------------------------------


def _rejoined(pieces) -> list[str]:
    out, segment = [], ""
    for piece, end in pieces:
        segment += piece
        if end:
            out.append(segment)
            segment = ""
    return out


@pytest.mark.parametrize("pattern", [r"\n+", r"\n", r"(\n)", r"[.!?]\s*", r"x*"])
def test_split_of_text_arriving_in_pieces_is_res(pattern):
    """``re.split(pattern, text.strip())``, kokoro's segments, however the text is cut up."""
    rng = random.Random(0)
    compiled = re.compile(pattern)
    for _ in range(300):
        text = "".join(rng.choice(["a", "b", " ", "\n", "\n\n", ".", "! "]) for _ in range(60))
        text = text.rstrip()  # a string's end is known: it is read without its trailing space
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, 8)))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        got = _rejoined(reading._split(parts, compiled))
        want = re.split(pattern, text.strip())
        assert [g for g in got if g.strip()] == [w for w in want if w.strip()], (text, parts)


def test_kokoro_chunks_of_text_arriving_in_pieces_are_kokoros():
    rng = random.Random(1)
    lang = resolve("f")
    for _ in range(200):
        words = [
            rng.choice(["Oui", "non", "peut-être", "là", "...", "!", "?", "."]) for _ in range(300)
        ]
        text = " ".join(words)
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, 20)))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        assert list(sentences.chunks(parts, lang, reading.Seen())) == sentences.kokoro_chunks(text)


def test_a_long_paragraph_in_sentence_pieces_gives_kokoros_utterances(g2p):
    """A paragraph longer than ``PIECE_CHARS`` reaches misaki in pieces cut after sentence ends;
    the utterances are kokoro's, which reads it whole."""
    paragraph = " ".join(p for p, _ in PARAGRAPHS) * 3  # ~5,700 characters, one paragraph
    assert len(paragraph) > 2 * en.PIECE_CHARS
    calls: list[int] = []

    def counted(text):
        calls.append(len(text))
        return g2p(text)

    ours = said(G.text_utterances(paragraph, g2p=counted, normalize=False))
    assert ours == kokoros(g2p, paragraph)
    assert len(calls) > 2 and max(calls) <= en.PIECE_CHARS
    # control: the check sees a cut in the wrong place (inside a word)
    cut = paragraph.index(" ", en.PIECE_CHARS // 2) - 2
    tokens = [t for part in (paragraph[:cut], paragraph[cut:]) for t in en._tokens(g2p, part)]
    assert said(en._grouped(iter(tokens), "none")) != ours


def test_text_read_from_a_file_in_small_pieces_is_the_strings(g2p, monkeypatch):
    text = (
        "# Notes\n\n" + "\n\n".join(p for p, _ in PARAGRAPHS[:4]) + "\n```\ncode\n\nmore\n```\nEnd."
    )
    whole = said(G.text_utterances(text, "a", g2p=g2p))
    monkeypatch.setattr(reading, "READ_CHARS", 7)
    monkeypatch.setattr(reading, "HOLD_CHARS", 5)
    assert said(G.text_utterances(io.StringIO(text), "a", g2p=g2p)) == whole
    assert said(G.text_utterances(text, "a", g2p=g2p)) == whole
    assert [u.phonemes for u in G.text_utterances(text, "a", g2p=g2p, normalize=False)] != [
        u for _, u, _ in whole
    ]  # control: the Markdown was read (its fence skipped, its heading said)


def test_markdown_read_in_blocks_is_the_whole_texts():
    doc = (
        "# Title\n\nSome *text* with a [link](https://example.com).\n\n```python\nx = 1\n\n"
        "y = 2\n```\n\n1. one\n\n2. two\n   more\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nEnd."
    )
    how = reading.Reading(resolve("a"))
    blocks = "".join(reading._said(reading._raw(doc), how, reading.Seen()))
    assert blocks.rstrip() == G.normalize_text(doc, "a")
    lines = list(reading._blocks(reading._lines([doc]), markdown=True))
    assert len(lines) > 4  # control: read in several blocks, the fence's blank line inside one


def test_a_megabyte_without_punctuation_is_read_in_pieces_with_a_warning(g2p):
    paragraph = "hello " * 200_000  # 1.2 million characters, no sentence end
    calls: list[int] = []

    def counted(text):
        calls.append(len(text))
        return g2p(text)

    how = reading.Reading(resolve("a"), first="sentence")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        utts = G.utterances(paragraph, how, counted)
        first = next(utts)
        assert len(calls) == 1 and calls[0] <= en.PIECE_CHARS  # the first piece alone was read
        later = [next(utts) for _ in range(20)]
        utts.close()
    # a run-on's first chunk is about a sentence (``chunking.run_on_cut``), then kokoro's 510
    assert first.phonemes.startswith("həlˈO") and len(first.phonemes) <= chunking.RUN_ON_FIRST
    assert all(480 < len(u.phonemes) <= 510 for u in later)
    assert len(calls) <= 8 and max(calls) <= en.PIECE_CHARS
    run_on = [w for w in caught if "without a sentence end" in str(w.message)]
    assert len(run_on) == 1, [str(w.message) for w in caught]  # said once, not per piece


# -- the first chunk before the whole input is read ------------------------------------------------


def _counting_g2p(monkeypatch):
    calls: list[str] = []
    real = G.load

    def load(lang):
        g = real(lang)
        return lambda text: (calls.append(text), g(text))[1]

    monkeypatch.setattr(G, "load", load)
    return calls


def test_a_long_inputs_first_chunk_comes_before_its_g2p_reads_the_input(tts, g2p, monkeypatch):
    """``tts(text)`` on 300 paragraphs: the first chunk is out after the G2P read one or two of
    them; the whole-input path (every utterance first, as the runtime read text before) had
    read all 300 (the negative control)."""
    calls = _counting_g2p(monkeypatch)
    text = "\n\n".join(f"Paragraph {i} says hello, friend." for i in range(300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test buckets cut the sentences
        stream = tts(text, "af_heart", cuts="sentences")
        first = next(stream)
        at_first = len(calls)
        stream.close()
    assert first.audio.size > 0 and first.graphemes.startswith("Paragraph")
    assert 1 <= at_first <= 2
    calls.clear()
    G.text_utterances(text, "a")  # the whole-input path
    assert len(calls) == 300  # control: read whole first, every paragraph went through the G2P


def test_a_file_is_read_only_as_far_as_the_first_chunk_needs(tts, g2p):
    class Counting(io.StringIO):
        read_chars = 0

        def readline(self, size=-1):
            line = super().readline(size)
            Counting.read_chars += len(line)
            return line

    text = "".join(f"Line {i}, said on its own.\n" for i in range(5000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = tts(Counting(text), "af_heart")
        next(stream)
        stream.close()
    assert 0 < Counting.read_chars < 200  # the first lines, not the 130,000 characters
    Counting.read_chars = 0
    G.text_utterances(Counting(text), "a")
    assert Counting.read_chars == len(text)  # control: read to its end, all of it is counted


# -- synth --text - --stream: stdin as it comes, Ctrl-C --------------------------------------------


@contextlib.contextmanager
def _sigint(handler) -> Iterator[None]:
    """SIGINT handled by ``handler`` in this process for the ``with`` body."""
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _started_as_in_a_terminal(argv: list[str], **kw) -> subprocess.Popen:
    """``Popen(argv)`` whose child starts with SIGINT at its default, as a command in a terminal's
    foreground does, however this test run was started. A run started in the background of a
    script (``make test &``: the shell starts it with SIGINT ignored) passes the ignored SIGINT
    on through exec, and Python keeps an inherited ignored SIGINT ignored, as every command
    should (its launcher asked for that): the CLI would not hear the test's Ctrl-C. exec resets
    a caught signal to its default, so this process catches SIGINT while the child starts."""
    with _sigint(signal.default_int_handler):
        return subprocess.Popen(argv, **kw)


def test_synth_streams_stdin_as_it_comes_and_ctrl_c_ends_it_cleanly(tts, g2p, tmp_path):
    """``synth --text - --stream`` speaks its first chunk while stdin is still open; Ctrl-C
    then ends it with status 130, no traceback, and no output file (none that claims to hold the
    whole text), also in a test run started with SIGINT ignored. Control: with stdin closed it
    completes and writes the file."""
    out = tmp_path / "story.wav"
    env = {**os.environ, "PYTHONPATH": str(Path(kokoro_tvm.__file__).parents[1])}
    argv = [sys.executable, "-m", "kokoro_tvm.runtime.cli", "synth", "--text", "-"]
    argv += ["--voice", "af_heart", "--stream", "-o", str(out)]
    argv += ["--artifacts", str(tts.libraries.root)]
    # this run's SIGINT as a terminal leaves it, and as a script's `make test &` does
    for launched, handler in (("caught", signal.default_int_handler), ("ignored", signal.SIG_IGN)):
        with _sigint(handler):
            proc = _started_as_in_a_terminal(
                argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
        watchdog = threading.Timer(600, proc.kill)  # a CLI that waits for stdin's end never speaks
        watchdog.start()
        try:
            proc.stdin.write(b"Once upon a time. There was a story.\n" * 3)
            proc.stdin.flush()
            seen = ""
            while "chunk 1:" not in seen:  # stdin stays open: the old CLI read it to its end first
                line = proc.stderr.readline().decode()
                assert line, f"the CLI ended before its first chunk: {seen}"
                seen += line
            proc.send_signal(signal.SIGINT)
            proc.stdin.close()  # a CLI that did not hear Ctrl-C ends at the input's end, status 0
            rest = proc.stderr.read().decode()
            rc = proc.wait(timeout=120)
        finally:
            watchdog.cancel()
            proc.kill()
        assert rc == 130, f"SIGINT {launched} where the tests run: {seen}{rest}"
        assert "Traceback" not in rest and "interrupted" in rest
        assert not out.exists() and not list(tmp_path.iterdir())  # no file, no temporary left
    done = subprocess.run(
        argv, input=b"Once upon a time.\n", capture_output=True, env=env, timeout=300
    )
    assert done.returncode == 0 and out.exists(), done.stderr.decode()


def test_a_reader_that_leaves_ends_synth_quietly(tts):
    """``synth -o -`` into a reader that closes after its first bytes (``| head -c``): the CLI
    ends as shell tools do on SIGPIPE, status 141 and no traceback. Control: the same command
    read to its end exits 0."""
    env = {**os.environ, "PYTHONPATH": str(Path(kokoro_tvm.__file__).parents[1])}
    argv = [sys.executable, "-m", "kokoro_tvm.runtime.cli", "synth", "--voice", "af_heart"]
    argv += ["--text", "Once upon a time. There was a story. " * 4, "--stream", "-o", "-"]
    argv += ["--artifacts", str(tts.libraries.root)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout.read(100)
    proc.stdout.close()
    rc = proc.wait(timeout=300)
    err = proc.stderr.read().decode()
    assert rc == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
    whole = subprocess.run(argv, capture_output=True, env=env, timeout=300)
    assert whole.returncode == 0 and len(whole.stdout) > 100, whole.stderr.decode()
