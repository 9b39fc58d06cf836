"""uvicorn's HTTP/1.1 connection (h11), with what it lacks against clients that misbehave.

* A deadline for reading each request: uvicorn waits for a request's head and body as long as
  the client likes (its keep-alive timeout only runs between requests, and any byte received
  stops it), so sockets that send nothing, or a byte at a time, stay open for ever. Here a
  request must be read whole within ``read_timeout`` of when the connection is ready for it: a
  head that is late gets 408 and the connection is closed; a body that is late is the
  handler's to refuse (``intake.read_body``, 408), or, for one nobody reads, closes the
  connection ``BODY_GRACE`` later.
* A limit on connections: on a connection past the first ``max_connections`` open ones (by
  when they were accepted), a request is answered 503 with ``Retry-After`` (OpenAI's shape,
  which its clients retry), and past twice that many a connection is closed as soon as it is
  accepted, so that sockets cannot exhaust the process's files.
* The transport, handed to the app in the request's scope (``TRANSPORT``): what the kernel still
  holds of a response is read from its socket (``delivery.py``).
* Clients' faults are logged at debug level: uvicorn warns for every malformed request and every
  upgrade it cannot make, a log line per request that anyone can send.
"""

from __future__ import annotations

import itertools
import json
import logging
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: the scope key under which the app finds the connection's transport
TRANSPORT = "kokoro_tvm.transport"
#: seconds past ``read_timeout`` that a body nobody reads may take before the connection closes
BODY_GRACE = 1.0

log = logging.getLogger("kokoro_tvm.server")
_accepted = itertools.count()


def protocol(read_timeout: float, max_connections: int) -> type[H11Protocol]:
    """The connection class for ``uvicorn.Config(http=...)`` with these limits."""
    return type(
        "Connection",
        (Connection,),
        {"read_timeout": read_timeout, "max_connections": max_connections},
    )


class Connection(H11Protocol):
    read_timeout = 10.0
    max_connections = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _ClientFaults(self.logger)
        self._deadline: Any = None  # the read deadline's timer, while one runs
        self._reading: Any = None  # the state of the client's request it runs for
        self._order = next(_accepted)  # connections accepted before it come first
        self._app = self.app
        self.app = self._guarded

    # -- the read deadline ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > 2 * self.max_connections:
            log.debug("refused a connection: %d open", len(self.connections))
            transport.abort()
            return
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def _watch(self) -> None:
        """Run the deadline while a request is being read (restarted when its head is in, for
        its body), stop it once it has been."""
        state = self.conn.their_state
        if state not in (h11.IDLE, h11.SEND_BODY) or self.transport.is_closing():
            self._stop()
        elif self._deadline is None or state is not self._reading:
            self._stop()
            late = self.read_timeout + (BODY_GRACE if state is h11.SEND_BODY else 0.0)
            self._deadline, self._reading = self.loop.call_later(late, self._late), state

    def _stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and not self.conn.trailing_data[0]):
            # an idle connection, or a body its handler did not refuse in time: just close
            self.transport.close()
            return
        log.debug("closed a connection whose request head was late")
        self._reply(408, f"the request was not received within {self.read_timeout:g} s")
        self.transport.close()

    # -- the connection limit ------------------------------------------------------------------
    async def _guarded(self, scope, receive, send) -> None:
        # the connections accepted first are served: one accepted within the limit stays so,
        # however many arrive after it
        earlier = sum(1 for c in self.connections if getattr(c, "_order", 0) < self._order)
        if earlier >= self.max_connections:
            log.debug("503: %d connections open", len(self.connections))
            body = _error(
                "this server holds its limit of connections (--max-connections); retry shortly",
                "server_error",
                "too_many_connections",
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", b"1"),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[TRANSPORT] = self.transport
        await self._app(scope, receive, send)

    # -- replies written here, not by the app ------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse: an OpenAI error instead of uvicorn's plain text."""
        self._reply(400, "the request is not valid HTTP/1.1 (a malformed or too large head)")
        self.transport.close()

    def _reply(self, status: int, message: str) -> None:
        """An error written straight to the socket, before the connection closes (h11 sends no
        response to a request it has not read)."""
        if (
            self.cycle is not None
            and self.cycle.response_started
            and not (self.cycle.response_complete)
        ):
            return  # a response is under way: closing is all that is left
        body = _error(message, "invalid_request_error", None)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode("ascii") + body)


def _error(message: str, kind: str, code: str | None) -> bytes:
    doc = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return json.dumps(doc).encode()


class _ClientFaults(logging.LoggerAdapter):
    """uvicorn's log for a connection, with its warnings about what a client sent at debug."""

    FAULTS = ("Invalid HTTP request received.", "Unsupported upgrade request.", "No supported")

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if str(msg).startswith(self.FAULTS):
            self.debug(msg, *args, **kwargs)
        else:
            super().warning(msg, *args, **kwargs)

    @property
    def level(self) -> int:  # uvicorn reads it to decide whether to trace
        return self.logger.level

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return msg, kwargs
