"""Command-line options that ``synth`` and ``serve`` share, in the runtime so that the server's
option parser needs no part of the CLI (and the CLI none of the server, which it loads lazily)."""

from __future__ import annotations

import argparse

from ..spec import PRECISIONS


def add_precision(p: argparse.ArgumentParser) -> None:
    """``--precision``."""
    p.add_argument(
        "--precision",
        choices=("auto", *PRECISIONS),
        default="auto",
        help="what the libraries compute in: auto (the default: per component the narrowest "
        "precision validated for it that this CPU runs, e.g. bf16 decoders on AVX512_BF16), "
        "fp32 (kokoro's float32 numerics everywhere), bf16 (the bf16 libraries; an error where "
        "the CPU lacks them); `kokoro-tvm info` shows the pick (docs/precision.md)",
    )
