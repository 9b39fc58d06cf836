"""What every stage does first: validate ``params.yaml`` and check the installed toolchain.

A bad edit then fails fast with the key it concerns, before any work.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..params import Params, load
from ..toolchain import check_installed, versions


def setup(params_path: str | Path = "params.yaml") -> Params:
    prm = load(params_path)
    check_installed(prm.toolchain.as_dict(), versions())
    threads = prm.runtime.num_threads or os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # TVM defaults to half the cores
    return prm
