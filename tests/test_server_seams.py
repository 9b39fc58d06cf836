"""The server's pauses at its own cuts (``server.seams``): boundary silence cut to a frame each
side where a chunk does not end its sentence, kokoro's pause kept where it does, words moved."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kokoro_tvm.runtime.seams import FADE_SAMPLES
from kokoro_tvm.server.seams import PauseTrimmer, ends_sentence

SPF = 600


@dataclass
class Chunk:
    durations: np.ndarray


@dataclass
class Word:
    text: str
    start: float | None
    end: float | None


@dataclass
class Part:
    """Shaped like the runtime's ``ChunkAudio`` where the trimmer reads it."""

    phonemes: str
    durations: list[int]
    offset: int
    last: bool = False
    words: list = field(default_factory=list)
    sample_rate: int = 24000

    def __post_init__(self):
        self.chunk = Chunk(np.array(self.durations))
        self.audio = np.ones(sum(self.durations) * SPF, np.float32)


def stream(*specs) -> list[Part]:
    parts, offset = [], 0
    for i, (ps, durations) in enumerate(specs):
        parts.append(Part(ps, durations, offset, last=i == len(specs) - 1))
        offset += parts[-1].audio.size
    return parts


def test_a_cut_inside_a_sentence_keeps_one_frame_each_side():
    a, b = stream(("plˈiz lˈiv", [14, 3, 4, 5]), ("ðə dˈɔɹ.", [13, 2, 3, 2]))
    b.words = [Word("door", (b.offset + 20 * SPF) / 24000, (b.offset + 22 * SPF) / 24000)]
    trim = PauseTrimmer(SPF)
    pa, pb = trim(a), trim(b)
    assert pa.audio.size == (14 + 3 + 4 + 1) * SPF  # tail: 5 -> 1 frame
    assert pb.audio.size == (1 + 2 + 3 + 2) * SPF  # head: 13 -> 1 frame; last: tail kept
    assert pa.audio[0] == 1 and pa.audio[-1] < 0.01 and pb.audio[0] < 0.01  # faded at the cut
    assert np.all(pa.audio[:-FADE_SAMPLES] == 1) and np.all(pb.audio[FADE_SAMPLES:] == 1)
    assert pb.start == pa.audio.size
    cut = 4 * SPF + 12 * SPF
    (word,) = pb.words()
    assert round(word["start_time"] * 24000) == b.offset + 20 * SPF - cut


def test_sentence_ends_keep_kokoros_pause():
    a, b = stream(("hˈI.", [14, 3, 6]), ("ðɛɹ!", [13, 2, 3]))
    trim = PauseTrimmer(SPF)
    pa, pb = trim(a), trim(b)
    assert pa.audio.size == a.audio.size and pb.audio.size == b.audio.size
    assert pb.shift == 0 and np.array_equal(pb.audio, b.audio)


def test_keep_none_is_the_runtimes_audio():
    parts = stream(("plˈiz", [14, 3, 5]), ("lˈiv", [13, 2, 3]))
    trim = PauseTrimmer(SPF, keep=None)
    assert all(trim(p).audio is p.audio for p in parts)


def test_what_ends_a_sentence():
    assert ends_sentence("nˈun.") and ends_sentence("ɹˈIt?”") and ends_sentence("wˈA!) ")
    assert not ends_sentence("ðə tɹˈeɪn,") and not ends_sentence("æt") and not ends_sentence("")
