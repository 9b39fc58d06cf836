"""What clients may send, fuzzed: every body is either a request or an OpenAI-shaped refusal
(``APIError``), never another exception (which would be a 500). No server needed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kokoro_tvm.server.errors import APIError
from kokoro_tvm.server.schema import SpeechRequest, parse_json, speech_request
from kokoro_tvm.server.voices import parse_blend

LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
#: top-level leaves as often as containers (``st.recursive`` alone mostly gives containers)
VALUE = st.one_of(
    LEAF,
    st.recursive(
        LEAF,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=8,
    ),
)
FIELDS = [
    "model",
    "input",
    "voice",
    "response_format",
    "speed",
    "stream_format",
    "lang",
    "input_type",
    "seed",
    "stream",
    "instructions",
    "lang_code",
    "volume_multiplier",
    "normalization_options",
    "return_download_link",
    "download_format",
    "return_timestamps",
]
GOOD = {"model": "kokoro", "input": "Hello.", "voice": "af_heart"}


def check(doc) -> None:
    try:
        req = speech_request(doc, max_input_chars=100)
    except APIError as e:
        body = e.body()["error"]
        assert e.status in (400, 404) and body["message"] and body["type"]
        json.dumps(e.body())  # it serializes
        return
    assert isinstance(req, SpeechRequest) and 0.25 <= req.speed <= 4.0


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.sampled_from(FIELDS), VALUE)
def test_one_field_of_any_value(field, value):
    """A good request with one field replaced by anything JSON can hold."""
    check({**GOOD, field: value})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(FIELDS), VALUE, max_size=8), VALUE)
def test_any_body_is_a_request_or_an_openai_error(fields, other):
    check(fields)
    check(other)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_any_bytes_are_json_or_a_400(raw):
    try:
        parse_json(raw)
    except APIError as e:
        assert e.status == 400 and e.code == "invalid_json"


def test_deep_nesting_is_a_400_not_a_crash():
    with pytest.raises(APIError, match="not valid JSON"):
        parse_json(b"[" * 100_000 + b"]" * 100_000)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=40))
def test_any_voice_spec_parses_or_is_refused(spec):
    try:
        parts = parse_blend(spec)
    except APIError as e:
        assert e.status == 400 and e.param == "voice"
        return
    # a subtracted voice's weight is negative; a blend starts with a voice it adds
    assert parts and parts[0][1] > 0 and all(w != 0 for _, w in parts)
