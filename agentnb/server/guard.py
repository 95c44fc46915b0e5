"""Bounds on what a client may send before the app sees a request: the request line, the
header section's size and its number of fields, and the time it takes to send them.

uvicorn's httptools protocol buffers a request's head without any bound (a 64 MiB header
is answered 200, and each growing piece of it is copied again, stalling the event loop for
seconds). ``GuardedHttpToolsProtocol`` counts the bytes of each head *before* the parser
sees them, so the cost of a hostile head is one scan of at most ``MAX_HEAD`` bytes:

- a request line longer than ``MAX_REQUEST_LINE`` is answered ``414``;
- a head longer than ``MAX_HEAD`` bytes, or with more than ``MAX_HEADERS`` fields, ``431``;
- a head still incomplete ``HEAD_TIMEOUT`` seconds after its first byte, ``408``.

Each answer is an RFC 9457 problem with ``Connection: close``; the server then stops
reading (the client's sending stalls) and closes the connection ``LINGER`` seconds after,
so the client reads the answer before the connection goes. ``protocol()`` picks this class, or, when
httptools is missing, h11 with its own bound on an incomplete head (``h11_options``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = [
    "HEAD_TIMEOUT",
    "MAX_HEAD",
    "MAX_HEADERS",
    "MAX_REQUEST_LINE",
    "protocol",
]

MAX_REQUEST_LINE = 16 * 1024
"""Bytes of the request line (method, target, version): a longer one is a ``414``."""
MAX_HEAD = 64 * 1024
"""Bytes of a request's head (request line and every header field): more is a ``431``."""
MAX_HEADERS = 128
"""Header fields of one request: more is a ``431``."""
HEAD_TIMEOUT = 30.0
"""Seconds a client has to send a whole head once it began: a slower one gets ``408``."""
LINGER = 2.0
"""Seconds a refused connection stays open (its input dropped) so the answer is read."""

_REFUSALS = {
    408: (
        "RequestTimeout",
        "Request timeout",
        f"the request's head took longer than {HEAD_TIMEOUT:g}s to arrive; send it at once",
    ),
    414: (
        "URITooLong",
        "URI too long",
        (
            f"the request line is longer than {MAX_REQUEST_LINE} bytes; send long input in "
            "the body (POST) instead of the URL"
        ),
    ),
    431: (
        "RequestHeaderFieldsTooLarge",
        "Request header fields too large",
        (
            f"the request's header fields are larger than this service accepts ({MAX_HEAD} "
            f"bytes, {MAX_HEADERS} fields); send fewer or smaller headers"
        ),
    ),
}
_REASONS = {408: b"Request Timeout", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


def _refusal(status: int) -> bytes:
    type_, title, detail = _REFUSALS[status]
    body = json.dumps({"type": type_, "title": title, "status": status, "detail": detail})
    return (
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        + b"content-type: application/problem+json\r\n"
        + b"content-length: %d\r\n" % len(body)
        + b"connection: close\r\n\r\n"
        + body.encode()
    )


class HeadMeter:
    """Counts one connection's head bytes as they arrive (no I/O: the protocol asks it).

    ``feed(data)`` returns the status to refuse the request with, or None; once the head's
    end (an empty line) is seen it counts nothing until ``reset()`` (the message ended).
    """

    __slots__ = ("done", "line_bytes", "lines", "seen", "tail")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.done = False
        self.seen = 0
        self.lines = 0
        self.line_bytes: int | None = 0
        """Bytes of the request line so far; None once it ended."""
        self.tail = b""

    def feed(self, data: bytes) -> int | None:
        if self.done:
            return None
        buf = self.tail + data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            end = buf.find(b"\n\n")  # bare newlines, which the parser refuses on its own
            used = len(data) if end < 0 else end + 2 - len(self.tail)
        else:
            used = end + 4 - len(self.tail)
        used = max(0, min(used, len(data)))
        if self.line_bytes is not None:
            newline = data.find(b"\n", 0, used)
            if newline < 0:
                self.line_bytes += used
            else:
                self.line_bytes += newline
                if self.line_bytes <= MAX_REQUEST_LINE:
                    self.line_bytes = None
            if self.line_bytes is not None and self.line_bytes > MAX_REQUEST_LINE:
                return 414
        self.seen += used
        self.lines += data.count(b"\n", 0, used)
        if self.seen > MAX_HEAD or self.lines > MAX_HEADERS + 2:
            return 431
        self.tail = buf[-3:]
        if end >= 0:
            self.done = True
        return None


def protocol() -> tuple[Any, dict[str, Any]]:
    """uvicorn's ``http`` option and the options that go with it (see the module)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: h11 bounds an incomplete head itself (a 400)
        return "h11", {"h11_max_incomplete_event_size": MAX_HEAD}

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with ``HeadMeter``'s bounds (see the module)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._meter = HeadMeter()
            self._refused = False
            self._head_timer: asyncio.TimerHandle | None = None

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # answered already: what the client sends on is dropped
            meter = self._meter
            if not meter.done:
                if self._head_timer is None and data:
                    self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._refuse, 408)
                status = meter.feed(data)
                if status is not None:
                    self._refuse(status)
                    return
                if meter.done:
                    self._cancel_head_timer()
            super().data_received(data)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._meter.reset()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _refuse(self, status: int) -> None:
            self._cancel_head_timer()
            if self._refused or self.transport.is_closing():
                return
            self._refused = True
            self.logger.warning("refused a request's head: %d", status)
            self.transport.write(_refusal(status))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            # Read no more: the client's sending stalls instead of costing this loop.
            self.transport.pause_reading()
            self.loop.call_later(LINGER, self.transport.close)

    return GuardedHttpToolsProtocol, {}
