"""Stage ``toolchain``: record the versions that shape artifacts (``setup`` already checked them
against params.yaml ``toolchain``); every other stage depends on this file."""

from __future__ import annotations

from .. import artifacts as A
from ..params import Params
from ..toolchain import versions


def run(prm: Params) -> None:
    A.write_json(A.toolchain_file(), versions())
