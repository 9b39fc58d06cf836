"""Every language Kokoro speaks, text in: the language table against kokoro's own, phonemes equal
to kokoro 0.9.4's ``KPipeline(lang_code=X)`` (a quiet pipeline: no model) on sentences with
numbers, punctuation and a word from another script, text a language cannot read left out with a
warning (and without its line break), chunking at each language's punctuation, and G2Ps imported
only when used, without their packages' deprecation warnings.

No artifacts are needed: this is the text front end alone (tests/test_voices.py speaks)."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import pytest
from kokoro.pipeline import ALIASES, LANG_CODES, KPipeline

from kokoro_tvm.runtime import g2p as G
from kokoro_tvm.runtime import languages
from kokoro_tvm.runtime.chunking import FIRST_CLAUSE_LIMIT, MAX_PHONEMES, InputError
from kokoro_tvm.runtime.g2p import loaders, scripts, sentences

#: per language: sentences with numbers, punctuation, and a word in another script that the
#: language's G2P reads (a Latin word in Hindi, Chinese and Japanese; a foreign name elsewhere)
SENTENCES = {
    "a": [
        "Hello, world! It's 3:45 pm on May 5th, 2024; I paid $12.50 (really).",
        "Dr. Smith's café serves “naïve” crêpes — 82M parameters, 10% off?\nNew line: 1,000 times.",
    ],
    "b": ["The colour of 12 theatres; “quoted” text, £3.20 each — at 10:30!"],
    "e": [
        "¡Hola, mundo! Tengo 25 años y 3,5 euros. ¿Qué tal? Vivo en París.",
        "Otra línea: 1.000 personas (aprox.) — sí, en New York.",
    ],
    "f": ["Bonjour le monde, j'ai 42 ans (vraiment) ! Il coûte 3,50 €. « Oui », dit-il… à Berlin."],
    "h": ["नमस्ते दुनिया, मेरे पास 15 किताबें हैं। क्या आप ठीक हैं? मैं Delhi में computer पर हूँ!"],
    "i": ["Ciao mondo, ho 7 gatti: che bello! Costa 12,50 euro. Vado a New York domani."],
    "p": ["Olá mundo, tenho 30 anos — é verdade? Custa R$ 15,90. Moro em São Paulo, não em Paris!"],
    "j": ["こんにちは世界、今日は2024年5月5日です！iPhoneを買った。「本当？」と彼は言った…"],
    "z": ["你好世界，今天是2024年5月5日！我买了iPhone。他说：“真的吗？”价格是3.5元。"],
}
#: per language: a word in a script its G2P cannot read, and the language its warning names
UNREADABLE = {
    "a": ("東京", "z"),
    "b": ("привет", None),
    "e": ("東京", "j"),
    "f": ("こんにちは", "j"),
    "h": ("東京", "z"),
    "i": ("привет", None),
    "p": ("नमस्ते", "h"),
    "j": ("привет", None),
    "z": ("こんにちは", "j"),
}


def kpipeline(code: str) -> KPipeline:
    """kokoro's quiet pipeline for ``code``. English: around the runtime's misaki G2P, which is
    ``en.G2P`` made without its download of ``en_core_web_sm`` (test_chunking proves them equal)."""
    if code in "ab":
        pipe = KPipeline.__new__(KPipeline)
        pipe.lang_code, pipe.model, pipe.voices, pipe.repo_id = code, None, {}, "hexgrad/Kokoro-82M"
        pipe.g2p = G.load(code)
        return pipe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return KPipeline(lang_code=code, model=False, repo_id="hexgrad/Kokoro-82M")


def kokoro(code: str, text: str) -> list[tuple[str, str]]:
    return [(r.graphemes, r.phonemes) for r in kpipeline(code)(text)]


# -- the table ---------------------------------------------------------------------------------


def test_language_table_is_kokoros():
    """Every lang_code and alias kokoro takes names the same language here; kokoro-onnx's lang
    strings too; a voice name's first letter is its language."""
    assert set(languages.LANGUAGES) == set(LANG_CODES)
    for alias, code in ALIASES.items():
        assert languages.resolve(alias).code == code, alias
    for code in LANG_CODES:
        assert languages.resolve(code).code == languages.resolve(code.upper()).code == code
    onnx = ["en-us", "en-gb", "es", "fr-fr", "hi", "it", "ja", "pt-br", "cmn"]
    assert [languages.resolve(x).code for x in onnx] == list("abefhijpz")
    assert [languages.LANGUAGES[c].onnx for c in "abefhijpz"] == onnx
    # espeak's language for each espeak-family language is kokoro's LANG_CODES value
    for code, lang in languages.LANGUAGES.items():
        if lang.g2p == "espeak":
            assert lang.espeak == LANG_CODES[code]
    assert (
        languages.of_voice("af_heart").code == "a"
        and languages.of_voice("zm_yunxi").name == "Mandarin Chinese"
    )
    assert languages.of_voice("heart") is None and languages.of_voice("xf_new") is None
    assert {languages.of_voice(v).code for v in languages.VOICES} == set(LANG_CODES)
    assert [x.word_timestamps for x in languages.LANGUAGES.values()] == [True, True] + [False] * 7


def test_unknown_lang_is_an_error_listing_the_languages():
    with pytest.raises(InputError, match=r"lang 'klingon' is not a language Kokoro speaks.*cmn"):
        languages.resolve("klingon")


# -- phonemes equal kokoro's -----------------------------------------------------------------------


@pytest.mark.parametrize("code", list(SENTENCES))
def test_phonemes_equal_kpipeline(code):
    """Graphemes and phonemes per utterance equal ``KPipeline(lang_code)``'s on the same text,
    read as written (``normalize=False``: kokoro does not normalize; test_text_normalize.py
    checks what normalizing changes)."""
    for text in SENTENCES[code]:
        with warnings.catch_warnings():
            warnings.simplefilter("error", G.DroppedTextWarning)  # nothing here is left out
            ours = G.phonemize(text, code, normalize=False)
        theirs = kokoro(code, text)
        assert ours == theirs, text
        assert all(ps for _, ps in ours) and any(re.search(r"\d", t) for t, _ in ours)


def test_phonemes_control_another_language_differs():
    """Negative control: the same text read by another language's G2P is not kokoro's output
    for this one, so the parity above is not the same G2P everywhere."""
    text = SENTENCES["i"][0]
    assert G.phonemize(text, "e") != kokoro("i", text)
    assert G.phonemize(text, "i", first="clause") != kokoro("i", text)


@pytest.mark.parametrize("code", list(UNREADABLE))
def test_unreadable_script_is_left_out_with_a_warning(code):
    """A word the language cannot read is left out (kokoro spells it out or passes symbols the
    model never learned); what is left equals kokoro on the text without it."""
    word, other = UNREADABLE[code]
    text = SENTENCES[code][0]
    mixed = text.replace(" ", f" {word} ", 1) if " " in text else word + text
    assert mixed != text
    with pytest.warns(G.DroppedTextWarning) as caught:
        ours = G.phonemize(mixed, code, normalize=False)
    assert ours == kokoro(code, text)
    assert kokoro(code, mixed) != ours  # control: kokoro reads it as something
    (message,) = [str(w.message) for w in caught]
    assert word in message and languages.LANGUAGES[code].name in message
    if other:
        assert f"lang {other} ({languages.LANGUAGES[other].name})" in message
    else:
        assert "no language Kokoro speaks reads Cyrillic" in message


def test_emoji_are_left_out_and_nothing_speakable_is_an_error():
    with pytest.warns(G.DroppedTextWarning, match="emoji"):
        assert G.phonemize("Nice 🙂 day 👍🏽.", "a") == kokoro("a", "Nice day.")
    with (
        pytest.warns(G.DroppedTextWarning),
        pytest.raises(InputError, match=r"French \(lang f\).*Han text \(to hear it, pick lang j"),
    ):
        G.text_utterances("東京 🙂", "f")
    with pytest.raises(InputError, match="empty input"):
        G.text_utterances("  \n ", "e")


def test_left_out_text_leaves_its_line_break_and_sentence_end():
    """An emoji before a line break goes without it: the two lines stay two chunks, with
    kokoro's pause between them; before a sentence mark, the mark stays."""
    plain = G.text_utterances("Great job\nNext line please.", "a")
    with pytest.warns(G.DroppedTextWarning, match="emoji"):
        utts = G.text_utterances("Great job 👍\nNext line please.", "a")
    assert len(plain) == 2 and [u.phonemes for u in utts] == [u.phonemes for u in plain]
    with pytest.warns(G.DroppedTextWarning):
        said = G.phonemize("Bien 👍\nLigne suivante 東京. Fin.", "f")
    assert said == kokoro("f", "Bien\nLigne suivante. Fin.")
    # control: run together, the lines are one chunk (the count sees the break)
    assert len(G.text_utterances("Great job Next line please.", "a")) == 1


def test_symbols_kokoro_reads_are_read_not_left_out_as_emoji():
    """``™ © ®`` are pictographs to Unicode but text symbols, which misaki and espeak-ng say
    ("TM", "copyright"); they reach the G2P as in kokoro. Asked for as emoji (U+FE0F) they
    are emoji, and left out."""
    for code, text in [("a", "Acme™ is great, © 2024 Acme® Inc."), ("f", "Acme™, © 2024.")]:
        with warnings.catch_warnings():
            warnings.simplefilter("error", G.DroppedTextWarning)
            said = G.phonemize(text, code)
        assert said == kokoro(code, text)
        assert [p for _, p in said] != [p for _, p in kokoro(code, re.sub("[™©®]", "", text))]
    with pytest.warns(G.DroppedTextWarning, match="emoji"):
        said = G.phonemize("Acme©\ufe0f rocks.", "a")
    assert [p for _, p in said] == [p for _, p in kokoro("a", "Acme rocks.")]


def test_script_filter_keeps_what_each_language_reads():
    keep = {
        "a": "Zürich café, 3 € ½ — ok, Acme™ © ® 20°",
        "h": "नमस्ते, Delhi",
        "j": "カタカナ、ひらがな、漢字々ー iPhone",
        "z": "汉字，iPhone。",
    }
    for code, text in keep.items():
        assert scripts.readable(text, languages.LANGUAGES[code]).text == text
    f = scripts.readable("a 東京 b, c (привет) 🙂", languages.LANGUAGES["a"])
    assert f.text == "a b, c ()" and set(f.dropped) == {"Han", "Cyrillic", "emoji"}


# -- chunking beyond kokoro ------------------------------------------------------------------------


def test_long_paragraph_is_cut_at_the_languages_marks_not_truncated():
    """kokoro keeps a Chinese paragraph with no ``.!?`` as one chunk and truncates its phonemes
    at 510; here it is cut at ``。``/``，`` into utterances that each fit and together say it
    all."""
    sentence = "今天天气很好，我们一起去公园散步吧。"
    text = sentence * 30
    (theirs,) = kokoro("z", text)
    g2p = G.load("z")
    assert len(g2p(text)) > MAX_PHONEMES == len(theirs[1])  # kokoro truncated it
    utts = G.text_utterances(text, "z")
    assert len(utts) > 1 and all(len(u.phonemes) <= MAX_PHONEMES for u in utts)
    assert "".join(u.text for u in utts) == text  # every character is said
    assert all(u.text.endswith("。") for u in utts)  # cut at sentence marks first
    assert " ".join(u.phonemes for u in utts) == g2p(text)  # and read as the whole would be
    assert not any(u.timed_words for u in utts)  # phonemes, not words: no word times


def test_hindi_danda_ends_a_sentence_when_a_chunk_is_too_long():
    text = "मैं आज बाज़ार गया और बहुत सारी चीज़ें खरीदीं। " * 12
    utts = G.text_utterances(text, "h")
    assert len(utts) > 1 and all(u.text.endswith("।") for u in utts)
    assert all(len(u.phonemes) <= MAX_PHONEMES for u in utts)


def test_unpunctuated_text_is_cut_at_spaces_then_characters():
    g2p = G.load("e")
    words = " ".join(["palabra"] * 120)
    utts = G.text_utterances(words, "e", limit=100)
    assert len(utts) > 1 and all(len(u.phonemes) <= 100 for u in utts)
    assert " ".join(u.text for u in utts) == words
    han = "我们" * 80
    pieces = sentences.fit(han, languages.LANGUAGES["z"], G.load("z"), 60)
    assert len(pieces) > 1 and all(len(ps) <= 60 for _, ps in pieces)
    assert "".join(t for t, _ in pieces) == han
    assert len(g2p(words)) > 100  # control: uncut, it would not fit


@pytest.mark.parametrize(
    "code, text, head",
    [
        ("z", "你好，世界。今天天气很好。", "你好，"),
        ("j", "こんにちは、世界。元気ですか？", "こんにちは、"),
        ("e", "¡Hola, mundo! ¿Qué tal?", "¡Hola,"),
        ("h", "नमस्ते। आप कैसे हैं?", "नमस्ते।"),
    ],
)
def test_first_clause_cuts_at_the_languages_first_mark(code, text, head):
    whole = G.text_utterances(text, code)
    cut = G.text_utterances(text, code, first="clause")
    assert len(cut) == len(whole) + 1 and cut[0].text == head
    assert len(cut[0].phonemes) <= FIRST_CLAUSE_LIMIT
    assert cut[1].text == text[len(head) :].strip()


@pytest.mark.parametrize(
    "code, text, head",
    [
        ("z", "你好，世界。今天天气很好。", "你好，世界。"),
        ("j", "こんにちは、世界。元気ですか？", "こんにちは、世界。"),
        ("e", "¡Hola, mundo! ¿Qué tal?", "¡Hola, mundo!"),
        ("h", "नमस्ते। आप कैसे हैं?", "नमस्ते।"),
        ("f", "Bonjour, le monde. Comment ça va ?", "Bonjour, le monde."),
    ],
)
def test_first_sentence_cuts_at_the_languages_first_sentence_end(code, text, head):
    """``sentences`` (what a streaming listener gets) ends the first chunk where a sentence
    ends, in each language's marks, never at a clause mark."""
    whole = G.text_utterances(text, code)
    cut = G.text_utterances(text, code, first="sentence")
    assert len(cut) == len(whole) + 1 and cut[0].text == head
    assert cut[1].text == text[len(head) :].strip()
    assert G.text_utterances(text, code, first="none") == whole  # control: no cut asked


# -- loading ---------------------------------------------------------------------------------------


def test_each_g2p_is_imported_only_when_its_language_is_used():
    code = (
        "import sys, warnings\n"
        "from kokoro_tvm.runtime import g2p\n"
        "heavy = ('jieba', 'fugashi', 'pyopenjtalk', 'misaki.zh', 'misaki.ja', 'spacy', "
        "'phonemizer')\n"
        "seen = lambda: sorted(m for m in heavy if m in sys.modules)\n"
        "print(seen())\n"
        "g2p.phonemize('Hola.', 'e'); print(seen())\n"
        "g2p.phonemize('你好。', 'z'); print(seen())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "['phonemizer']"  # Spanish: espeak only
    assert out[2] == "['jieba', 'misaki.zh', 'phonemizer']"


_EVERY_G2P = (
    "import warnings; warnings.simplefilter('always')\n"
    "from kokoro_tvm.runtime.g2p import quiet, text_utterances\n"
    "{patch}\n"
    "for text, lang in [('Hello world.', 'a'), ('Bonjour.', 'f'), ('こんにちは。', 'j'),"
    " ('你好。', 'z'), ('Nice 👍 day.', 'a')]:\n"
    "    text_utterances(text, lang)\n"
)


def _every_g2p(patch: str = "") -> str:
    """stderr of a fresh interpreter that loads and runs every G2P family, every warning shown
    (the packages warn when first imported)."""
    return subprocess.run(
        [sys.executable, "-c", _EVERY_G2P.format(patch=patch)],
        capture_output=True,
        text=True,
        check=True,
    ).stderr


def test_g2p_packages_deprecations_are_not_shown():
    """Every G2P loads and speaks without its packages' deprecation warnings (misaki's
    ``open_text``, spaCy's ``Dictionary.create()``, ``torch.jit.script``), even with every
    warning shown; the runtime's own warning is still there, on one line."""
    err = _every_g2p()
    assert "deprecated" not in err.lower(), err
    (line,) = [x for x in err.splitlines() if "DroppedTextWarning" in x]
    assert "does not read emoji" in line
    # control: without the filter the packages' warnings show (the check above can fail)
    assert "deprecated" in _every_g2p("quiet.hush_third_party = lambda: None")


@pytest.mark.parametrize(
    "code, module, extra",
    [("z", "jieba", "text-zh"), ("j", "fugashi", "text-ja"), ("f", "phonemizer", "text")],
)
def test_missing_g2p_names_the_extra(monkeypatch, code, module, extra):
    gone = [
        m for m in sys.modules if m in (module, "misaki") or m.startswith(("misaki.", module + "."))
    ]
    for m in gone:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, module, None)  # not importable
    loaders.load.cache_clear()
    try:
        with pytest.raises(
            G.G2PUnavailable, match=rf"pip install 'kokoro-tvm-pipeline\[{extra}\]'"
        ):
            G.text_utterances("text", code)
    finally:
        loaders.load.cache_clear()
    monkeypatch.undo()
    assert G.text_utterances(SENTENCES[code][0], code)  # control: installed, it loads


def test_readme_table_is_the_language_table():
    """The README's "Languages and voices" table: every language with its codes, its voice
    count (and only its own voices) and its extra, as the runtime has them."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Languages and voices", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "`" in r]
    assert len(rows) == len(languages.LANGUAGES)
    for row, (code, lang) in zip(rows, languages.LANGUAGES.items()):
        name, codes, voices, _, extra = (c.strip() for c in row.strip("|").split("|"))
        assert name == lang.name and codes == f"`{code}` / `{lang.onnx}`"
        count = sum(v[0] == code for v in languages.VOICES)
        assert voices.startswith(f"{count}: ")
        assert all(
            languages.of_voice(v).code == code for v in re.findall(r"`([a-z]{2}_\w+)`", voices)
        )
        assert extra == f"`{lang.extra}`"
