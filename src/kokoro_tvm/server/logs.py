"""The runtime's warnings in the server's log: one line per kind, with bounded memory.

The runtime warns about what a request's input made it do (an utterance cut to fit a bucket,
symbols or text it dropped), quoting the input. Python's own ``default`` action would log each
distinct message once, and to do so remembers every message it has seen in the warning
module's ``__warningregistry__``, for ever: with users' text in the messages that grows by a
line of the log and an entry of memory per distinct request. Here a warning's kind is its
category and the line that raised it: the first of each kind is logged in full, later ones are
counted (``kokoro_warnings_total{category}``); at most ``MAX_KINDS`` kinds are remembered, and
Python's registry is never written (the filter's action is ``always``, which skips it).
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any

from .metrics import Metrics

#: kinds of warning remembered at most (the code has a few dozen places that warn)
MAX_KINDS = 256

log = logging.getLogger("kokoro_tvm.server")


class WarningLog:
    """``warnings.showwarning`` for the server (``install``)."""

    def __init__(self) -> None:
        self.kinds: set[tuple[str, str, int]] = set()
        self.metrics: Metrics | None = None
        self._lock = threading.Lock()

    def install(self) -> None:
        warnings.simplefilter("always")
        # other packages' deprecations say nothing to a server's operator
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.showwarning = self.show

    def count_in(self, metrics: Metrics) -> None:
        metrics.counter("warnings_total", "Warnings raised, by category.", labelled=True)
        self.metrics = metrics

    def show(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        kind = (category.__name__, filename, lineno)
        with self._lock:
            # past MAX_KINDS a new kind is only counted: memory stays bounded whatever warns
            first = kind not in self.kinds and len(self.kinds) < MAX_KINDS
            if first:
                self.kinds.add(kind)
        if self.metrics is not None:
            self.metrics.inc("warnings_total", category=category.__name__)
        if first:
            log.warning(
                "%s (%s:%d; later ones of this kind are only counted, in "
                "kokoro_warnings_total): %s",
                category.__name__,
                filename,
                lineno,
                message,
            )
        else:
            log.debug("%s: %s", category.__name__, message)
