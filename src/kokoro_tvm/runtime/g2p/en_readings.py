"""English chat text that misaki reads wrong, rewritten as a person says it.

misaki reads most numbers, money, percentages, ordinals, years and abbreviations as people say
them, and those are left to it. What it gets wrong is rewritten here, and nothing else:

- numeric dates: ``12/05/2024`` is "twelve zero five twenty twenty four", ``2024-12-05`` runs
  together; they are said "December fifth, 2024" (American, month first) or "the twelfth of
  May, 2024" (British, day first), after ``datetime.date`` accepts them;
- clock times: ``3:30pm`` keeps its colon (a pause in the middle of the time) and ``10am`` is
  "ten am" (the word); they are said "three thirty PM", "ten AM", ``15:00`` "fifteen hundred";
- numeric ranges: ``10-20`` runs together; "10 to 20";
- units after a number (off by default, as in Kokoro-FastAPI: ``5 in`` may be a preposition):
  ``5kg`` is "five K G"; "5 kilograms";
- an optional plural: ``item(s)`` is "item S"; "items";
- symbols misaki reads wrong in chat text: a stray ``*`` ("asterisk"), ``#`` before a number
  ("number"), ``_`` inside a word (the parts run together), ``~`` before a number ("about").

Numbers are said by ``num2words``. No reading holds a sentence mark or a line break.
"""

from __future__ import annotations

import re
from datetime import date, time

MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip


def _words(n: int, to: str = "cardinal") -> str:
    from num2words import num2words

    return num2words(n, lang="en", to=to)


# -- dates --------------------------------------------------------------------------------------

_SLASH_DATE = re.compile(r"(?<![\w/.-])(\d{1,2})/(\d{1,2})/(\d{4})(?![\w/]|[.,]\d)")
_ISO_DATE = re.compile(r"(?<![\w/.:-])(\d{4})-(\d{2})-(\d{2})(?![\w:-]|[.,]\d)")


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def say_date(d: date, british: bool) -> str:
    """ "December fifth, 2024" (American) or "the fifth of December, 2024" (British); misaki
    says the year."""
    month, day = MONTHS[d.month - 1], _words(d.day, "ordinal")
    return f"the {day} of {month}, {d.year}" if british else f"{month} {day}, {d.year}"


def dates(text: str, british: bool) -> str:
    """Numeric dates said: ``M/D/YYYY`` (``D/M/YYYY`` in British English, or where only that
    order is a date) and ISO ``YYYY-MM-DD``."""

    def slashed(m: re.Match) -> str:
        a, b, year = (int(g) for g in m.groups())
        first, second = (b, a) if british else (a, b)  # (month, day)
        d = _date(year, first, second) or _date(year, second, first)
        return say_date(d, british) if d else m.group()

    def iso(m: re.Match) -> str:
        d = _date(*(int(g) for g in m.groups()))
        return say_date(d, british) if d else m.group()

    return _ISO_DATE.sub(iso, _SLASH_DATE.sub(slashed, text))


# -- times --------------------------------------------------------------------------------------

_CLOCK = re.compile(
    r"(?<![\w:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?:( ?)([AaPp][Mm])\b)?(?![\w:]|[.,]\d)"
)
_HOUR_AMPM = re.compile(r"(?<![\w:.])(\d{1,2})([AaPp][Mm])\b")


def say_time(t: time, half: str = "") -> str:
    """``t`` as it is said: "three thirty PM", "three oh five", "three o'clock", "fifteen
    hundred", "twelve thirty and fifteen seconds"."""
    said = [_words(t.hour)]
    if t.minute:
        said.append(("oh " if t.minute < 10 else "") + _words(t.minute))
    elif not half and not t.second:
        said.append("o'clock" if 1 <= t.hour <= 12 else "hundred")
    if t.second:
        said.append(f"and {_words(t.second)} second{'s' if t.second != 1 else ''}")
    if half:
        said.append(half.upper())
    return " ".join(said)


def times(text: str) -> str:
    """``H:MM``, ``H:MM:SS`` with or without am/pm, and ``10am``, said (``3:30 p.m.`` with
    its dots keeps them: misaki says those)."""

    def clock(m: re.Match) -> str:
        h, mi, s, _, half = m.groups()
        try:
            t = time(int(h), int(mi), int(s or 0))
        except ValueError:
            return m.group()
        if half and not 1 <= t.hour <= 12:
            return m.group()
        return say_time(t, half or "")

    def hour(m: re.Match) -> str:
        h = int(m.group(1))
        return f"{_words(h)} {m.group(2).upper()}" if 1 <= h <= 12 else m.group()

    return _HOUR_AMPM.sub(hour, _CLOCK.sub(clock, text))


# -- ranges -------------------------------------------------------------------------------------

_RANGE = re.compile(r"(?<![\w.,/-])(\d+(?:[.,]\d+)?) ?[-–] ?(\d+(?:[.,]\d+)?)(?![\w/-]|[.,]\d)")


def ranges(text: str) -> str:
    """``10-20`` and ``10–20`` as "10 to 20" (after dates and phone numbers took theirs)."""
    return _RANGE.sub(r"\1 to \2", text)


# -- units --------------------------------------------------------------------------------------

#: unit symbol (as written, case and all) -> (singular, plural); symbols that are also words
#: or letters in prose (``in``, ``s``, ``h``, ``a``, ``K``) are left out
UNITS: dict[str, tuple[str, str]] = {
    "mm": ("millimeter", "millimeters"),
    "cm": ("centimeter", "centimeters"),
    "m": ("meter", "meters"),
    "km": ("kilometer", "kilometers"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "mi": ("mile", "miles"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "kg": ("kilogram", "kilograms"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "L": ("liter", "liters"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "m/s": ("meter per second", "meters per second"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "B": ("byte", "bytes"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Kb": ("kilobit", "kilobits"),
    "Mb": ("megabit", "megabits"),
    "Gb": ("gigabit", "gigabits"),
    "kbps": ("kilobit per second", "kilobits per second"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "px": ("pixel", "pixels"),
}
_UNIT = re.compile(
    r"(?<![\w.,])(\d+(?:[.,]\d+)*) ?("
    + "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
    + r")(?![\w°/])"
)


def units(text: str) -> str:
    """A number's unit said in full, singular after exactly 1: ``5kg`` -> "5 kilograms"."""

    def one(m: re.Match) -> str:
        number, unit = m.groups()
        singular, plural = UNITS[unit]
        return f"{number} {singular if number == '1' else plural}"

    return _UNIT.sub(one, text)


# -- optional plurals and symbols ---------------------------------------------------------------


def optional_plurals(text: str) -> str:
    """``item(s)`` -> "items", as Kokoro-FastAPI reads it."""
    return re.sub(r"(?<=[A-Za-z])\(s\)", "s", text)


_SYMBOLS = (
    (re.compile(r"(?<=\d) ?\* ?(?=\d)"), " times "),  # 2*3: arithmetic
    (re.compile(r"( ?)(?<![\w*])\*+(?![\w*])( ?)"), lambda m: m[1] or m[2]),  # on its own
    (re.compile(r"(?<![\w*])\*+(?=\w)|(?<=\w)\*+(?![\w*])"), ""),  # one at a word's edge
    (re.compile(r"(?<![\w#])#(?=\d)"), "number "),
    (re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])"), " "),
    (re.compile(r"(?<![\w~])~ ?(?=\d)"), "about "),
)


def symbols(text: str) -> str:
    """The symbols misaki misreads in chat text, as words or as nothing (see the module)."""
    for pattern, said in _SYMBOLS:
        text = pattern.sub(said, text)
    return text
