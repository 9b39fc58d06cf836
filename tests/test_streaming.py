"""Streaming, timestamps and kokoro's utterances on the compiled libraries.

Uses the shared runtime build (``runtime_project``: tiny config, tokens [6, 12], frames [16, 32];
~4 frames per token, so about 6 phonemes fit a chunk). Planning runs only the duration
libraries; decoding (~1 s a chunk here) is done once per input in module fixtures.
"""

from __future__ import annotations

import io
import struct
import warnings
import wave
from itertools import pairwise

import numpy as np
import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm.runtime import chunking, planner, seams, stream
from kokoro_tvm.runtime.options import Cuts
from kokoro_tvm.runtime.synthesizer import KokoroTVM
from kokoro_tvm.runtime.wav import AudioWriter, read_wav

SPF, SR = 600, 24000
LONG = "ɐn ˈOpən, wˈAt"  # one kokoro utterance; here cut into 3 chunks by the small buckets
SPACED = "ɐ n ɪ"  # one chunk with inner spaces


@pytest.fixture(scope="module")
def tts(tmp_path_factory) -> KokoroTVM:
    return KokoroTVM.from_manifest(runtime_artifacts(tmp_path_factory))


@pytest.fixture(scope="module")
def pack() -> np.ndarray:
    return (0.3 * np.random.default_rng(7).standard_normal((510, 1, 256))).astype(np.float32)


@pytest.fixture(scope="module")
def streamed(tts, pack):
    """Each piece of a 3-chunk stream, with how many chunks had been decoded and predicted (the
    duration library) when it came out, and the warnings."""
    decoded, predicted = [], []
    decode, predict = stream.decode, planner.predict_durations

    def counting_decode(libs, chunk, rng):
        decoded.append(chunk.phonemes)
        return decode(libs, chunk, rng)

    def counting_predict(libs, utt, *args):
        predicted.append(utt)
        return predict(libs, utt, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream, "decode", counting_decode)
        mp.setattr(planner, "predict_durations", counting_predict)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            parts = [
                (p, (len(decoded), len(predicted)))
                for p in tts.stream(LONG, pack, speed=1.1, seed=5, keep_draws=True)
            ]
    return [p for p, _ in parts], [n for _, n in parts], caught


def test_stream_yields_each_chunk_once_it_is_decoded(streamed):
    parts, decoded_at_yield, _ = streamed
    assert [p.chunk.phonemes for p in parts] == ["ɐn", "ˈOpən,", "wˈAt"]
    decoded, predicted = zip(*decoded_at_yield)
    assert decoded == (1, 2, 3)  # first audio after the first chunk is decoded ...
    assert predicted[0] < predicted[-1] == 4  # ... and before the later ones are even planned
    assert [p.last for p in parts] == [False, False, True] and [p.index for p in parts] == [0, 1, 2]
    assert all(a.latency < b.latency for a, b in pairwise(parts))


def test_streamed_pieces_are_the_joined_audio(streamed):
    parts, _, _ = streamed
    audio = np.concatenate([p.audio for p in parts])
    assert np.array_equal(
        audio, seams.join([p.decoded.audio for p in parts])
    )  # bit-exact, fades included
    assert [p.offset for p in parts] == [
        0,
        parts[0].audio.size,
        parts[0].audio.size + parts[1].audio.size,
    ]
    raw = np.concatenate([p.decoded.audio for p in parts])
    assert audio.size == raw.size and not np.array_equal(
        audio, raw
    )  # control: the seams were faded


def test_overflow_is_said_once_naming_the_bucket_and_fix(streamed, tts):
    _, _, caught = streamed
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages  # token and frame overflow both happened: one warning
    assert "largest token bucket 12" in messages[0] and "params.yaml" in messages[0], messages
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # control: an input that fits says nothing, and is one chunk
        chunks = tts.plan("ɐn", "random")
    assert [c.phonemes for c in chunks] == ["ɐn"]


def test_token_times_tile_the_audio_exactly(streamed):
    parts, _, _ = streamed
    tokens = [t for p in parts for t in p.tokens]
    total = sum(p.audio.size for p in parts)
    assert tokens[0].start == 0.0 and tokens[-1].end == total / SR  # exact, not approximately
    assert all(a.end == b.start for a, b in pairwise(tokens))  # contiguous: no gap, no overlap
    assert all(t.start < t.end for t in tokens)  # every token lasts >= 1 frame
    for p in parts:
        frames = p.chunk.durations
        assert [t.text for t in p.tokens] == ["", *p.chunk.phonemes, ""]
        assert [round((t.end - t.start) * SR) for t in p.tokens] == (frames * SPF).tolist()
        assert p.tokens[0].start == p.offset / SR
    wrong = (
        np.concatenate([[0], np.cumsum([f for p in parts for f in p.chunk.durations])]) * 512 / SR
    )
    assert wrong[-1] != total / SR  # control: another frame size would not cover the audio


def test_voice_row_is_kokoros_for_each_chunk(streamed, pack, tts):
    parts, _, _ = streamed
    for p in parts:
        assert np.array_equal(p.chunk.style, pack[len(p.chunk.phonemes) - 1])
    with pytest.warns(UserWarning, match="outside the Kokoro phoneme vocabulary"):
        (chunk,) = tts.plan("ɐ$n", pack)
    assert chunk.phonemes == "ɐ$n" and chunk.n_tokens == 4  # '$' is dropped from the ids ...
    assert np.array_equal(chunk.style, pack[2])  # ... but counts for the row, as in kokoro
    assert not np.array_equal(chunk.style, pack[1])  # control: rows differ


@pytest.fixture(scope="module")
def spaced(tts):
    return tts.synthesize(SPACED, "random", seed=1)


def test_word_times_meet_in_the_middle_of_spaces(spaced):
    (chunk,) = spaced.chunks
    words = spaced.words
    assert [w.text for w in words] == ["ɐ", "n", "ɪ"]
    spaces = [t for t in spaced.tokens if t.text == " "]
    lead = (
        min(3, int(chunk.durations[0])) * SPF / SR
    )  # kokoro's join_timestamps starts 3 frames early
    for word, nxt, space in zip(words, words[1:], spaces):
        assert word.end == nxt.start
        assert word.end + lead == pytest.approx((space.start + space.end) / 2, abs=1e-12)
    assert words[0].start + lead == pytest.approx(spaced.tokens[1].start, abs=1e-12)
    assert all(a.start < a.end <= b.start for a, b in pairwise(words))  # monotonic
    naive = next(t for t in spaced.tokens if t.text == "ɐ").end
    assert words[0].end != naive  # control: a word does not end where its last phoneme does


def test_cuts_make_a_short_first_chunk_where_they_may(tts):
    ps = "ɐ, n ɪ"
    assert [c.phonemes for c in tts.plan(ps, "random")] == [ps]
    assert [c.phonemes for c in tts.plan(ps, "random", cuts="fast")] == ["ɐ,", "n ɪ"]
    # a sentence end, where the speech breaks anyway, ends the first chunk of ``sentences``
    ps = "ɐ. n"
    assert [c.phonemes for c in tts.plan(ps, "random", cuts="sentences")] == ["ɐ.", "n"]
    assert [c.phonemes for c in tts.plan(ps, "random", cuts="kokoro")] == [ps]
    # the silence before each chunk's first word is a wait there: the first chunk's, and the
    # next one's after the sentence the runtime ended early (kokoro would have gone on with a
    # shorter pause), keep 2 frames, cut from the decoded audio (the model's input is kokoro's)
    plan = tts.plan(ps, "random", cuts="sentences")
    assert [c.lead_trim for c in plan] == [max(0, int(c.durations[0]) - 2) for c in plan]
    assert plan[1].lead_trim > 0  # so the check above can fail
    assert [c.lead_trim for c in tts.plan("ɐ. n", "random", cuts=Cuts("x", first="sentence"))] == [
        0,
        0,
    ]


def test_synthesize_reports_progress_and_timestamps(spaced, tts):
    assert spaced.tokens[-1].end == spaced.audio.size / SR
    seen = []
    res = tts.synthesize(
        SPACED, "random", seed=1, progress=lambda done, total, c: seen.append((done, total))
    )
    assert seen == [(1, 1)] and np.array_equal(res.audio, spaced.audio)  # deterministic in the seed


# -- streamed WAV ----------------------------------------------------------------------------


class Pipe(io.BytesIO):
    def seekable(self) -> bool:
        return False


@pytest.mark.parametrize("fmt", ["pcm16", "float32"])
def test_streamed_wav_header_is_patched_or_left_open(tmp_path, fmt):
    x = (np.sin(np.arange(3000) / 5) * 0.5).astype(np.float32)
    path = tmp_path / "s.wav"
    with open(path, "wb") as f:
        w = AudioWriter(f, SR, fmt)
        for piece in np.array_split(x, 3):
            w.write(piece)
        w.close()
    y, sr = read_wav(path)
    assert sr == SR and y.size == x.size and np.abs(y - x).max() <= 1 / 32767
    riff, data = struct.unpack("<I", path.read_bytes()[4:8])[0], path.read_bytes().rfind(b"data")
    assert riff == path.stat().st_size - 8 and struct.unpack(
        "<I", path.read_bytes()[data + 4 : data + 8]
    )[0] == x.size * (2 if fmt == "pcm16" else 4)
    if fmt == "pcm16":
        with wave.open(str(path)) as r:
            assert r.getnframes() == x.size
    pipe = Pipe()
    w = AudioWriter(pipe, SR, fmt)
    w.write(x)
    w.close()  # cannot seek back: the sizes stay "unknown"
    raw = pipe.getvalue()
    assert struct.unpack("<I", raw[4:8])[0] == 0xFFFFFFFF  # control: the patch above was real
    (tmp_path / "p.wav").write_bytes(raw)
    y, _ = read_wav(tmp_path / "p.wav")
    assert y.size == x.size  # still readable to the end


def test_text_word_times_are_kokoros_on_the_predicted_durations(tts):
    """misaki's tokens for text, the runtime's predicted durations: kokoro's ``join_timestamps``
    on the same tokens and durations gives the same word times."""
    import copy

    torch = pytest.importorskip("torch")
    from kokoro.pipeline import KPipeline

    from kokoro_tvm.runtime import g2p

    try:
        utts = g2p.text_utterances("Hi, you.")
    except g2p.G2PUnavailable as e:
        pytest.skip(str(e))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small buckets may cut it
        chunks = tts.plan(utts, "random")
    checked = 0
    for i, c in enumerate(chunks):
        tokens = copy.deepcopy(list(c.words))
        KPipeline.join_timestamps(tokens, torch.from_numpy(c.durations))
        ours = stream.word_times(tts.libraries, c, i, 0)
        assert [(w.text, w.start, w.end) for w in ours] == [
            (t.text, t.start_ts, t.end_ts) for t in tokens
        ]
        checked += sum(t.start_ts is not None for t in tokens)
    assert checked >= 3
    shifted = stream.word_times(tts.libraries, chunks[0], 0, 0)[0]
    # control: the chunk's place in the audio moves its words
    assert stream.word_times(tts.libraries, chunks[0], 0, 600)[0].start == shifted.start + 600 / SR


def _planned(tts, pack, phonemes, limit, **pauses):
    utts = chunking.limit_chunks(chunking.phoneme_utterances(phonemes), limit)
    options = tts.options(pack, cuts=Cuts("test", **pauses))
    return list(
        planner.chunks(tts.libraries, planner.Pending(tts.libraries, utts, options), options)
    )


def test_pauses_at_cuts_inside_a_sentence_are_shortened_before_decoding(tts, pack):
    ps = "ɐn ˈOpən wˈAt. ɐ n ɪ"  # cut at every word: inside both sentences, and at its end
    kokoros = _planned(tts, pack, ps, 4)
    cut = _planned(tts, pack, ps, 4, cut_pauses=1, lead_in=2)
    assert [c.phonemes for c in cut] == [c.phonemes for c in kokoros]
    shortened = 0
    for i, (k, c) in enumerate(zip(kokoros, cut)):
        assert np.array_equal(c.durations[1:-1], k.durations[1:-1])  # the words keep theirs
        after_cut = i > 0 and not chunking.ends_sentence(cut[i - 1].phonemes)
        head = 2 if i == 0 else 1 if after_cut else None  # the first chunk is cut after it
        tail = 1 if i < len(cut) - 1 and not chunking.ends_sentence(c.phonemes) else None
        for got, was, keep in (
            (c.durations[0], k.durations[0], head),
            (c.durations[-1], k.durations[-1], tail),
        ):
            assert got == (was if keep is None else min(was, keep))
            shortened += keep is not None and was > keep
    assert cut[0].lead_trim == 0  # given to the model: the chunk is a piece of a sentence
    ends = [i for i, c in enumerate(cut[:-1]) if chunking.ends_sentence(c.phonemes)]
    assert ends and all(cut[i].durations[-1] == kokoros[i].durations[-1] for i in ends)
    assert shortened >= 4  # control: kokoro's own pauses there are longer, so the test can fail


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_a_pause_that_is_not_a_frame_count_is_refused(tts, pack, bad):
    with pytest.raises(chunking.InputError, match="cut_pauses must be None"):
        tts.stream("ɐn", pack, cuts=Cuts("bad", cut_pauses=bad))
    with pytest.raises(chunking.InputError, match="lead_in must be None"):
        tts.stream("ɐn", pack, cuts=Cuts("bad", lead_in=bad))
    with pytest.raises(chunking.InputError, match="cuts must be one of kokoro, sentences"):
        tts.stream("ɐn", pack, cuts="whole")
    with pytest.raises(chunking.InputError, match="unknown option.*cut_pauses"):
        tts.stream("ɐn", pack, cut_pauses=1)


def test_the_lead_in_is_cut_from_kokoros_audio_not_given_to_the_model(tts, pack):
    """The model's rendition depends on the silence it starts with, so where the first chunk is
    a whole sentence ``lead_in`` leaves the durations alone and cuts the silence from the decoded
    audio: the rest is kokoro's samples."""
    (a,) = list(tts.stream("ɐn", pack))
    (b,) = list(tts.stream("ɐn", pack, cuts=Cuts("lead", lead_in=1)))
    trim = int(a.chunk.durations[0]) - 1
    assert trim > 0 and b.chunk.lead_trim == trim and b.chunk.n_frames == a.chunk.n_frames
    fade = seams.FADE_SAMPLES
    np.testing.assert_array_equal(b.audio[fade:], a.audio[trim * SPF + fade :])
    assert b.audio.size == a.audio.size - trim * SPF
    assert b.tokens[0].end - b.tokens[0].start == pytest.approx(SPF / SR)  # as heard
    assert a.tokens[0].end - a.tokens[0].start == pytest.approx((trim + 1) * SPF / SR)
