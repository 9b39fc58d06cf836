"""kokoro's nine languages as validation sees them: one sentence each, with its voice and the
phonemes the project's G2P made of it (``data/validation_languages.json``, committed so that a
G2P update never changes what a library is held to).

Fixed phonemes keep validation about the compiled numerics: every language's symbols, stress
marks and lengths reach the libraries, on the voice kokoro pairs with that language."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

#: what an English recognizer (``eval.asr``) can check: American and British English
ENGLISH = ("a", "b")


@dataclass(frozen=True)
class Sentence:
    lang: str  # kokoro's language code (``KPipeline(lang_code=...)``)
    voice: str
    text: str
    phonemes: str

    @property
    def key(self) -> str:
        """Its key among a library's validation cases and verdicts."""
        return f"lang_{self.lang}"


def _load() -> tuple[Sentence, ...]:
    text = resources.files("kokoro_tvm.data").joinpath("validation_languages.json").read_text()
    return tuple(Sentence(**row) for row in json.loads(text))


SENTENCES = _load()


def english_text(key: str) -> str | None:
    """The text of the English sentence whose case is ``key``; None for any other case."""
    for s in SENTENCES:
        if s.key == key and s.lang in ENGLISH:
            return s.text
    return None
