"""URLs, e-mail addresses and phone numbers as people say them, in each of Kokoro's languages.

Read literally, ``https://example.com/docs`` is "h t t p s colon slash slash example dot com
slash docs" (misaki) or letters and symbols the model never learned (the Chinese and Japanese
G2Ps), ``me@x.org`` loses its dot, and ``555-1234`` is "five hundred fifty five twelve thirty
four". Here each is found in the text, split by a parser where there is one (``urllib.parse`` for
URLs, ``email.headerregistry`` for addresses), and said part by part in the language's words:
a web address without its ``http(s)://``, "dot" between names, "slash" between path parts; an
address's "at"; a phone number digit by digit in the groups it was written in, the groups
joined by commas (a short pause), each digit left to the language's own G2P.

A match never takes the punctuation after it (``See example.com.`` keeps its sentence end), and
no reading holds a sentence mark or a line break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.errors import HeaderParseError
from email.headerregistry import Address
from urllib.parse import unquote, urlsplit

from ..languages import Language


@dataclass(frozen=True)
class Words:
    """How a language says the symbols of an address."""

    dot: str
    slash: str
    at: str
    dash: str
    underscore: str
    colon: str
    question: str
    equals: str
    amp: str
    hash: str
    plus: str
    tilde: str
    percent: str

    def symbol(self, c: str) -> str:
        return {
            ".": self.dot,
            "/": self.slash,
            "@": self.at,
            "-": self.dash,
            "_": self.underscore,
            ":": self.colon,
            "?": self.question,
            "=": self.equals,
            "&": self.amp,
            "#": self.hash,
            "+": self.plus,
            "~": self.tilde,
            "%": self.percent,
        }[c]


_EN = Words(
    "dot", "slash", "at", "dash", "underscore", "colon", "question mark", "equals", "and",
    "hash", "plus", "tilde", "percent",
)  # fmt: skip
#: per ``lang_code``: the words a speaker of the language uses for an address's symbols
WORDS: dict[str, Words] = {
    "a": _EN,
    "b": _EN,
    "e": Words(
        "punto", "barra", "arroba", "guion", "guion bajo", "dos puntos", "interrogación",
        "igual", "y", "almohadilla", "más", "virgulilla", "por ciento",
    ),
    "f": Words(
        "point", "slash", "arobase", "tiret", "tiret bas", "deux-points",
        "point d'interrogation", "égal", "et", "dièse", "plus", "tilde", "pour cent",
    ),
    "h": Words(
        "डॉट", "स्लैश", "एट", "डैश", "अंडरस्कोर", "कोलन", "प्रश्नचिह्न", "बराबर", "और",
        "हैश", "प्लस", "टिल्ड", "प्रतिशत",
    ),
    "i": Words(
        "punto", "slash", "chiocciola", "trattino", "trattino basso", "due punti",
        "punto interrogativo", "uguale", "e", "cancelletto", "più", "tilde", "per cento",
    ),
    "p": Words(
        "ponto", "barra", "arroba", "hífen", "underline", "dois pontos", "interrogação",
        "igual", "e", "cerquilha", "mais", "til", "por cento",
    ),
    "j": Words(
        "ドット", "スラッシュ", "アットマーク", "ハイフン", "アンダーバー", "コロン",
        "クエスチョン", "イコール", "アンド", "シャープ", "プラス", "チルダ", "パーセント",
    ),
    "z": Words(
        "点", "斜杠", "艾特", "横杠", "下划线", "冒号", "问号", "等于", "和", "井号", "加",
        "波浪号", "百分号",
    ),
}  # fmt: skip

#: top-level domains a bare ``name.tld`` is read as an address for (with ``http(s)://`` or
#: ``www.`` any is); file extensions that are also country codes (``.md``, ``.sh``, ``.py``,
#: ``.rs``, ``.pl``) are left out, so ``README.md`` stays a file name
TLDS = (
    "com", "org", "net", "edu", "gov", "mil", "int", "info", "biz", "io", "ai", "dev", "app",
    "co", "me", "tv", "us", "uk", "ca", "au", "nz", "ie", "de", "fr", "es", "it", "pt", "br",
    "nl", "be", "ch", "at", "se", "no", "dk", "fi", "eu", "ru", "jp", "cn", "in", "mx", "ar",
    "xyz", "site", "online", "tech", "blog", "news", "shop", "store", "cloud",
)  # fmt: skip

#: what may follow an address in prose and is not part of it
_TRAILING = ".,;:!?'\"”’)]}>»"
#: what an address is written in: ASCII but space and ``<>"``, and accented Latin letters (a
#: path may hold them); Chinese or Japanese text around an address needs no space to end it.
#: Word boundaries are ASCII (``re.ASCII``) for the same reason.
_URL_CHAR = r"[!#-;=?-~\u00c0-\u024f]"
_EXPLICIT_URL = re.compile(
    rf"(?<![\w@/.-])(?:https?://|www\.){_URL_CHAR}+", re.IGNORECASE | re.ASCII
)
_BARE_DOMAIN = re.compile(
    r"(?<![\w@/.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+(?:"
    + "|".join(TLDS)
    + rf")(?::\d{{1,5}})?(?:/{_URL_CHAR}*)?(?![\w@-])",
    re.ASCII,
)
_HOST = re.compile(r"[A-Za-z0-9\u00c0-\u024f-]+(?:\.[A-Za-z0-9\u00c0-\u024f-]+)*")
_EMAIL = re.compile(
    r"(?<![\w.+-])(?:mailto:)?[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?![\w-])", re.ASCII
)
#: phone numbers: North American ``(555) 123-4567``, ``555-123-4567``, ``555-1234`` (a dash:
#: ``555 1234`` may be two counts), and international ``+44 20 7946 0958``
_PHONE = re.compile(
    r"(?<![\w+.,/-])(?:"
    r"(?:\+?1[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}"
    r"|[2-9]\d{2}-\d{4}"
    r"|\+\d{1,3}(?:[ .-]\(?\d{1,4}\)?){2,5}"
    r")(?![\w-]|[.,]\d)",
    re.ASCII,
)


def words(lang: Language) -> Words:
    return WORDS[lang.code]


def _trim(found: str) -> tuple[str, str]:
    """An address found in prose and what follows it that is prose: trailing punctuation,
    and a closing bracket the address did not open."""
    end = len(found)
    while end and found[end - 1] in _TRAILING:
        if found[end - 1] == ")" and found.count("(", 0, end) >= found.count(")", 0, end):
            break
        end -= 1
    return found[:end], found[end:]


def _sub(pattern: re.Pattern, read, text: str) -> str:
    def one(m: re.Match) -> str:
        found, rest = _trim(m.group())
        said = read(found)
        return (said if said is not None else found) + rest

    return pattern.sub(one, text)


def _name(part: str, w: Words) -> str:
    """One part of an address (a host name, a path segment, a user name) with its inner
    symbols said as words: ``my-page_2.html`` -> ``my dash page underscore 2 dot html``; other
    symbols (brackets, ``!``, ``,``) are not said, so none ends a sentence."""
    out = []
    for piece in re.split(r"([^\w]|_)", part):
        if len(piece) == 1 and (piece == "_" or not piece.isalnum()):
            piece = w.symbol(piece) if piece in _SAID_SYMBOLS else ""
        if piece.strip():
            out.append(piece)
    return " ".join(out)


_SAID_SYMBOLS = frozenset("./@-_:?=&#+~%")


def read_url(url: str, w: Words) -> str | None:
    """A web address as it is said: its host, port, path, query and fragment, without the
    ``http(s)://`` nobody says; None for what does not parse as one."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not _HOST.fullmatch(parts.hostname or ""):
        return None
    said = [f" {w.dot} ".join(parts.hostname.split("."))]
    if port is not None:
        said += [w.colon, str(port)]
    for segment in unquote(parts.path).split("/"):
        if segment:
            said += [w.slash, _name(segment, w)]
    if parts.query:
        said += [w.question, _name(unquote(parts.query), w)]
    if parts.fragment:
        said += [w.hash, _name(unquote(parts.fragment), w)]
    return " ".join(said)


def read_email(address: str, w: Words) -> str | None:
    """``me@x.org`` as "me at x dot org", in the language's words; None when it is not an
    address (``email.headerregistry`` parses it)."""
    try:
        parsed = Address(addr_spec=address.removeprefix("mailto:"))
    except (HeaderParseError, ValueError, IndexError):
        return None
    if not parsed.username or "." not in parsed.domain:
        return None
    domain = f" {w.dot} ".join(parsed.domain.split("."))
    return f"{_name(parsed.username, w)} {w.at} {domain}"


def read_phone(number: str, w: Words) -> str:
    """Digit by digit, in the groups it was written in: ``+1 (555) 123-4567`` -> ``plus 1, 5 5
    5, 1 2 3, 4 5 6 7`` (the G2P says each digit in its language)."""
    groups = [" ".join(g) for g in re.findall(r"\d+", number)]
    if number.startswith("+"):
        groups[0] = f"{w.plus} {groups[0]}"
    return ", ".join(groups)


def urls(text: str, lang: Language) -> str:
    """Every web address in ``text`` said: first those that say they are one (``http(s)://``,
    ``www.``), then bare ``name.tld`` ones (after e-mails, whose domains they would take)."""
    w = words(lang)
    return _sub(_EXPLICIT_URL, lambda u: read_url(u, w), text)


def bare_domains(text: str, lang: Language) -> str:
    w = words(lang)
    return _sub(_BARE_DOMAIN, lambda u: read_url(u, w), text)


def emails(text: str, lang: Language) -> str:
    w = words(lang)
    return _sub(_EMAIL, lambda a: read_email(a, w), text)


def phones(text: str, lang: Language) -> str:
    w = words(lang)
    return _sub(_PHONE, lambda n: read_phone(n, w) if 7 <= _digits(n) <= 15 else None, text)


def _digits(s: str) -> int:
    return sum(c.isdigit() for c in s)
