"""Validation's per-language cases (``eval.cases.language_cases``): one sentence of each of
kokoro's nine languages, with its voice, made into each component's inputs as kokoro makes them,
and stored beside the length cases in the reference stage's file (``eval.case_files``).

Tiny random-weight kokoro, no TVM: what is checked is how the cases are made and kept; every
library's verdicts on them come from the validate stage (tests/test_dvc_graph.py's pipeline).
"""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval import verdicts
from kokoro_tvm.eval.case_files import case_length, cases_from_arrays, cases_to_arrays
from kokoro_tvm.eval.cases import language_cases, reference_cases, sentence_inputs
from kokoro_tvm.eval.eager import as_float64
from kokoro_tvm.eval.languages import SENTENCES, english_text
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.runtime.voices import random_style


@pytest.fixture(scope="module")
def tiny():
    cfg = load_model_config("tiny")
    km = build_kmodel(cfg, "random", 0)
    return cfg, km, as_float64(km)


#: a pack per fixture voice (random rows: the voices stage's files are not built here)
PACKS = {s.voice: random_style(i, 256) for i, s in enumerate(SENTENCES)}


def test_every_language_is_a_case_with_kokoros_token_ids(tiny):
    cfg, km, km64 = tiny
    cases = language_cases("text_encoder", 512, km, km64, cfg, PACKS)
    assert sorted(cases) == sorted(f"lang_{s.lang}" for s in SENTENCES)
    for s in SENTENCES:
        case = cases[s.key]
        ids = case["inputs"][0][0]
        n = case_length(s.key, case)
        assert n == len(s.phonemes) + 2  # every fixture symbol is in the vocabulary
        assert ids[0] == 0 and ids[n - 1] == 0 and not ids[n:].any()
        assert [cfg["vocab"][c] for c in s.phonemes] == ids[1 : n - 1].tolist()


def test_a_sentence_longer_than_the_bucket_is_left_out(tiny):
    cfg, km, km64 = tiny
    longest = max(len(s.phonemes) for s in SENTENCES)
    cases = language_cases("duration", longest + 1, km, km64, cfg, PACKS)  # one token short
    assert len(cases) == len(SENTENCES) - sum(len(s.phonemes) == longest for s in SENTENCES)
    # a voice the build lacks leaves its language out instead of validating another voice
    assert len(language_cases("duration", 512, km, km64, cfg, {})) == 0


def test_decoder_cases_take_float64_kokoros_durations(tiny):
    cfg, _, km64 = tiny
    s = SENTENCES[0]
    made = sentence_inputs("decoder", 4096, s.phonemes, PACKS[s.voice], cfg, km64)
    assert made is not None
    inputs, frames = made
    assert int(inputs[2][0]) == frames  # frame_lengths
    assert sentence_inputs("decoder", frames - 1, s.phonemes, PACKS[s.voice], cfg, km64) is None


def test_named_cases_round_trip_beside_the_lengths(tiny):
    """The file keeps length cases exactly as before (their keys, in order), with the named ones
    after them; a library's output judged on a case read back equals one judged on the case."""
    cfg, km, km64 = tiny
    frames = sorted(
        sentence_inputs("decoder", 4096, s.phonemes, PACKS[s.voice], cfg, km64)[1]
        for s in SENTENCES
    )
    bucket = frames[1]  # the two shortest sentences fit
    cases = reference_cases("decoder", bucket, km, km64, cfg, PACKS[SENTENCES[0].voice], [3, 9])
    named = language_cases("decoder", bucket, km, km64, cfg, PACKS)
    assert len(named) == 2
    arrays = cases_to_arrays("decoder", {**cases, **named}, cfg)
    assert set(cases_to_arrays("decoder", cases, cfg)) <= set(arrays)
    back = cases_from_arrays("decoder", bucket, arrays, cfg)
    assert list(back) == [3, 9, *sorted(named)]
    for key, case in named.items():
        for a, b in zip(case["inputs"], back[key]["inputs"]):
            np.testing.assert_array_equal(a, b)
        got = [case["r32"][0]]
        assert verdicts.judge("decoder", back[key], got) == verdicts.judge("decoder", case, got)


def test_only_english_sentences_have_a_text_to_recognize():
    keys = {s.key: s for s in SENTENCES}
    assert english_text("lang_a") == keys["lang_a"].text
    assert english_text("lang_b") == keys["lang_b"].text
    assert all(english_text(k) is None for k in keys if k not in ("lang_a", "lang_b"))
    assert english_text("3") is None


def test_a_named_key_cannot_hold_the_separator(tiny):
    cfg, km, km64 = tiny
    (case,) = language_cases(
        "duration", 512, km, km64, cfg, {SENTENCES[0].voice: PACKS[SENTENCES[0].voice]}
    ).values()
    with pytest.raises(ValueError, match="separates"):
        cases_to_arrays("duration", {"lang__a": case}, cfg)
