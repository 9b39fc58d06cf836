"""The speech request, read and checked field by field so each refusal names its field.

The body is OpenAI's ``POST /v1/audio/speech`` (what the ``openai`` client sends: ``model``,
``input``, ``voice`` as a name or ``{"id": ...}``, ``response_format``, ``speed``,
``stream_format``, ``instructions``), plus a few fields of this server's own, all optional:

* ``lang``: the text's language (kokoro's ``lang_code`` letter or kokoro-onnx's ``lang``); by
  default the voice's (``af_*`` American English, ``bf_*`` British, ``jf_*`` Japanese, ...);
* ``input_type``: ``"text"`` (default) or ``"phonemes"`` (Kokoro/misaki phonemes, no G2P);
* ``seed``: seeds the decoder's noise, so the same request gives the same samples (default 0);
* ``stream``: accepted for Kokoro-FastAPI's clients and ignored: the audio always streams
  (``captioned_speech`` reads it: false sends one JSON document).

Unknown fields are ignored, as new OpenAI clients may send fields this server does not know.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .encoders import MEDIA_TYPES
from .errors import APIError, invalid
from .voices import check_model

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
STREAM_FORMATS = ("audio", "sse")
INPUT_TYPES = ("text", "phonemes")


@dataclass(frozen=True)
class SpeechRequest:
    model: str
    input: str
    voice: Any  # a name, a blend, or {"id": ...}: VoiceBook.resolve checks it
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    lang: str | None = None
    input_type: str = "text"
    seed: int = 0
    stream: bool = True


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise invalid(
            f"the request body is not valid JSON ({e}); send a JSON object such as "
            '{"model": "kokoro", "input": "Hello.", "voice": "af_heart"}',
            code="invalid_json",
        ) from None


def speech_request(doc: Any, max_input_chars: int) -> SpeechRequest:
    """A checked ``SpeechRequest`` from a parsed body, or the ``APIError`` for its first bad
    field."""
    if not isinstance(doc, dict):
        raise invalid("the request body must be a JSON object", code="invalid_json")
    for name in ("model", "input", "voice"):
        if name not in doc or doc[name] is None:
            raise invalid(
                f"missing required parameter: '{name}'", name, "missing_required_parameter"
            )
    model = check_model(doc["model"])
    text = doc["input"]
    if not isinstance(text, str):
        raise invalid("'input' must be a string", "input", "invalid_type")
    if not text.strip():
        raise invalid("'input' is empty: give the text to speak", "input", "empty_input")
    if len(text) > max_input_chars:
        raise invalid(
            f"'input' is {len(text)} characters, more than this server's limit of "
            f"{max_input_chars} (--max-input-chars); split it into several requests",
            "input",
            "string_above_max_length",
        )
    fmt = _choice(doc, "response_format", "mp3", tuple(MEDIA_TYPES))
    speed = doc.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise invalid(f"'speed' must be a number, got {speed!r}", "speed", "invalid_type")
    lo, hi = SPEED_RANGE
    if not lo <= speed <= hi:
        raise invalid(
            f"'speed' is {speed}; it must be between {lo} and {hi}", "speed", "invalid_value"
        )
    stream_format = _choice(doc, "stream_format", "audio", STREAM_FORMATS)
    input_type = _choice(doc, "input_type", "text", INPUT_TYPES)
    lang = doc.get("lang", doc.get("lang_code"))
    if lang is not None and (not isinstance(lang, str) or not lang.strip()):
        raise invalid("'lang' must be a language code such as 'en-us' or 'a'", "lang")
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise invalid(f"'seed' must be a whole number >= 0, got {seed!r}", "seed")
    instructions = doc.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid(
            "'instructions' must be a string (it is accepted and ignored)", "instructions"
        )
    stream = doc.get("stream", True)
    if not isinstance(stream, bool):
        raise invalid("'stream' must be true or false", "stream")
    return SpeechRequest(
        model, text, doc["voice"], fmt, float(speed), stream_format, lang, input_type, seed, stream
    )


def _choice(doc: dict, name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = doc.get(name, default)
    if value is None:
        return default
    if value not in allowed:
        raise APIError(
            400,
            f"'{name}' is {value!r}; it must be one of {', '.join(allowed)}",
            param=name,
            code="invalid_value",
        )
    return value


#: the request body's JSON schema, for the OpenAPI page at /docs
SPEECH_SCHEMA = {
    "type": "object",
    "required": ["model", "input", "voice"],
    "properties": {
        "model": {"type": "string", "example": "kokoro"},
        "input": {"type": "string", "example": "Hello world."},
        "voice": {
            "oneOf": [
                {"type": "string", "example": "af_heart"},
                {"type": "object", "properties": {"id": {"type": "string"}}},
            ]
        },
        "response_format": {"type": "string", "enum": list(MEDIA_TYPES), "default": "mp3"},
        "speed": {"type": "number", "minimum": SPEED_RANGE[0], "maximum": SPEED_RANGE[1]},
        "stream_format": {"type": "string", "enum": list(STREAM_FORMATS), "default": "audio"},
        "instructions": {"type": "string", "description": "accepted and ignored"},
        "lang": {"type": "string", "description": "default: the voice's language"},
        "input_type": {"type": "string", "enum": list(INPUT_TYPES), "default": "text"},
        "seed": {"type": "integer", "minimum": 0, "default": 0},
        "stream": {"type": "boolean", "description": "audio always streams"},
    },
}
