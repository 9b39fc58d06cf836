"""Stage ``toolchain``: record the versions that shape artifacts (``setup`` already checked them
against params.yaml ``toolchain``); every other stage depends on this file."""

from __future__ import annotations

from .. import artifacts
from ..params import Params
from ..toolchain import versions


def run(prm: Params) -> None:
    artifacts.write_json(artifacts.toolchain_file(), versions())


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
