"""Property-based tests of what users type: the CLI's arguments, ``create()``/``__call__``'s
inputs, and the manifest's fields. Whatever Hypothesis generates, the only exceptions allowed
out are the project's own (``KokoroTVMError``: one ``error:`` line in the CLI), argparse's usage
errors (exit status 2), and nothing else: no traceback.

Runs are reproducible (``derandomize``: a fixed seed) and bounded (``max_examples`` per
property, a deadline-free budget of about a minute each on the tiny test build). A planted bare
exception, reachable only by some inputs, must be found: the negative control.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_project import runtime_artifacts

from kokoro_tvm import artifacts as A
from kokoro_tvm.errors import KokoroTVMError
from kokoro_tvm.runtime import cli
from kokoro_tvm.runtime import options as speech_options
from kokoro_tvm.runtime.synthesizer import KokoroTVM

FUZZ = settings(
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

# symbols of the vocabulary, with punctuation and space, and symbols outside it
PHONEME_CHARS = "həlˈOwɜɹdðɪsæpˌ ,.!?;:—…" + "ŋʃʒθʊʌ" + "你好ЖÆ\t\n\u200b😀"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


@pytest.fixture(scope="module")
def tts(artifacts) -> KokoroTVM:
    return KokoroTVM.from_manifest(artifacts)


def only_our_errors(call) -> None:
    """Run ``call``; the project's errors are answers, any other exception fails the property."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except KokoroTVMError:
            pass


phonemes = st.text(alphabet=PHONEME_CHARS, max_size=40)
speeds = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0.3, max_value=3.0),
    st.integers(-3, 5),
    st.just("1.0"),
    st.none(),
)
seeds = st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.just("7"), st.booleans())
voices = st.one_of(
    st.just("random"),
    st.just("random"),
    st.text(max_size=12),
    st.sampled_from(["random,random", "random:2,random:-1", "a:b:c", ":", ",", "/nonexistent.pt"]),
    st.builds(
        lambda shape, fill: np.full(shape, fill, np.float32),
        st.sampled_from([(256,), (1, 256), (510, 1, 256), (3, 7), (1, 1, 128), (0,)]),
        st.sampled_from([0.1, np.nan, np.inf]),
    ),
    st.none(),
)
langs = st.one_of(
    st.none(), st.sampled_from(["en-us", "a", "en-gb", "xx", ""]), st.text(max_size=5)
)


def check_api(tts: KokoroTVM, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(
        text=phonemes,
        voice=voices,
        speed=speeds,
        seed=seeds,
        lang=langs,
        style=st.sampled_from(["create", "call", "stream"]),
    )
    def prop(text, voice, speed, seed, lang, style):
        def call():
            kw = {"voice": voice, "speed": speed, "seed": seed, "is_phonemes": True}
            if lang is not None:
                kw["lang"] = lang
            if style == "create":
                tts.create(text, **kw)
            elif style == "call":
                for _ in tts(text, **kw):
                    pass
            else:
                kw.pop("is_phonemes"), kw.pop("lang", None)
                for _ in tts.stream(text, kw.pop("voice"), **kw):
                    pass

        only_our_errors(call)

    prop()


def test_api_inputs_raise_only_our_errors(tts):
    check_api(tts, examples=120)


def test_the_api_fuzzing_finds_a_planted_bare_exception(tts, monkeypatch):
    """Negative control: a ``KeyError`` behind speeds above 2.5 only is found, and reported as
    itself (not swallowed as one of our errors)."""
    real = speech_options.check_speed

    def planted(speed):
        real(speed)
        if speed > 2.5:
            raise KeyError("planted")

    monkeypatch.setattr(speech_options, "check_speed", planted)
    with pytest.raises(KeyError, match="planted"):
        check_api(tts, examples=120)


flag_values = {
    "--speed": st.sampled_from(["1", "0", "-1", "nan", "inf", "2.5", "x", ""]),
    "--seed": st.sampled_from(["0", "-1", "9" * 30, "1.5", "x"]),
    "--threads": st.sampled_from(["0", "1", "-1", "64", "x"]),
    "--voice": st.sampled_from(["random", "", "nope", "random:1,random:2", "x.pt", ","]),
    "--format": st.sampled_from(["pcm16", "float32", "mp3"]),
    "--target": st.sampled_from(["generic", "x86_64_v4", "", "none"]),
}


def check_cli(artifacts: Path, tmp: Path, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(
        text=phonemes,
        flags=st.dictionaries(st.sampled_from(sorted(flag_values)), st.none(), max_size=4),
        values=st.data(),
        output=st.sampled_from(["out.wav", "-", "missing/out.wav", ".", ""]),
        timestamps=st.sampled_from([None, "ts.json", "-", "out.wav", "missing/ts.json"]),
        switches=st.lists(st.sampled_from(["--stream", "--strict", "--cuts=fast"]), max_size=2),
    )
    def prop(text, flags, values, output, timestamps, switches):
        argv = ["synth", "--artifacts", str(artifacts), "--phonemes", text, "-q"]
        argv += ["-o", str(tmp / output) if output not in ("-", "") else output]
        if timestamps is not None:
            argv += ["--timestamps", timestamps if timestamps == "-" else str(tmp / timestamps)]
        for flag in flags:
            argv += [flag, values.draw(flag_values[flag])]
        argv += switches
        stdout = io.BytesIO()
        with (
            contextlib.redirect_stderr(io.StringIO()) as err,
            contextlib.redirect_stdout(io.TextIOWrapper(stdout)),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            try:
                rc = cli.main(argv)
            except SystemExit as e:  # argparse's usage error: one line, status 2
                rc = e.code
        assert rc in (0, 1, 2), (argv, rc)
        assert "Traceback" not in err.getvalue(), err.getvalue()
        if rc == 1:
            assert err.getvalue().count("error:") == 1, err.getvalue()
        for leftover in tmp.glob(".*.tmp*"):  # nothing half-written, ever
            raise AssertionError(f"{leftover} left behind by {argv}")

    prop()


def test_cli_arguments_give_one_error_line_or_speech(artifacts, tmp_path):
    check_cli(artifacts, tmp_path, examples=60)


def _mutations(doc, path=()):
    """Every path into a JSON document, for the manifest fuzzer to replace or delete."""
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _mutations(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:2]):
            yield from _mutations(v, (*path, i))


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=5,
)


def check_manifest(artifacts: Path, tmp: Path, examples: int) -> None:
    original = json.loads(A.manifest_file(artifacts).read_text())
    paths = [p for p in _mutations(original) if p]
    root = tmp / "fuzzed"
    root.mkdir()
    for item in artifacts.iterdir():  # the real libraries and weights, a manifest of our own
        if item.name != A.manifest_file(artifacts).name:
            os.symlink(item, root / item.name)

    top = [p for p in paths if len(p) == 1]  # half the examples edit a top-level key

    @settings(FUZZ, max_examples=examples)
    @given(
        path=st.one_of(st.sampled_from(top), st.sampled_from(paths)),
        value=json_values,
        delete=st.booleans(),
    )
    def prop(path, value, delete):
        doc = json.loads(json.dumps(original))
        node = doc
        for key in path[:-1]:
            node = node[key]
        if delete and isinstance(node, dict):
            del node[path[-1]]
        else:
            node[path[-1]] = value
        A.manifest_file(root).write_text(json.dumps(doc))

        def call():
            tts = KokoroTVM.from_manifest(root)
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                if cli.main(["info", "--artifacts", str(root)]) == 1:
                    raise KokoroTVMError("info refused it")  # its one line is on stderr
            tts.plan("ɐn", "random")
            for entry in tts.manifest.of_target(tts.target):  # every library verified and loaded
                tts.libraries.get(entry.component, entry.bucket)
            if {"inputs", "outputs", "length_axes", "shapes"} & set(map(str, path)):
                tts.create("ɐn", voice="random", is_phonemes=True)  # the decoder is slow

        only_our_errors(call)

    prop()


def test_manifest_fields_raise_only_our_errors(artifacts, tmp_path):
    check_manifest(artifacts, tmp_path, examples=80)


def test_the_manifest_fuzzing_finds_a_planted_bare_exception(artifacts, tmp_path, monkeypatch):
    """Negative control: with the manifest check taught to ignore the types of a library
    entry's fields, the fuzzer finds a crash that a wrong type then causes."""
    from kokoro_tvm.runtime import manifest

    real = manifest._expect

    def lax(doc, key, kind, path, where=""):
        if not where.startswith("libraries["):
            real(doc, key, kind, path, where)

    monkeypatch.setattr(manifest, "_expect", lax)
    with pytest.raises(Exception) as caught:
        check_manifest(artifacts, tmp_path, examples=80)
    assert not isinstance(caught.value, KokoroTVMError)
    shutil.rmtree(tmp_path / "fuzzed", ignore_errors=True)


def test_speed_and_seed_checks_are_exact():
    """The boundaries the fuzzers lean on, stated once."""
    for ok in (0.25, 1, 4.0):
        speech_options.check_speed(ok)
    for bad in (0, -1, math.nan, math.inf, True, "1"):
        with pytest.raises(KokoroTVMError):
            speech_options.check_speed(bad)
    for ok in (0, 2**70):
        speech_options.check_seed(ok)
    for bad in (-1, 1.0, True, "0"):
        with pytest.raises(KokoroTVMError):
            speech_options.check_seed(bad)
