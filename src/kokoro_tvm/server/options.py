"""The ``kokoro-tvm serve`` options, and the command itself.

Importing this module imports nothing of the server's stack: the plain runtime install (no
``serve`` extra) still lists the command, and running it says which extra to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KokoroTVMError
from ..runtime.options import PROFILES

if TYPE_CHECKING:
    from .engine import ServerConfig


SERVE_PACKAGES = ("fastapi", "uvicorn", "av")
INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[serve]'"


class ServeUnavailable(KokoroTVMError, RuntimeError):
    """The ``serve`` extra is not installed."""


class ServeOptionError(KokoroTVMError, ValueError):
    """An option of ``kokoro-tvm serve`` out of its range."""


def add_arguments(p: argparse.ArgumentParser, default_artifacts: str) -> None:
    p.add_argument(
        "--artifacts",
        default=default_artifacts,
        help="artifact directory with manifest.json (default: $KOKORO_TVM_ARTIFACTS or "
        "./artifacts)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8880, help="port (default 8880; 0: any free one)")
    p.add_argument("--target", help="built target to run (default: the best one this CPU supports)")
    from ..runtime.arguments import add_precision  # the same option as synth's

    add_precision(p)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="synthesis threads sharing the one loaded model (default 1); the cores this "
        "process may use are shared out among them",
    )
    p.add_argument("--threads", type=int, help="TVM threads per worker (default: cores / workers)")
    p.add_argument(
        "--max-input-chars", type=int, default=4096, help="longest input (default 4096, OpenAI's)"
    )
    p.add_argument(
        "--max-streams",
        type=int,
        default=32,
        help="streams open at once; more get 429 (default 32)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=900.0,
        help="seconds one response may last, start to end (default 900)",
    )
    p.add_argument(
        "--send-timeout",
        type=float,
        default=30.0,
        help="seconds a client may leave audio unread before its stream is dropped (default 30)",
    )
    p.add_argument(
        "--first-audio",
        type=float,
        default=0.5,
        help="seconds within which admission control keeps every new stream's first audio; "
        "requests it cannot fit get 503 with Retry-After (default 0.5)",
    )
    p.add_argument(
        "--load-factor",
        type=float,
        default=0.9,
        help="share of the workers' time admission control may plan to use (default 0.9)",
    )
    p.add_argument(
        "--no-admission",
        action="store_true",
        help="accept every request up to --max-streams, even when streams will run late",
    )
    p.add_argument(
        "--cuts",
        choices=("sentences", "kokoro", "fast"),
        default="sentences",
        help="where streams are cut beyond kokoro's own chunks: sentences (the default: the "
        "first chunk ends at its first sentence end), kokoro (none), fast (short chunks cut "
        "inside sentences, 16 then 24 phonemes: earlier first audio and more listeners, at a "
        "measured cost in melody, pauses and words: docs/serving.md)",
    )
    p.add_argument(
        "--voices-dir",
        type=Path,
        help="a folder of extra voices (.pt, .npy, or one-voice .npz/.bin), each served by "
        "its file name without the suffix",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("KOKORO_TVM_API_KEY"),
        help="require this bearer token on /v1/ (the openai client's api_key; default: "
        "$KOKORO_TVM_API_KEY, else none)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        help="a web origin whose pages may call the API (CORS); repeat for more, '*' for any",
    )
    p.add_argument(
        "--download-files",
        type=int,
        default=16,
        help="files kept for return_download_link at most; the oldest go first (default 16)",
    )
    p.add_argument(
        "--download-mb",
        type=float,
        default=128.0,
        help="megabytes those files may hold in memory at most (default 128)",
    )
    p.add_argument(
        "--download-ttl",
        type=float,
        default=3600.0,
        help="seconds each of those files is kept (default 3600)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a whole request, head and body; later: 408 and the "
        "connection closed (default 10)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="connections open at once; requests on more get 503 with Retry-After, and past "
        "twice as many a connection is closed at once (default 256)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip warming the workers up")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--access-log", action="store_true", help="log every request")


def config(args: argparse.Namespace) -> ServerConfig:
    """The server's config from parsed options, each checked."""
    from .engine import ServerConfig

    for name in ("max_input_chars", "max_streams", "download_files"):
        if getattr(args, name) < 1:
            raise ServeOptionError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("request_timeout", "send_timeout", "first_audio", "download_mb", "download_ttl"):
        if not getattr(args, name) > 0:
            raise ServeOptionError(f"--{name.replace('_', '-')} must be a positive number")
    if not 0 < args.load_factor <= 1:
        raise ServeOptionError("--load-factor must be in (0, 1]")
    if not 0 <= args.port <= 65535:
        raise ServeOptionError(f"--port must be 0-65535, got {args.port}")
    if args.voices_dir is not None and not args.voices_dir.is_dir():
        raise ServeOptionError(f"--voices-dir {args.voices_dir} is not a folder")
    return ServerConfig(
        artifacts=Path(args.artifacts),
        target=args.target,
        precision=args.precision,
        workers=args.workers,
        threads=args.threads,
        max_input_chars=args.max_input_chars,
        max_streams=args.max_streams,
        request_timeout=args.request_timeout,
        send_timeout=args.send_timeout,
        first_audio=args.first_audio,
        load_factor=args.load_factor,
        admission=not args.no_admission,
        cuts=PROFILES["fast-shared" if args.cuts == "fast" else args.cuts],
        voices_dir=args.voices_dir,
        warmup=not args.no_warmup,
        api_key=args.api_key or None,
        allow_origins=tuple(args.allow_origin),
        download_files=args.download_files,
        download_mb=args.download_mb,
        download_ttl=args.download_ttl,
    )


def run(args: argparse.Namespace) -> None:
    missing = [m for m in SERVE_PACKAGES if importlib.util.find_spec(m) is None]
    if missing:
        raise ServeUnavailable(
            f"kokoro-tvm serve needs {', '.join(missing)}, which are not installed: {INSTALL_HINT}"
        )
    cfg = config(args)
    from .main import HttpConfig
    from .main import run as serve

    if not args.read_timeout > 0:
        raise ServeOptionError("--read-timeout must be a positive number")
    if args.max_connections < 1:
        raise ServeOptionError("--max-connections must be at least 1")
    http = HttpConfig(
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        read_timeout=args.read_timeout,
        max_connections=args.max_connections,
    )
    serve(cfg, http)
