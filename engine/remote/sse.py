"""Server-sent events: a streamed chat reply read event by event, within bounds.

Everything a server sends is untrusted, so every loop over it is bounded: one event (its
``data:`` lines together, or one line) at most ``MAX_EVENT`` bytes, a whole answer
``MAX_STREAM_BYTES`` bytes and ``MAX_EVENTS`` events; no event for the idle time is a
``TimeoutError``, and keep-alive comments (``: ping``) do not count as events, so they
cannot keep a dead reply open. The exchange's watchdog ends a read at the request's
deadline (client.py).
"""

from __future__ import annotations

import http.client
import time
from typing import Any

from .client import READ_SIZE, Exchange, TooMuch, loads
from .client import size as _size  # next_event has a local "size"

# Bytes of one server-sent event or line (a reply chunk is a few hundred bytes).
MAX_EVENT = 1 << 20
# Events in one answer (about one a token: a reply far longer than any model writes).
MAX_EVENTS = 2 << 20
# Bytes of one streamed answer, comments and reasoning text included.
MAX_STREAM_BYTES = 256 << 20


class EventStream:
    """Server-sent events from a response: each ``data:`` event parsed as JSON, within
    the bounds in the module doc. ``done`` is set by ``data: [DONE]``; llama-server's
    ``error: {...}`` lines come back as ``{"error": ...}``. ``comments``: keep-alive
    comments since the last event."""

    def __init__(self, resp: http.client.HTTPResponse, exchange: Exchange, idle: float) -> None:
        self.resp = resp
        self.exchange = exchange
        self.idle = idle
        self.done = False
        self.comments = 0
        self.events = 0
        self.received = 0  # bytes
        self._buf = bytearray()
        # Where the unread lines begin.
        self._pos = 0
        # No newline before this.
        self._scanned = 0
        self._eof = False
        self._last_event = time.monotonic()

    def _fill(self) -> None:
        """Read what the server sent next; no event for ``idle`` seconds raises TimeoutError
        (comments do not count); the watchdog ends a read at the deadline."""
        left = self._last_event + self.idle - time.monotonic()
        if left <= 0:
            raise TimeoutError("no event")
        if self.exchange.sock is not None:
            self.exchange.sock.settimeout(left)
        data = self.resp.read1(READ_SIZE)
        if not data:
            self._eof = True
            return
        self.received += len(data)
        if self.received > MAX_STREAM_BYTES:
            raise TooMuch(f"more than {_size(MAX_STREAM_BYTES)} in one answer")
        if self._pos:
            del self._buf[: self._pos]
            self._scanned -= self._pos
            self._pos = 0
        self._buf += data

    def _line(self) -> bytes | None:
        """The next line (without its newline), or None at the end of the stream."""
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = self._scanned = end + 1
                return line
            self._scanned = len(self._buf)
            if self._scanned - self._pos > MAX_EVENT:
                raise TooMuch(f"a line longer than {_size(MAX_EVENT)}")
            if self._eof:
                # The last line, without a newline.
                if self._pos < len(self._buf):
                    line = bytes(self._buf[self._pos :])
                    self._pos = self._scanned = len(self._buf)
                    return line
                return None
            self._fill()

    def _event(self, data: list[str]) -> dict[str, Any]:
        self.events += 1
        if self.events > MAX_EVENTS:
            raise TooMuch(f"more than {MAX_EVENTS:,} events in one answer")
        self.comments = 0
        self._last_event = time.monotonic()
        return parse_event(data)

    def next_event(self) -> dict[str, Any] | None:
        """The next event's JSON, or None at the end of the stream. Raises OSError /
        HTTPException when the connection fails, TimeoutError when the server goes
        quiet, ValueError on an unreadable or oversized event."""
        data: list[str] = []
        size = 0
        while not self.done:
            raw = self._line()
            if raw is None:
                return self._event(data) if data else None
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if not line:
                if data:
                    return self._event(data)
                continue
            if line.startswith(":"):
                # A comment (keep-alive ping): does not count as an event.
                self.comments += 1
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                if value.strip() == "[DONE]":
                    self.done = True
                    return None
                size += len(value) + 1
                if size > MAX_EVENT:
                    raise TooMuch(f"an event larger than {_size(MAX_EVENT)}")
                data.append(value)
            elif field == "error":
                # llama-server's non-standard error event.
                try:
                    body: Any = loads(value)
                except ValueError:
                    body = value
                self._last_event = time.monotonic()
                return {"error": body}
        return None


def parse_event(data: list[str]) -> dict[str, Any]:
    chunk = loads("\n".join(data))
    if not isinstance(chunk, dict):
        raise ValueError("an event that is not a JSON object")
    return chunk
