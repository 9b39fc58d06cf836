"""Chat text as people say it, before the G2P: Markdown read as prose, URLs, e-mail addresses
and phone numbers said part by part, and in English the dates, times, ranges, units and symbols
misaki reads wrong.

kokoro reads its input literally, which suits prose and not what chat front ends send
(``**bold**``, links, code spans, ``https://...``). ``normalize_text`` rewrites only what the
G2P gets wrong; what misaki already says well (numbers, money, percentages, ordinals, years)
is left to it. ``NormalizationOptions`` has Kokoro-FastAPI's switches (its request field
``normalization_options``: the same names and defaults) and one for Markdown.

Every language gets Markdown (``prose``), URLs, e-mails and phone numbers (``addresses``, in the
language's words); English also gets ``en_readings``. The rewrite works line by line and no
reading holds a sentence mark, so the text keeps its line breaks and sentence ends, where
kokoro pauses. Pure: no G2P is loaded here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..chunking import InputError
from ..languages import Language, resolve
from . import addresses, en_readings


@dataclass(frozen=True)
class NormalizationOptions:
    """What ``normalize_text`` rewrites; the fields and defaults of Kokoro-FastAPI's
    ``normalization_options``, plus ``markdown``."""

    normalize: bool = True  #: False: the text is read as written (nothing below applies)
    unit_normalization: bool = False  #: ``10KB`` -> "10 kilobytes" (English)
    url_normalization: bool = True  #: URLs said as people say them
    email_normalization: bool = True  #: e-mail addresses said as people say them
    optional_pluralization_normalization: bool = True  #: ``item(s)`` -> "items" (English)
    phone_normalization: bool = True  #: phone numbers said digit by digit, in their groups
    #: symbols the G2P misreads (English: stray ``*``, ``#1``, ``snake_case``, ``~5``; every
    #: language: ``‼`` ``⁉`` as the marks they are)
    replace_remaining_symbols: bool = True
    markdown: bool = True  #: Markdown read as prose (emphasis, links, lists, tables, code)


#: what the G2Ps read as a character's name (espeak-ng: "double exclamation mark") and are
#: sentence ends
_MARKS = str.maketrans({"‼": "!!", "⁉": "!?"})


def normalize_text(
    text: str, lang: str | Language, options: NormalizationOptions = NormalizationOptions()
) -> str:
    """``text`` as it is said in ``lang`` (a ``lang_code`` or any name ``languages.resolve``
    takes), rewritten as ``options`` say; with ``normalize=False``, ``text`` itself."""
    lang = resolve(lang)
    if not options.normalize:
        return text
    if options.markdown:
        from .prose import markdown_prose

        text = markdown_prose(text)
    return "\n".join(_line(line, lang, options) for line in text.split("\n"))


def _line(line: str, lang: Language, o: NormalizationOptions) -> str:
    if o.url_normalization:
        line = addresses.urls(line, lang)  # before e-mails: a URL may hold an @
    if o.email_normalization:
        line = addresses.emails(line, lang)
    if o.url_normalization:
        line = addresses.bare_domains(line, lang)  # after e-mails: their domains are theirs
    if o.phone_normalization:
        line = addresses.phones(line, lang)
    if lang.g2p == "en":
        line = en_readings.dates(line, lang.british)
        line = en_readings.ranges(line)  # before times: 10:30-11:45 is a range of two
        line = en_readings.times(line)
        if o.unit_normalization:
            line = en_readings.units(line)
        if o.optional_pluralization_normalization:
            line = en_readings.optional_plurals(line)
        if o.replace_remaining_symbols:
            line = en_readings.symbols(line)
    if o.replace_remaining_symbols:
        line = line.translate(_MARKS)
    return line


def options_of(normalize: bool | NormalizationOptions) -> NormalizationOptions:
    """``text_utterances``'s ``normalize``: True for the defaults, False for none, or given
    options."""
    if isinstance(normalize, NormalizationOptions):
        return normalize
    if isinstance(normalize, bool):
        return NormalizationOptions(normalize=normalize)
    raise InputError(
        f"normalize must be True (the default text normalization), False (text read as "
        f"written) or a NormalizationOptions, got {type(normalize).__name__} {normalize!r}"
    )
