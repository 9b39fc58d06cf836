"""Chat text as people say it: ``g2p.normalize_text`` before the G2P (Markdown, URLs, e-mails,
phone numbers; English dates, times, ranges, units, symbols), its switches, and the CLI's
``--no-normalize``; and ``kokoro-tvm synth`` printing no other package's warnings. (What is left
out of a text keeps its line breaks: tests/test_languages.py.)

Each reading is checked where it matters, in phonemes from the real G2P: the text normalized
gives the phonemes of its plain reading typed out, and the same text with ``normalize=False``
gives kokoro's own phonemes (``KPipeline``, a quiet pipeline: no model), which differ. The table
in docs/text.md is generated from ``CASES``: ``python tests/test_text_normalize.py`` rewrites it,
and ``test_docs_table_is_generated_from_the_cases`` fails when it is stale.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kokoro_tvm.runtime import g2p as G
from kokoro_tvm.runtime.chunking import InputError
from kokoro_tvm.runtime.g2p import NormalizationOptions, normalize_text

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "text.md"


class Case(NamedTuple):
    lang: str  # kokoro's lang_code
    text: str  # as a chat front end sends it
    reading: str  # as a person says it, typed out (read with normalize=False)


#: every reading the normalizer makes, in phonemes; docs/text.md shows them (generated)
CASES = [
    Case("a", "See **bold** text", "See bold text"),
    Case("a", "Docs: https://example.com/docs", "Docs: example dot com slash docs"),
    Case("a", "Write to me@x.org.", "Write to me at x dot org."),
    Case("a", "Call 555-1234.", "Call five five five, one two three four."),
    Case("a", "Call (555) 123-4567.", "Call five five five, one two three, four five six seven."),
    Case("a", "Due 12/05/2024.", "Due December fifth, 2024."),
    Case("b", "Due 12/05/2024.", "Due the twelfth of May, 2024."),
    Case("a", "Released 2024-12-05.", "Released December fifth, 2024."),
    Case("a", "Meet at 3:30pm.", "Meet at three thirty PM."),
    Case("a", "Open 9:00-17:30.", "Open nine o'clock to seventeen thirty."),
    Case("a", "Pages 10-20.", "Pages 10 to 20."),
    Case("a", "Pick item(s) #3.", "Pick items number 3."),
    Case("a", "Wow‼ Really⁉", "Wow!! Really!?"),
    Case(
        "a",
        "# Setup\n1. Run `pip install kokoro`\n2. Read [the guide](https://x.com/g)",
        "Setup\n1. Run pip install kokoro\n2. Read the guide",
    ),
    Case("a", "> **Note:** it's _fine_.", "Note: it's fine."),
    Case("a", "Before:\n```python\nprint('hi')\n```\nAfter.", "Before:\nAfter."),
    Case("a", "| Name | Age |\n|---|---|\n| Ann | 30 |", "Name, Age\nAnn, 30"),
    Case(
        "e",
        "**Hola**, visita https://example.com/docs o escribe a me@x.org.",
        "Hola, visita example punto com barra docs o escribe a me arroba x punto org.",
    ),
    Case(
        "f",
        "**Bonjour**, voyez https://example.com/docs ou écrivez à me@x.org.",
        "Bonjour, voyez example point com slash docs ou écrivez à me arobase x point org.",
    ),
    Case(
        "h",
        "**नमस्ते**, https://example.com/docs देखें या me@x.org पर लिखें।",
        "नमस्ते, example डॉट com स्लैश docs देखें या me एट x डॉट org पर लिखें।",
    ),
    Case(
        "i",
        "**Ciao**, visita https://example.com/docs o scrivi a me@x.org.",
        "Ciao, visita example punto com slash docs o scrivi a me chiocciola x punto org.",
    ),
    Case(
        "p",
        "**Olá**, visite https://example.com/docs ou escreva para me@x.org.",
        "Olá, visite example ponto com barra docs ou escreva para me arroba x ponto org.",
    ),
    Case(
        "j",
        "**こんにちは**、https://example.com/docs を見るか、me@x.orgに書いてください。",
        "こんにちは、example ドット com スラッシュ docs を見るか、"
        "me アットマーク x ドット orgに書いてください。",
    ),
    Case(
        "z",
        "**你好**，请访问https://example.com/docs或写信给me@x.org。",
        "你好，请访问example 点 com 斜杠 docs或写信给me 艾特 x 点 org。",
    ),
    Case("f", "Appelez le 555-2345.", "Appelez le cinq cinq cinq, deux trois quatre cinq."),
]


def phonemes(text: str, lang: str, **kw) -> list[str]:
    return [u.phonemes for u in G.text_utterances(text, lang, **kw)]


@functools.cache
def kpipeline(code: str):
    """kokoro's quiet pipeline for ``code`` (English around the runtime's misaki G2P, which
    tests/test_chunking.py proves is ``en.G2P``)."""
    from kokoro.pipeline import KPipeline

    if code in "ab":
        pipe = KPipeline.__new__(KPipeline)
        pipe.lang_code, pipe.model, pipe.voices, pipe.repo_id = code, None, {}, "hexgrad/Kokoro-82M"
        pipe.g2p = G.load(code)
        return pipe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return KPipeline(lang_code=code, model=False, repo_id="hexgrad/Kokoro-82M")


def kokoro(code: str, text: str) -> list[str]:
    return [r.phonemes for r in kpipeline(code)(text)]


# -- the readings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[f"{c.lang}:{c.text[:30]}" for c in CASES])
def test_text_is_read_as_people_say_it(case):
    """Normalized, the text gives the phonemes of its plain reading; as written
    (``normalize=False``) it gives kokoro's phonemes, which are not those."""
    said = phonemes(case.text, case.lang)
    assert said == phonemes(case.reading, case.lang, normalize=False), normalize_text(
        case.text, case.lang
    )
    as_written = phonemes(case.text, case.lang, normalize=False)
    assert as_written == kokoro(case.lang, case.text)  # today's reading: kokoro's exactly
    assert as_written != said  # control: the case tests something kokoro reads otherwise


def test_kokoros_own_readings_are_left_alone():
    """What misaki already says well (numbers, money, percentages, ordinals, years,
    abbreviations, ``a.m.``) is not rewritten."""
    text = "Dr. Smith paid $1,234.56 (10% off) on May 5th, 2024, at 10 a.m.; e.g. version 2.0.1."
    assert normalize_text(text, "a", NormalizationOptions()) == text
    assert phonemes(text, "a") == kokoro("a", text)


def test_units_are_read_out_when_asked():
    """``unit_normalization`` is off by default, as in Kokoro-FastAPI (``5 in`` may be a
    preposition); on, ``5kg`` is "5 kilograms", not "five K G"."""
    text = "It weighs 5kg, holds 10KB and runs at 20°C or 1 L."
    units = NormalizationOptions(unit_normalization=True)
    assert normalize_text(text, "a", NormalizationOptions()) == text
    reading = "It weighs 5 kilograms, holds 10 kilobytes and runs at 20 degrees Celsius or 1 liter."
    assert normalize_text(text, "a", units) == reading
    assert phonemes(text, "a", normalize=units) == phonemes(reading, "a", normalize=False)
    assert phonemes(text, "a") != phonemes(reading, "a", normalize=False)  # control


def test_phone_numbers_in_every_language_are_read_digit_by_digit():
    """Each digit is left to the language's G2P: misaki, espeak-ng and the Chinese G2P each
    say ``5 5 5``, not five hundred fifty-five."""
    for code, text in [("a", "555-1234"), ("e", "555-1234"), ("z", "请打555-1234。")]:
        out = normalize_text(text, code, NormalizationOptions())
        assert "5 5 5, 1 2 3 4" in out
        assert phonemes(text, code) != phonemes(text, code, normalize=False)


# -- options ---------------------------------------------------------------------------------------

#: Kokoro-FastAPI's ``NormalizationOptions`` (api/src/structures/schemas.py): field -> default
FASTAPI_FIELDS = {
    "normalize": True,
    "unit_normalization": False,
    "url_normalization": True,
    "email_normalization": True,
    "optional_pluralization_normalization": True,
    "phone_normalization": True,
    "replace_remaining_symbols": True,
}


def test_options_are_kokoro_fastapis_plus_markdown():
    fields = {f.name: f.default for f in dataclasses.fields(NormalizationOptions)}
    assert fields == {**FASTAPI_FIELDS, "markdown": True}
    with pytest.raises(dataclasses.FrozenInstanceError):
        NormalizationOptions().normalize = False  # type: ignore[misc]


@pytest.mark.parametrize(
    "field, text",
    [
        ("normalize", "**Mail** me@x.org at 3:30pm"),
        ("markdown", "# Setup"),
        ("url_normalization", "See https://example.com/docs and example.com."),
        ("email_normalization", "Write to me@x.org."),
        ("phone_normalization", "Call +1 555 123 4567."),
        ("optional_pluralization_normalization", "Pick item(s)."),
        ("replace_remaining_symbols", "Fan #1 of snake_case, ~5 of them‼"),
    ],
)
def test_each_switch_turns_its_reading_off(field, text):
    assert normalize_text(text, "a", NormalizationOptions()) != text
    assert normalize_text(text, "a", NormalizationOptions(**{field: False})) == text


def test_normalize_false_and_true_and_options():
    text = "See **bold** text"
    assert phonemes(text, "a", normalize=False) == kokoro("a", text)
    assert phonemes(text, "a", normalize=NormalizationOptions(normalize=False)) == kokoro("a", text)
    assert phonemes(text, "a", normalize=True) == phonemes(text, "a") != kokoro("a", text)
    assert phonemes(text, "a", normalize=NormalizationOptions(markdown=False)) == phonemes(
        "See bold text", "a", normalize=False
    )  # the stray stars go as remaining symbols


def test_a_bad_normalize_value_is_a_clear_error():
    with pytest.raises(InputError, match=r"normalize must be True .* or a NormalizationOptions"):
        G.text_utterances("Hello.", "a", normalize="yes")  # type: ignore[arg-type]


def test_markdown_with_nothing_to_say_aloud_is_a_clear_error():
    code = "```python\nprint('hi')\n```"
    with pytest.raises(InputError, match=r"nothing said aloud.*normalize=False"):
        G.text_utterances(code, "a")
    assert phonemes(code, "a", normalize=False)  # control: as written, it is read


# -- line breaks and sentence ends -----------------------------------------------------------------

_PIECES = [
    "See ",
    "word",
    " ",
    "\n",
    ". ",
    "! ",
    "? ",
    ",",
    ":",
    "(",
    ")",
    "*",
    "**",
    "_",
    "#1",
    "~5",
    "10-20",
    "3:30pm",
    "12/05/2024",
    "2024-12-05",
    "555-1234",
    "+1 555 123 4567",
    "me@x.org",
    "https://example.com/docs",
    "www.a.io",
    "example.com",
    "item(s)",
    "@",
    "/",
    "-",
    "5",
    "pm",
    "12:30",
    "http://",
    "x.co",
]


def _ends(text: str) -> int:
    """Sentence ends: a run of ``.!?`` before whitespace or the end, once stray stars (which
    the rewrite drops) are gone: ``Really?*`` ends a sentence."""
    return len(re.findall(r"[.!?。！？]+(?=\s|$)", text.replace("*", "")))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14).map("".join))
def test_the_rewrite_keeps_line_breaks_and_sentence_ends(text):
    """No reading takes or makes a line break or a sentence end (kokoro pauses at both)."""
    for code in ("a", "b", "f", "z"):
        out = normalize_text(text, code, NormalizationOptions(markdown=False))
        assert out.count("\n") == text.count("\n"), (code, out)
        assert _ends(out) == _ends(text), (code, out)


_WORDS = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
_LINE = st.lists(
    st.one_of(_WORDS, st.sampled_from([" ", ", ", ". ", "! ", "? "])), min_size=1, max_size=8
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=6))
def test_markdown_keeps_the_lines_of_plain_prose(lines):
    """Prose without Markdown keeps every line and sentence end through the Markdown reader."""
    text = "\n".join(lines)
    out = normalize_text(text, "a", NormalizationOptions())
    kept = [x.strip() for x in out.split("\n") if x.strip()]
    assert kept == [x.strip() for x in lines if x.strip()]
    assert _ends(out) == _ends(text)


# -- quiet output ----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_PIECES + ["```", "| a |", "# ", "[x](", "<b>"]), st.text(max_size=4)
        ),
        max_size=12,
    ).map("".join),
    st.sampled_from("abefhipjz"),
)
def test_any_text_is_normalized_without_error(text, code):
    """Whatever is typed, in any language, the rewrite returns text (no parser's error)."""
    assert isinstance(
        normalize_text(text, code, NormalizationOptions(unit_normalization=True)), str
    )


_CLI = (
    "import sys\n"
    "from kokoro_tvm.runtime.g2p import quiet\n"
    "{patch}\n"
    "from kokoro_tvm.runtime import cli\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def _synth(argv: list[str], patch: str = "") -> subprocess.CompletedProcess:
    """``kokoro-tvm`` in a fresh interpreter (the packages warn when first imported)."""
    return subprocess.run(
        [sys.executable, "-c", _CLI.format(patch=patch), *argv], capture_output=True, text=True
    )


def test_readme_synth_examples_print_only_the_runtimes_warnings(tmp_path, tmp_path_factory):
    """``kokoro-tvm synth --text`` as the README runs it: every line on stderr is one of the
    runtime's own warnings (``-q``: no progress), none another package's."""
    from runtime_project import runtime_artifacts  # the tiny test libraries, built once

    artifacts = runtime_artifacts(tmp_path_factory)
    examples = [("Hello world.", "af_heart"), ("Bonjour le monde.", "ff_siwis")]
    commands = [
        ["synth", "--text", text, "--voice", voice, "-o", str(tmp_path / "x.wav"), "-q"]
        + ["--artifacts", str(artifacts)]
        for text, voice in examples
    ]
    for argv in commands:
        done = _synth(argv)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert lines and all(x.startswith("warning: ") for x in lines), done.stderr
        assert "deprecated" not in done.stderr
    # control: without the filter the English example shows misaki's and spaCy's warnings
    assert "deprecated" in _synth(commands[0], "quiet.hush_third_party = lambda: None").stderr


def test_cli_no_normalize_reads_text_as_written(tmp_path, tmp_path_factory):
    from runtime_project import runtime_artifacts

    artifacts = runtime_artifacts(tmp_path_factory)
    text = "See **bold** text"
    argv = ["synth", "--text", text, "--voice", "af_heart", "-o", str(tmp_path / "x.wav")]
    argv += ["--artifacts", str(artifacts)]
    said = [x for x in _synth(argv).stderr.splitlines() if x.startswith("phonemes: ")]
    raw = [x for x in _synth([*argv, "--no-normalize"]).stderr.splitlines() if "phonemes: " in x]
    assert said == [f"phonemes: {p}" for p in phonemes("See bold text", "a", normalize=False)]
    assert raw == [f"phonemes: {p}" for p in kokoro("a", text)] != said


# -- docs ------------------------------------------------------------------------------------------

_BEGIN = "<!-- cases: generated from tests/test_text_normalize.py CASES; rewrite with "
_BEGIN += "`python tests/test_text_normalize.py` -->"
_END = "<!-- /cases -->"


def _cell(text: str) -> str:
    shown = text.replace("\n", "↵").replace("|", "\\|")
    return f"`` {shown} ``" if "`" in shown else f"`{shown}`"


def doc_table() -> str:
    """docs/text.md's table: each case's input and what the normalizer makes of it."""
    from kokoro_tvm.runtime.languages import LANGUAGES

    rows = ["| language | written | read as |", "|---|---|---|"]
    for case in CASES:
        said = normalize_text(case.text, case.lang, NormalizationOptions())
        rows.append(f"| {LANGUAGES[case.lang].name} | {_cell(case.text)} | {_cell(said)} |")
    return "\n".join([_BEGIN, *rows, _END])


def test_docs_table_is_generated_from_the_cases():
    doc = DOC.read_text(encoding="utf-8")
    found = doc[doc.index(_BEGIN) : doc.index(_END) + len(_END)]
    assert found == doc_table(), "docs/text.md is stale: run `python tests/test_text_normalize.py`"


if __name__ == "__main__":
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(_BEGIN), doc.index(_END) + len(_END)
    DOC.write_text(doc[:start] + doc_table() + doc[end:], encoding="utf-8")
    print(f"wrote {DOC.relative_to(REPO)}")
