"""Other packages' deprecation warnings, kept from the user of the text front end.

The G2Ps' packages warn about their own use of deprecated APIs when they are imported or first
run (misaki's ``open_text``, spaCy's ``Dictionary.create()``, ``torch.jit.script`` reached
through spaCy's thinc): nothing a user of ``kokoro-tvm synth --text`` can act on. Only those
categories, and only when the warning is raised from one of those packages, are ignored; every
other warning, the runtime's own included, is shown as before.
"""

from __future__ import annotations

import warnings

#: the packages the G2Ps import (directly or through spaCy), as module-name prefixes
THIRD_PARTY = (
    "misaki",
    "spacy",
    "thinc",
    "torch",
    "jieba",
    "pypinyin",
    "cn2an",
    "fugashi",
    "unidic_lite",
    "pyopenjtalk",
    "cutlet",
    "jaconv",
    "mojimoji",
    "phonemizer",
    "espeakng_loader",
    "num2words",
    "markdown_it",
)
#: what a package says about its own dependencies' futures
CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_MODULES = r"(" + "|".join(THIRD_PARTY) + r")(\..*)?$"


def hush_third_party() -> None:
    """Ignore ``CATEGORIES`` raised from ``THIRD_PARTY`` modules. Called before each G2P import
    or call: each call moves the filters to the front again (``filterwarnings`` drops a filter
    already there), so they keep precedence over a ``simplefilter("always")`` set since."""
    for category in CATEGORIES:
        warnings.filterwarnings("ignore", category=category, module=_MODULES)
