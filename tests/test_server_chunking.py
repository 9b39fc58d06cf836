"""The ``fast`` cuts' chunk limits (``chunking.limit_chunks``, ``options.Cuts.limits``): every
chunk within its limit, nothing lost or reordered, cuts where kokoro's grouping cuts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kokoro_tvm.runtime import chunking
from kokoro_tvm.runtime.chunking import InputError, Utterance, limit_chunks
from kokoro_tvm.runtime.options import FAST

#: "Please leave the package at the front door before noon.": ten words, no comma
NO_COMMA = "plˈiz lˈiv ðə pˈækɪʤ æt ðə fɹˈʌnt dˈɔɹ bəfˈɔɹ nˈun."
WITH_COMMAS = "wˈʌns əpˌɑn ɐ tˈIm, ɪn ɐ lˈænd fˈɑɹ ɐwˈA, ðɛɹ lˈɪvd ɐ kˈɪŋ. hi hæd θɹˈi dˈɔtəɹz."


def utterances(phonemes: str) -> list[Utterance]:
    return chunking.phoneme_utterances(phonemes)


def words(utts: list[Utterance]) -> list[str]:
    return [w for u in utts for w in u.phonemes.split()]


def symbols(utts: list[Utterance]) -> str:
    """The phoneme symbols in order, spaces aside (a cut replaces a space)."""
    return "".join(u.phonemes.replace(" ", "") for u in utts)


def test_a_sentence_without_a_comma_is_cut_at_a_word():
    out = limit_chunks(utterances(NO_COMMA), (24, 60, 150))
    # the last word within 24 is "æt": a word of two phonemes goes with what follows it
    assert [u.phonemes for u in out] == ["plˈiz lˈiv ðə pˈækɪʤ", "æt ðə fɹˈʌnt dˈɔɹ bəfˈɔɹ nˈun."]
    assert [u.text for u in out] == ["plˈiz lˈiv ðə pˈækɪʤ", "æt ðə fɹˈʌnt dˈɔɹ bəfˈɔɹ nˈun."]
    assert words(out) == NO_COMMA.split()
    out = limit_chunks(utterances(NO_COMMA), FAST.limits)
    assert out[0].phonemes == "plˈiz lˈiv"  # not "plˈiz lˈiv ðə"


def test_short_words_stay_where_no_longer_word_can_end_the_chunk():
    out = limit_chunks(utterances("ɐ n ɪ ɐ n ɪ"), 4)
    assert [u.phonemes for u in out] == ["ɐ n", "ɪ ɐ", "n ɪ"]  # every word short: cut as fits
    out = limit_chunks(utterances("lˈiv ðə ɐ pˈɑɹk"), (9, 20))
    assert [u.phonemes for u in out] == ["lˈiv", "ðə ɐ pˈɑɹk"]  # both short words move


def test_cuts_prefer_sentence_then_clause_marks():
    out = limit_chunks(utterances(WITH_COMMAS), (30, 40))
    assert [u.phonemes for u in out] == [
        "wˈʌns əpˌɑn ɐ tˈIm,",  # the comma within 30 symbols
        "ɪn ɐ lˈænd fˈɑɹ ɐwˈA, ðɛɹ lˈɪvd ɐ kˈɪŋ.",  # the full stop, rather than the comma
        "hi hæd θɹˈi dˈɔtəɹz.",
    ]
    out = limit_chunks(utterances(WITH_COMMAS), (20, 30))
    assert out[1].phonemes == "ɪn ɐ lˈænd fˈɑɹ ɐwˈA,"  # no full stop within 30: the comma


def test_an_int_caps_every_chunk_and_the_last_limit_repeats():
    base = utterances(WITH_COMMAS + " " + NO_COMMA)
    for limits, caps in ((20, [20] * 9), ((10, 20), [10] + [20] * 9)):
        out = limit_chunks(base, limits)
        assert all(len(u.phonemes.rstrip(",.")) <= cap for u, cap in zip(out, caps)), out
        assert symbols(out) == symbols(base)


def test_utterances_within_their_limit_are_kept_as_they_are():
    base = utterances(NO_COMMA)
    out = limit_chunks(base, 510)
    assert out == base and out[0] is base[0]


@pytest.mark.parametrize("limits", [0, -3, (), (24, 0), (True,), 2.5, "24"])
def test_bad_limits_are_input_errors(limits):
    with pytest.raises(InputError, match="chunk_limits must be"):
        limit_chunks(utterances(NO_COMMA), limits)


WORD = st.text(alphabet="abdefhiklmnoprstuvwzæðŋɐɑɔəɛɜɪʊʌˈˌ", min_size=1, max_size=12)
MARK = st.sampled_from([",", ".", "!", "?", ";", ":", "—"])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(WORD, st.one_of(st.none(), MARK)), min_size=1, max_size=60),
    st.lists(st.integers(min_value=13, max_value=200), min_size=1, max_size=4),
)
def test_every_chunk_within_its_limit_and_nothing_lost(pieces, limits):
    """Words of at most 12 symbols, limits of at least 13: every chunk fits its limit (but for
    a mark kept with the words before it), holds a word, and the chunks spell the input's
    symbols in order."""
    phonemes = " ".join(w + (m or "") for w, m in pieces)
    base = utterances(phonemes)
    out = limit_chunks(base, limits)
    for i, u in enumerate(out):
        cap = limits[min(i, len(limits) - 1)]
        assert 0 < len(u.phonemes.rstrip(",.!?;:—")) <= cap, (i, u.phonemes, limits)
        assert u.phonemes.strip(",.!?;:— "), (i, u.phonemes)
    assert symbols(out) == symbols(base)
