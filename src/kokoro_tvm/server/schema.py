"""The speech request, read and checked field by field so each refusal names its field.

The body is OpenAI's ``POST /v1/audio/speech`` (what the ``openai`` client sends: ``model``,
``input``, ``voice`` as a name or ``{"id": ...}``, ``response_format``, ``speed``,
``stream_format``, ``instructions``), plus a few fields of this server's own, all optional:

* ``lang``: the text's language (kokoro's ``lang_code`` letter or kokoro-onnx's ``lang``); by
  default the voice's (``af_*`` American English, ``bf_*`` British, ``jf_*`` Japanese, ...);
* ``input_type``: ``"text"`` (default) or ``"phonemes"`` (Kokoro/misaki phonemes, no G2P);
* ``seed``: seeds the decoder's noise, so the same request gives the same samples (default 0);

and Kokoro-FastAPI's request fields, so that its clients work unchanged (its defaults):

* ``model`` may be left out (``kokoro``), and ``voice`` too (``af_heart``);
* ``stream`` (true): false sends one whole file with its ``Content-Length``;
* ``lang_code``: the same as ``lang``;
* ``volume_multiplier`` (1.0): a gain on the samples before encoding (clipped as always);
* ``normalization_options``: which text normalizations to run, as the runtime's
  ``NormalizationOptions`` (Kokoro-FastAPI's fields and defaults, and ``markdown``); None when
  the request has none, for the engine to decide;
* ``return_download_link`` and ``download_format``: the audio is also kept for a while for
  ``GET /v1/download/{name}`` (``downloads.py``);
* ``return_timestamps`` (true; captioned speech): whether words carry their times.

Unknown fields are ignored, as new OpenAI clients may send fields this server does not know;
Kokoro-FastAPI's features this server lacks (voice tags, SSML, voice aliases, timing sidecars)
are refused when asked for, rather than read aloud or silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any

from ..runtime.g2p.normalize import NormalizationOptions
from .encoders import MEDIA_TYPES
from .errors import APIError, invalid
from .voices import MODEL, check_model

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
STREAM_FORMATS = ("audio", "sse")
INPUT_TYPES = ("text", "phonemes")
#: volume_multiplier's range: 0 is silence; past 10 (+20 dB) speech is all clipping
VOLUME_RANGE = (0.0, 10.0)
#: Kokoro-FastAPI's fields for features this server does not have: refused when switched on
UNSUPPORTED = {
    "allow_voice_tags": "[voice:...] tags",
    "ssml": "SSML input",
    "return_timing": "timing sidecars",
    "voice_aliases": "voice aliases (name the voice or blend itself)",
}


NORMALIZATION_FIELDS = tuple(f.name for f in fields(NormalizationOptions))


@dataclass(frozen=True)
class SpeechRequest:
    model: str
    input: str
    voice: Any  # a name, a blend, {"id": ...}, or None (the default): VoiceBook.resolve checks it
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    lang: str | None = None
    input_type: str = "text"
    seed: int = 0
    stream: bool = True
    volume: float = 1.0
    normalization: NormalizationOptions | None = None
    return_download_link: bool = False
    download_format: str | None = None  # None: response_format
    return_timestamps: bool = True


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
    if doc.get("input") is None:
        raise invalid("missing required parameter: 'input'", "input", "missing_required_parameter")
    model = doc.get("model")
    model = MODEL if model is None else check_model(model)
    text = check_input(doc["input"], "input", max_input_chars)
    fmt = _choice(doc, "response_format", "mp3", tuple(MEDIA_TYPES))
    speed = doc.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if not _number(speed):
        raise invalid(f"'speed' must be a number, got {speed!r}", "speed", "invalid_type")
    lo, hi = SPEED_RANGE
    if not lo <= speed <= hi:
        raise invalid(
            f"'speed' is {speed}; it must be between {lo} and {hi}", "speed", "invalid_value"
        )
    stream_format = _choice(doc, "stream_format", "audio", STREAM_FORMATS)
    input_type = _choice(doc, "input_type", "text", INPUT_TYPES)
    lang = language(doc)
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise invalid(f"'seed' must be a whole number >= 0, got {seed!r}", "seed")
    instructions = doc.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid(
            "'instructions' must be a string (it is accepted and ignored)", "instructions"
        )
    stream = _flag(doc, "stream", True)
    if not stream and stream_format == "sse":
        raise invalid(
            "'stream': false asks for one whole file, but 'stream_format': 'sse' is a stream of "
            "events; drop one of them",
            "stream",
        )
    for name, what in UNSUPPORTED.items():
        if doc.get(name):
            raise invalid(
                f"'{name}': this server does not support {what}; leave it out",
                name,
                "unsupported_parameter",
            )
    return SpeechRequest(
        model=model,
        input=text,
        voice=doc.get("voice"),
        response_format=fmt,
        speed=float(speed),
        stream_format=stream_format,
        lang=lang,
        input_type=input_type,
        seed=seed,
        stream=stream,
        volume=volume(doc),
        normalization=normalization(doc.get("normalization_options")),
        return_download_link=_flag(doc, "return_download_link", False),
        download_format=_choice(doc, "download_format", None, tuple(MEDIA_TYPES)),
        return_timestamps=_flag(doc, "return_timestamps", True),
    )


def check_input(text: Any, name: str, max_input_chars: int) -> str:
    """The text (or phonemes) to speak, within the server's limit."""
    if not isinstance(text, str):
        raise invalid(f"'{name}' must be a string", name, "invalid_type")
    if not text.strip():
        raise invalid(f"'{name}' is empty: give the text to speak", name, "empty_input")
    if len(text) > max_input_chars:
        raise invalid(
            f"'{name}' is {len(text)} characters, more than this server's limit of "
            f"{max_input_chars} (--max-input-chars); split it into several requests",
            name,
            "string_above_max_length",
        )
    return text


def language(doc: dict, names: tuple[str, ...] = ("lang", "lang_code")) -> str | None:
    """The request's language as given (``lang``, or Kokoro-FastAPI's ``lang_code``), checked
    against the languages Kokoro speaks; None: the voice's."""
    from ..runtime import languages

    for name in names:
        value = doc.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise invalid(f"'{name}' must be a language code such as 'a' or 'en-us'", name)
        try:
            languages.resolve(value)
        except ValueError as e:
            raise invalid(str(e), name, "unsupported_language") from None
        return value
    return None


def volume(doc: dict) -> float:
    value = doc.get("volume_multiplier")
    if value is None:
        return 1.0
    lo, hi = VOLUME_RANGE
    if not _number(value) or not lo <= value <= hi:
        raise invalid(
            f"'volume_multiplier' is {value!r}; it must be a number from {lo:g} to {hi:g} "
            "(1 leaves the audio as it is)",
            "volume_multiplier",
            "invalid_value",
        )
    return float(value)


def normalization(value: Any) -> NormalizationOptions | None:
    """Kokoro-FastAPI's ``normalization_options``: an object of booleans, each field left out
    taking its default (fields the runtime does not have are ignored, as Kokoro-FastAPI ignores
    the fields it does not have)."""
    if value is None:
        return None
    param = "normalization_options"
    if not isinstance(value, dict):
        raise invalid(
            f"'{param}' must be an object such as {{\"normalize\": true}}; its fields are "
            + ", ".join(NORMALIZATION_FIELDS),
            param,
            "invalid_type",
        )
    given = {}
    for name in NORMALIZATION_FIELDS:
        if name in value:
            if not isinstance(value[name], bool):
                raise invalid(
                    f"'{param}.{name}' must be true or false, got {value[name]!r}",
                    f"{param}.{name}",
                    "invalid_type",
                )
            given[name] = value[name]
    return NormalizationOptions(**given)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _flag(doc: dict, name: str, default: bool) -> bool:
    value = doc.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be true or false, got {value!r}", name, "invalid_type")
    return value


def _choice(doc: dict, name: str, default: str | None, allowed: tuple[str, ...]) -> str | None:
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


_FORMATS = {"type": "string", "enum": list(MEDIA_TYPES)}
#: the request body's JSON schema, for the OpenAPI page at /docs
SPEECH_SCHEMA = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string", "example": "kokoro", "default": MODEL},
        "input": {"type": "string", "example": "Hello world."},
        "voice": {
            "oneOf": [
                {"type": "string", "example": "af_heart"},
                {"type": "object", "properties": {"id": {"type": "string"}}},
            ],
            "description": "a name or a blend ('af_bella(2)+af_sky(1)', 'af_bella-af_sky'); "
            "default af_heart",
        },
        "response_format": {**_FORMATS, "default": "mp3"},
        "speed": {"type": "number", "minimum": SPEED_RANGE[0], "maximum": SPEED_RANGE[1]},
        "stream_format": {"type": "string", "enum": list(STREAM_FORMATS), "default": "audio"},
        "instructions": {"type": "string", "description": "accepted and ignored"},
        "lang": {"type": "string", "description": "default: the voice's language"},
        "lang_code": {"type": "string", "description": "Kokoro-FastAPI's name for lang"},
        "input_type": {"type": "string", "enum": list(INPUT_TYPES), "default": "text"},
        "seed": {"type": "integer", "minimum": 0, "default": 0},
        "stream": {
            "type": "boolean",
            "default": True,
            "description": "false: one whole file with its Content-Length",
        },
        "volume_multiplier": {
            "type": "number",
            "minimum": VOLUME_RANGE[0],
            "maximum": VOLUME_RANGE[1],
            "default": 1.0,
        },
        "normalization_options": {
            "type": "object",
            "properties": {
                f.name: {"type": "boolean", "default": f.default}
                for f in fields(NormalizationOptions)
            },
        },
        "return_download_link": {
            "type": "boolean",
            "default": False,
            "description": "also keep the audio for GET /v1{X-Download-Path}",
        },
        "download_format": {**_FORMATS, "description": "default: response_format"},
        "return_timestamps": {"type": "boolean", "default": True},
    },
}
