"""Model and voice names as OpenAI clients send them, resolved to what the runtime takes.

``OPENAI_VOICES`` is the one table from OpenAI's voice names to Kokoro's (docs/serving.md shows
it). Five of Kokoro-82M's v1.0 voices carry OpenAI's names (``af_alloy``, ``af_nova``,
``am_echo``, ``am_onyx``, ``bm_fable``) and keep them; each other OpenAI voice maps to the
best-graded Kokoro voice (kokoro's VOICES.md grades) of the same sex and accent as OpenAI's
description of it.

A request names voices only: a registry voice (``tts.voices``), a file the server's operator put
in ``--voices-dir`` (by its stem), an OpenAI name, ``"random"`` on a random-weight build, or a
blend of those (Kokoro-FastAPI's ``af_bella(2)+af_sky(1)`` and ``af_bella-af_sky``, or the
runtime's ``af_bella:2,af_sky:1``). A name is never read as a path: the runtime's ``voice_pack``
takes files too, and a client must not be able to make the server open one.

A blend is computed as Kokoro-FastAPI computes it: each voice's weight (1 when not given) over
the sum of all the weights, added or subtracted as its sign says (``a(2)+b(1)`` is
``2/3 a + 1/3 b``, ``a-b`` is ``a/2 - b/2``). A name given twice is one voice with its weights
summed, and a blend holds at most ``MAX_BLEND_VOICES`` voices: every voice of a blend is a pack
to read and add, so a long one would cost the server what the client pays nothing for.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import APIError, invalid

#: OpenAI's speech models; every one is served by the same Kokoro model
MODEL = "kokoro"
MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")

#: OpenAI voice -> Kokoro v1.0 voice (see the module docstring for how each was picked)
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "ash": "am_michael",
    "ballad": "bm_george",
    "coral": "bf_emma",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_sky",
    "verse": "am_puck",
    "marin": "af_heart",
    "cedar": "am_fenrir",
}
RANDOM_VOICE = "random"
#: the voice of a request that names none (Kokoro-FastAPI's default)
DEFAULT_VOICE = "af_heart"
#: the most distinct voices one blend may hold
MAX_BLEND_VOICES = 16
#: a voice's language from the first letter of its name (kokoro's convention), for when the
#: runtime's own language table is not there to ask
_LETTER_LANGS = {
    "a": "en-us",
    "b": "en-gb",
    "e": "es",
    "f": "fr-fr",
    "h": "hi",
    "i": "it",
    "j": "ja",
    "p": "pt-br",
    "z": "cmn",
}
_VOICE_FILES = (".pt", ".npy", ".bin", ".npz")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
#: one voice of a Kokoro-FastAPI blend: a name and an optional weight in brackets
_FASTAPI_PART = re.compile(r"^([A-Za-z0-9_.]+)(?:\(([^()]*)\))?$")


def check_model(model: Any) -> str:
    if not isinstance(model, str) or not model:
        raise invalid("'model' must be a string such as 'kokoro' or 'tts-1'", "model")
    if model not in (MODEL, *MODEL_ALIASES):
        raise APIError(
            404,
            f"model {model!r} does not exist; this server has {', '.join((MODEL, *MODEL_ALIASES))} "
            "(all the same Kokoro-82M)",
            param="model",
            code="model_not_found",
        )
    return model


def voice_language(name: str) -> str | None:
    """The ``lang`` a voice's name implies (``af_heart`` -> ``en-us``), or None."""
    try:
        from ..runtime import languages
    except ImportError:  # a runtime without the language table
        languages = None
    if languages is not None and hasattr(languages, "of_voice"):
        lang = languages.of_voice(name)
        return None if lang is None else lang.onnx
    if len(name) > 2 and name[1] in "fm" and name[2] == "_":
        return _LETTER_LANGS.get(name[0])
    return None


@dataclass(frozen=True)
class Voice:
    """A resolved voice: the pack the runtime takes, and the language its first part implies."""

    key: str  # canonical spec, e.g. "af_bella:2,af_sky:1"
    pack: np.ndarray | str  # or "random": a style the runtime draws from the request's seed
    lang: str | None


class VoiceBook:
    """The voices a server offers, and request specs resolved to packs (cached: a pack is read
    once, not per request)."""

    def __init__(
        self,
        registry: Callable[[], list[str]],
        load: Callable[[str], np.ndarray],
        voices_dir: Path | None = None,
        random_voice: bool = False,
        cache_size: int = 64,
    ):
        self._registry, self._load = registry, load
        self.files: dict[str, Path] = {}
        if voices_dir is not None:
            self.files = {
                p.stem: p
                for p in sorted(Path(voices_dir).iterdir())
                if p.suffix in _VOICE_FILES and p.is_file() and _NAME.match(p.stem)
            }
        self.random_voice = random_voice
        self._cache: dict[str, Voice] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        """Every voice name a request may use (OpenAI's names aside)."""
        names = set(self._registry()) | set(self.files)
        if self.random_voice:
            names.add(RANDOM_VOICE)
        return sorted(names)

    def aliases(self) -> dict[str, str]:
        """The OpenAI names whose Kokoro voice this server has."""
        have = set(self.names())
        return {k: v for k, v in OPENAI_VOICES.items() if v in have}

    def listing(self, legacy: bool = False) -> dict[str, Any]:
        """``GET /v1/audio/voices``: Kokoro-FastAPI's ``{"voices": [{"id", "name"}]}`` (chat
        front ends read ``id``), or with ``legacy`` its older list of names; both with each
        voice's language and OpenAI's names for the voices this server has."""
        names = self.names()
        voices: list[Any] = names if legacy else [{"id": n, "name": n} for n in names]
        return {
            "voices": voices,
            "data": [{"id": n, "lang": voice_language(n)} for n in names],
            "openai": self.aliases(),
        }

    def resolve(self, spec: Any) -> Voice:
        """A request's ``voice`` (a name, a blend, ``{"id": name}``, or None for
        ``DEFAULT_VOICE``) as a checked pack."""
        names = self.names()
        if spec is None:
            if DEFAULT_VOICE not in names:
                raise invalid(
                    f"missing required parameter: 'voice' (the default, {DEFAULT_VOICE}, is not "
                    f"on this server; it has: {', '.join(names) or 'none'})",
                    "voice",
                    "missing_required_parameter",
                )
            spec = DEFAULT_VOICE
        if isinstance(spec, dict):
            spec = spec.get("id")
        if not isinstance(spec, str) or not spec.strip():
            raise invalid(
                "'voice' must be a voice name (see GET /v1/audio/voices), a blend such as "
                "'af_bella(2)+af_sky(1)', or {\"id\": name}",
                "voice",
            )
        # a whole name first: a --voices-dir file may have a '-' in its name
        parts = [(spec.strip(), 1.0)] if spec.strip() in names else parse_blend(spec)
        if len(parts) == 1 and parts[0][0] == RANDOM_VOICE and self.random_voice:
            # the runtime draws this style from the request's seed, as it does for its callers
            return Voice(RANDOM_VOICE, RANDOM_VOICE, None)
        if any(n == RANDOM_VOICE for n, _ in parts):
            raise invalid(f"voice {spec!r}: '{RANDOM_VOICE}' cannot be blended", "voice")
        total = float(np.sum(np.abs([w for _, w in parts])))
        if not np.isfinite(total):
            raise invalid(f"voice {spec!r}: the weights are too large to add up", "voice")
        merged: dict[str, float] = {}  # Kokoro name -> its signed weight, first come first
        for name, weight in parts:
            kokoro = self._kokoro_name(name, names)
            merged[kokoro] = merged.get(kokoro, 0.0) + weight
        if len(merged) > MAX_BLEND_VOICES:
            raise invalid(
                f"voice {_shown(spec)}: a blend of {len(merged)} voices; at most "
                f"{MAX_BLEND_VOICES} may be blended",
                "voice",
                "too_many_voices",
            )
        coefs = {n: w / total for n, w in merged.items()}
        key = ",".join(f"{n}:{c!r}" for n, c in coefs.items())
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if list(coefs.values()) == [1.0]:
            pack = self._pack(next(iter(coefs)))
        else:
            acc = None
            for name, coef in coefs.items():
                term = coef * np.asarray(self._pack(name), np.float64)
                acc = term if acc is None else acc + term
            pack = acc.astype(np.float32)
        voice = Voice(key, pack, voice_language(next(iter(coefs))))
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = voice
        return voice

    def _kokoro_name(self, name: str, names: list[str]) -> str:
        kokoro = OPENAI_VOICES.get(name, name)
        if kokoro in names:
            return kokoro
        have = ", ".join(names) if names else "none (install the voices; see docs/serving.md)"
        via = f" (OpenAI's {name!r} is Kokoro's {kokoro!r})" if kokoro != name else ""
        raise APIError(
            400,
            f"voice {kokoro!r} does not exist on this server{via}; it has: {have}; OpenAI's "
            f"names map to these through the table at GET /v1/audio/voices",
            param="voice",
            code="voice_not_found",
        )

    def _pack(self, name: str) -> np.ndarray:
        if name in self.files:
            return self._load(str(self.files[name]))
        return self._load(name)


def parse_blend(spec: str) -> list[tuple[str, float]]:
    """``a``, ``a(2)+b(1)``, ``a-b`` (Kokoro-FastAPI) or ``a:2,b:1`` (the runtime) ->
    [(name, signed weight)], in the order given; a subtracted voice's weight is negative."""
    text = spec.strip()
    if "," in text or (":" in text and "(" not in text):
        out = []
        for part in text.split(","):
            name, _, weight = part.strip().rpartition(":")
            name, weight = (name, weight) if name else (weight, "")
            out.append((name.strip(), _weight(spec, name.strip(), weight, part)))
        return out
    out = []
    for sign, part in _signed_parts(spec, "".join(text.split())):
        m = _FASTAPI_PART.match(part)
        if m is None:
            raise _bad_blend(spec, part)
        weight = "1" if m.group(2) is None else m.group(2) or "?"  # "a()": no weight
        out.append((m.group(1), sign * _weight(spec, m.group(1), weight, part)))
    return out


def _signed_parts(spec: str, text: str) -> list[tuple[float, str]]:
    """``a(2)+b-c`` -> [(1, 'a(2)'), (1, 'b'), (-1, 'c')]: cut at each + and - outside
    brackets (a weight such as ``(1e-3)`` keeps its sign)."""
    parts, sign, start, depth = [], 1.0, 0, 0
    for i, c in enumerate(text + "+"):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c in "+-" and depth == 0:
            if i == start:
                raise invalid(
                    f"voice {spec!r}: a blend needs a voice before and after each + and -; "
                    "write it as 'af_bella(2)+af_sky(1)' or 'af_bella-af_sky'",
                    "voice",
                    "invalid_voice",
                )
            parts.append((sign, text[start:i]))
            sign, start = (1.0 if c == "+" else -1.0), i + 1
        if depth < 0 or depth > 1:
            raise _bad_blend(spec, text)
    if depth:
        raise _bad_blend(spec, text)
    return parts


def _weight(spec: str, name: str, weight: str, part: str) -> float:
    try:
        w = float(weight) if weight.strip() else 1.0  # "a:" or a bare name
    except ValueError:
        raise _bad_blend(spec, part) from None
    if not _NAME.match(name) or not np.isfinite(w) or w <= 0:
        raise _bad_blend(spec, part or spec)
    return w


def _bad_blend(spec: str, part: str) -> APIError:
    return invalid(
        f"voice {_shown(spec)}: {_shown(part.strip())} is not a voice name with an optional "
        "positive weight; write a blend as 'af_bella(2)+af_sky(1)', 'af_bella-af_sky' or "
        "'af_bella:2,af_sky:1'",
        "voice",
        "invalid_voice",
    )


def _shown(text: str, limit: int = 60) -> str:
    """A spec for a message, cut short: one can be as long as the body."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"
