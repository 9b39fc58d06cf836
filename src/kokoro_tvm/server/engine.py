"""What one server process holds: the loaded model, its voices, the scheduler, and the threads
that keep the event loop free (G2P and request checks on one thread, encoding on others).
"""

from __future__ import annotations

import gc
import itertools
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import KokoroTVMError
from ..runtime import chunking
from ..runtime.options import FAST_SHARED, LISTENER, Cuts
from .families import declare_model
from .metrics import Metrics
from .scheduler import Scheduler
from .schema import SpeechRequest
from .streams import SchedulerConfig
from .voices import RANDOM_VOICE, VoiceBook

log = logging.getLogger("kokoro_tvm.server")


#: a warm-up utterance (phonemes, so no G2P is needed): loads every worker's VMs, and its
#: chunks, short and sentence-long, give the cost model its first data over the range requests
#: span
#: (chunks of one size alone leave its slope and overhead apart to chance)
WARMUP_PHONEMES = (
    "ðə wˈɔɹm ˌʌp ɪz dˈʌn, ænd ðə sˈɜɹvəɹ ɪz ɹˈɛdi. ˌɪt lˈOdz ˈɛvəɹi lˈIbɹˌɛɹi wˈʌns, tˈImz ɐ "
    "fjˈu ʧˈʌŋks ʌv dˈɪfəɹənt lˈɛŋθs, ænd ðˈɛn ˈOpᵊnz ɪts pˈɔɹt tə ðə klˈIənts ðæt ɑɹ wˈATɪŋ."
)


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``kokoro-tvm serve`` takes (its options have the same names)."""

    artifacts: Path
    target: str | None = None
    precision: str = "auto"  # what the libraries compute in (``KokoroTVM.from_manifest``)
    workers: int = 1
    threads: int | None = None  # TVM threads per worker; None: the process's cores shared out
    max_input_chars: int = 4096  # OpenAI's limit
    max_streams: int = 32
    request_timeout: float = 900.0  # seconds one response may take, start to end
    send_timeout: float = 30.0  # seconds a client may leave a chunk unread
    first_audio: float = 0.5  # seconds: admission keeps every new stream's first audio within it
    first_slack: float = 0.0  # seconds after arrival a first chunk is due (its EDF deadline)
    load_factor: float = 0.9  # share of the workers' time admission may plan to use
    admission: bool = True
    cuts: Cuts = LISTENER  # where streams are cut beyond kokoro's utterances (options.Cuts)
    max_ahead: int = 2  # chunks a stream may run ahead of its client
    voices_dir: Path | None = None
    warmup: bool = True
    api_key: str | None = None  # required as a bearer token on /v1/ when set
    allow_origins: tuple[str, ...] = ()  # CORS: web pages on these origins may call the API
    # return_download_link's store: files kept at most, their megabytes, seconds each is kept
    download_files: int = 16
    download_mb: float = 128.0
    download_ttl: float = 3600.0

    @property
    def max_body_bytes(self) -> int:
        """A body large enough for the longest input in 4-byte UTF-8, escaped, plus fields."""
        return self.max_input_chars * 12 + 16384


class Engine:
    """The model and everything around it that the HTTP layer calls."""

    def __init__(self, config: ServerConfig, tts: Any = None):
        from ..runtime import threads

        self.config = config
        workers = threads.check_count(config.workers, "--workers") or 1
        per_worker = threads.share(workers)
        if config.threads:
            per_worker = threads.check_count(config.threads, "--threads") or per_worker
        if tts is None:
            from ..runtime.synthesizer import KokoroTVM

            tts = KokoroTVM.from_manifest(
                config.artifacts,
                target=config.target,
                num_threads=per_worker,
                precision=config.precision,
            )
        self.tts = tts
        #: what each component computes in (/health, /metrics); a stand-in model may not say
        self.precision: dict[str, str] = dict(getattr(tts, "precision", {}))
        self.metrics = Metrics()
        declare_model(self.metrics, self.precision)
        scheduling = SchedulerConfig(
            workers=workers,
            threads_per_worker=per_worker,
            max_ahead=config.max_ahead,
            max_streams=config.max_streams,
            first_audio=config.first_audio,
            first_slack=config.first_slack,
            load_factor=config.load_factor,
            admission=config.admission,
            chunk_limits=config.cuts.limits or (chunking.MAX_PHONEMES,),
        )
        self.scheduler = Scheduler(
            self.metrics, scheduling, worker_setup=lambda: threads.use_threads(per_worker)
        )
        random_build = tts.manifest.model.random
        self.voices = VoiceBook(
            self._registry, tts.voice_pack, config.voices_dir, random_voice=random_build
        )
        self.prep = ThreadPoolExecutor(1, thread_name_prefix="kokoro-prep")
        self.encode = ThreadPoolExecutor(max(2, workers), thread_name_prefix="kokoro-encode")
        self.started = time.time()
        self.text_ready: str | None = None  # why English text input is unavailable, if it is

    def _registry(self) -> list[str]:
        get = getattr(self.tts, "get_voices", None)
        names = get() if callable(get) else self.tts.voices
        return [n if isinstance(n, str) else str(n.get("name", n)) for n in names]

    def start(self) -> None:
        """Warm the G2P (on its own thread) and every worker, then serve."""
        g2p = self.prep.submit(self._warm_g2p)
        warmup = None
        if self.config.warmup:
            # a real voice on a trained build: a random style's durations are not speech's
            names = [n for n in self.voices.names() if n != RANDOM_VOICE]
            trained = names and not self.voices.random_voice
            pack = self.voices.resolve(names[0]).pack if trained else RANDOM_VOICE
            # short chunks, then the configured ones: the cost model's first data spans both
            warmup = lambda: itertools.chain(
                self.tts.stream(WARMUP_PHONEMES, pack, cuts=FAST_SHARED),
                self.tts.stream(WARMUP_PHONEMES, pack, cuts=self.config.cuts),
            )
        self.scheduler.start(warmup)
        g2p.result()
        # What is loaded by now (G2P lexicons, spaCy, the model's tables) lives as long as the
        # server. Left to the collector, every full collection walks it all holding the GIL (a
        # pause of the event loop and every worker's Python); frozen, it is never walked again.
        gc.collect()
        gc.freeze()

    def _warm_g2p(self) -> None:
        try:
            gen = self.tts("Hello.", voice=self.tts.voice_pack(RANDOM_VOICE), lang="en-us")
            gen.close()
        except KokoroTVMError as e:
            self.text_ready = str(e)
            log.warning("English text input is unavailable until this is fixed: %s", e)

    def stop(self) -> None:
        self.scheduler.stop()
        self.prep.shutdown(wait=False, cancel_futures=True)
        self.encode.shutdown(wait=False, cancel_futures=True)

    def open(self, req: SpeechRequest) -> Iterator[Any]:
        """The runtime stream for a request (on the prep thread: voice, G2P and every input
        check run here, so a bad request fails before any audio is sent)."""
        voice = self.voices.resolve(req.voice)
        options = self.tts.options(
            voice.pack, speed=req.speed, seed=req.seed, cuts=self.config.cuts
        )
        source = self.tts.source(
            req.input,
            req.lang or voice.lang or "en-us",
            req.input_type == "phonemes",
            options,
            True if req.normalization is None else req.normalization,
        )
        return self.tts.stream(source, options)
