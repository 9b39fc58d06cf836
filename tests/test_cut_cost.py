"""What the runtime's cuts cost a listener, on Kokoro-82M's trained weights.

The runtime's own planning, cuts, pauses and streaming (``KokoroTVM`` on ``EagerLibraries``:
eager kokoro computes each component) speak sentences of this test's own in three ways, each
held against ``create()``'s rendition (kokoro's chunks: whole sentences) by ``eval.prosody``:

* kokoro with another seed: the floor, within the bounds;
* the ``sentences`` cuts (``synth --stream`` and ``serve`` by default): within the bounds;
* the ``fast-shared`` cuts (``serve --cuts fast``: 16, then 24 phonemes): outside them, the
  negative control that shows the bounds can fail.

And, without a model: the default cuts end a chunk only where kokoro would, or where a sentence
ends (kokoro's ``KPipeline`` on the same text, ``model=False``).
"""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.eval import cuts, prosody
from kokoro_tvm.runtime.options import FAST_SHARED, LISTENER, SENTENCES

pytest.importorskip("pocketsphinx")

#: sentences no other test or benchmark speaks, and a paragraph whose first sentence is cut off
TEXTS = (
    "The old lighthouse keeper painted the stairs blue every summer.",
    "Before you leave the office, switch off the lights in the hallway.",
    "A quiet street in the north of town is where the baker lives.",
    "The storm passed in the night. By morning the roads were clear again.",
)
#: a voice the weights' own package ships (tests stay offline: no npm); it reads English too
VOICE = "jf_alpha"


@pytest.fixture(scope="module")
def tts():
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


def _spoken(tts, text: str, cuts_: object, seed: int = 0) -> np.ndarray:
    runtime, pack = tts
    parts = runtime(text, pack, lang="a", seed=seed, cuts=cuts_)
    return np.concatenate([p.audio for p in parts])


@pytest.fixture(scope="module")
def table(tts):
    reference = lambda t: _spoken(tts, t, "kokoro")
    ways = {
        "another seed": lambda t: _spoken(tts, t, "kokoro", seed=1),
        "sentences": lambda t: _spoken(tts, t, SENTENCES),
        "fast-shared": lambda t: _spoken(tts, t, FAST_SHARED),
    }
    return cuts.rows(TEXTS, reference, ways)


def test_another_seed_is_within_the_bounds(table):
    verdict = cuts.judge(table["another seed"])
    assert verdict["pass"], verdict


def test_the_default_cuts_sound_like_kokoros_whole_sentences(table):
    """What a streaming listener hears by default (``synth --stream``, ``serve``)."""
    assert LISTENER is SENTENCES
    verdict = cuts.judge(table["sentences"])
    assert verdict["pass"], (verdict, table["sentences"])


def test_short_chunks_inside_sentences_fail_the_bounds(table):
    """The negative control: 16 then 24 phonemes per chunk, cut inside every sentence."""
    verdict = cuts.judge(table["fast-shared"])
    assert not verdict["pass"], verdict
    assert not verdict["f0_ok"] and not verdict["pauses_ok"], verdict


def test_the_instrument_sees_a_shifted_melody():
    """F0 error in cents is what it says: a tone a quarter tone (50 cents) higher reads ~50."""
    sr = 24000
    t = np.arange(int(1.2 * sr)) / sr
    env = np.minimum(1, np.minimum(t, t[::-1]) * 20)
    f0 = 140 + 30 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voice = lambda ratio: env * sum(np.sin(k * ratio * phase) / k for k in range(1, 6))
    assert prosody.f0_rmse_cents(voice(1.0), voice(1.0)) < 1
    assert prosody.f0_rmse_cents(voice(1.0), voice(2 ** (50 / 1200))) == pytest.approx(50, abs=5)


def test_default_cuts_end_chunks_only_where_kokoro_or_a_sentence_ends():
    """``sentences``: the first chunk is the first sentence, the rest kokoro's own chunks of
    what follows; a single sentence is kokoro's one chunk."""
    from kokoro.pipeline import KPipeline

    from kokoro_tvm.runtime.g2p import text_utterances
    from kokoro_tvm.runtime.g2p.en import load_g2p

    g2p = load_g2p()
    kokoro = KPipeline.__new__(KPipeline)  # no model, the runtime's G2P (test_chunking.py)
    kokoro.lang_code, kokoro.model, kokoro.voices, kokoro.g2p = "a", None, {}, g2p
    kokoro.repo_id = "hexgrad/Kokoro-82M"

    def ps(text: str, first: str) -> list[str]:
        utts = text_utterances(text, "a", first=first, g2p=g2p, normalize=False)
        return [u.phonemes for u in utts]

    for text in TEXTS + cuts.PARAGRAPHS:
        theirs = [r.phonemes for r in kokoro(text)]
        assert ps(text, "none") == theirs, text
        if ". " not in text:
            assert ps(text, "sentence") == theirs, text
            continue
        first, rest = text.split(". ", 1)
        expected = [r.phonemes for r in kokoro(first + ".")] + [r.phonemes for r in kokoro(rest)]
        assert ps(text, "sentence") == expected, text
        assert len(theirs) == 1 < len(expected)  # control: kokoro speaks it as one chunk
