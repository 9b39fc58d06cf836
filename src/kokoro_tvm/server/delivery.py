"""What a response's client has received, in seconds of its audio: what its stream may run
ahead of (``SchedulerConfig.ahead_seconds``).

A chunk handed to the server is not yet the client's: uvicorn buffers it, then the kernel keeps
it in the socket's send queue until the client's TCP acknowledges it, and the kernel grows that
queue to megabytes for a client that reads slowly: minutes of mp3. So a chunk counts as
received only once its bytes have left both: the bytes handed on, less what uvicorn still holds
(``get_write_buffer_size``), less what the kernel has not had acknowledged (``SIOCOUTQ``, Linux;
elsewhere that share is unknown and counts as received). What the client's own kernel has
acknowledged but its program has not read yet counts as received: no server can see it, and a
client gets no more made for it than it accepted, as one that reads everything and discards it.
"""

from __future__ import annotations

import fcntl
import struct
import sys
from collections import deque
from typing import Any

#: bytes in a TCP socket's send queue not yet acknowledged by the peer (Linux)
SIOCOUTQ = 0x5411 if sys.platform.startswith("linux") else None


class Delivery:
    """One response's bytes against its audio: ``sent`` marks where each chunk's bytes end,
    ``received`` says how much of the audio the client has."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.sock: Any = None
        self.bytes_sent = 0
        self.audio_sent = 0.0  # seconds of audio whose bytes were handed on so far
        self.audio = 0.0  # seconds of audio made for the response (its chunks, in order)
        self.marks: deque[tuple[int, float]] = deque()  # (bytes sent up to here, audio by then)
        self.audio_received = 0.0

    def attach(self, transport: Any) -> None:
        """The connection's transport (None when the server gives none: then only what the
        server itself holds counts)."""
        self.transport = transport
        self.sock = transport.get_extra_info("socket") if transport is not None else None

    def made(self, seconds: float) -> None:
        """The response's next bytes carry audio up to ``seconds`` into the stream."""
        self.audio = seconds

    def sent(self, nbytes: int) -> None:
        """``nbytes`` of the response were handed to the server."""
        self.bytes_sent += nbytes
        if self.audio > self.audio_sent:
            self.audio_sent = self.audio
            self.marks.append((self.bytes_sent, self.audio))

    def received(self) -> float:
        """Seconds of the audio whose bytes the client has acknowledged, by whole chunks."""
        have = self.bytes_sent - self._unacknowledged()
        while self.marks and self.marks[0][0] <= have:
            self.audio_received = self.marks.popleft()[1]
        return self.audio_received

    def _unacknowledged(self) -> int:
        if self.transport is None:
            return 0
        if self.transport.is_closing():  # nothing more will arrive
            return self.bytes_sent
        held = self.transport.get_write_buffer_size()
        if self.sock is not None and SIOCOUTQ is not None:
            try:
                queued = fcntl.ioctl(self.sock.fileno(), SIOCOUTQ, b"\0\0\0\0")
            except OSError:
                return self.bytes_sent
            held += struct.unpack("i", queued)[0]
        return held
