"""The README's Python example, run as written against built libraries: both call styles
(kokoro-onnx's ``create`` and KPipeline's call), and no voice as an error that lists the voices."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm.runtime import g2p, voices
from kokoro_tvm.runtime.chunking import InputError

README = Path(__file__).resolve().parents[1] / "README.md"
MISSING_VOICE = 'tts.create("Hello world.", voice=None)'


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if b.startswith("from kokoro_tvm import KokoroTVM")]
    return block


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """The example up to its error line, in a namespace, with the README's ``"artifacts"``."""
    try:
        g2p.load_g2p(False)
    except g2p.G2PUnavailable as e:
        pytest.skip(str(e))
    artifacts = runtime_artifacts(tmp_path_factory)
    code = (
        _example()
        .split(MISSING_VOICE)[0]
        .replace('from_manifest("artifacts")', f"from_manifest({str(artifacts)!r})")
    )
    ns: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test buckets are small: "Hello world." is cut
        exec(compile(code, str(README), "exec"), ns)
    return ns


def test_the_example_runs_both_call_styles(ran):
    tts = ran["tts"]
    assert (
        ran["sample_rate"] == 24000 and ran["audio"].dtype == np.float32 and ran["audio"].size > 0
    )
    assert ran["result"].audio.size > 0 and ran["result"].graphemes and ran["result"].phonemes
    assert tts.voices == tts.get_voices() and "af_heart" in tts.voices and "ff_siwis" in tts.voices
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole, _ = tts.create("Hello world.", voice="af_heart")
        pieces = list(tts("Hello world.", voice="af_heart"))
        other, _ = tts.create("Hello world.", voice="am_adam")
    # the two styles are one synthesis: the pieces join to exactly create's audio
    assert np.array_equal(np.concatenate([p.audio for p in pieces]), whole)
    assert "".join(p.graphemes for p in pieces).replace(" ", "") == "Helloworld."
    assert not np.array_equal(other, whole)  # control: the voice reaches the audio


def test_no_voice_is_an_error_that_lists_the_voices(ran):
    assert MISSING_VOICE in _example()
    with pytest.raises(voices.VoiceError, match=r"no voice given.*af_heart, am_adam"):
        exec(MISSING_VOICE, ran)
    with pytest.raises(InputError, match="lang 'tlh' is not a language Kokoro speaks"):
        ran["tts"].create("Bonjour.", voice="af_heart", lang="tlh")
