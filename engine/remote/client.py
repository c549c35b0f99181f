"""The HTTP client a remote backend talks through: one request at a time per call, each
bounded in time and size, its failures one line each.

The standard library's ``http.client``: no new dependency, and direct access to the
socket, which is what a prompt cancel needs: ``cancel()`` from another thread shuts the
socket down, the blocked read returns at once, and the server sees the client go and
stops generating. Each request is an ``Exchange``: its connection, the socket, and a
watchdog that shuts the socket down when the request's deadline passes, whatever the
server trickles meanwhile (headers, a line, keep-alive comments).

Errors are ``RemoteServerError``s naming the server and the fix; a server's own message is
cleaned (``clean``: control characters, length, the API key itself) before it is shown.
A JSON answer is read up to ``MAX_JSON_BODY`` bytes, an error body up to ``MAX_ERROR_BODY``.
Numbers a server sends are used only when they are sane (``count``, ``number``).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from ..errors import RemoteServerError
from ..json_bounds import MAX_JSON_DEPTH, bounded_loads
from ..sanitize import replace_surrogates, sanitize
from .options import OpenAIOptions, display_url

log = logging.getLogger("vibechat.openai")

MAX_ERROR_BODY = 65536
MAX_JSON_BODY = 16 << 20
# A token count or context size above this is no real number.
MAX_COUNT = 1 << 40
READ_SIZE = 65536


class Cancelled(Exception):
    """The user cancelled while a request was on its way (internal to the remote room)."""


class Expired(Exception):
    """The request's deadline passed (internal to the remote room)."""


class TooMuch(ValueError):
    """The server sent more than a bound allows (internal): an event, a line, an answer."""


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            # A read blocked on it returns at once.
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Exchange:
    """One request: its connection, the connection's socket, and a watchdog that shuts the
    socket down when the deadline passes, so no read outlives it, whatever the server
    trickles (headers, a line, keep-alive comments)."""

    def __init__(self, conn: http.client.HTTPConnection, deadline: float) -> None:
        self.conn = conn
        self.sock: socket.socket | None = None
        self.deadline = deadline
        self.expired = threading.Event()
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def connected(self) -> None:
        """Keep the socket (``conn.sock`` is dropped when a response takes the connection
        over) and start the watchdog."""
        self.sock = self.conn.sock
        self._timer = threading.Timer(max(0.0, self.remaining()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        self.expired.set()
        _shutdown(self.sock)

    def shutdown(self) -> None:
        _shutdown(self.sock)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        try:
            self.conn.close()
        except OSError:
            pass


class ServerClient:
    """Requests to one server's API root. ``cancel()`` is thread-safe: it shuts down the
    tracked exchange (a streamed reply's); other requests (a model listing beside a reply)
    have their own connections."""

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        parts = urlsplit(options.base_url)
        self._https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._query = parts.query
        self.server = display_url(options.base_url)
        # The API root, shown in messages.
        self.root = display_url(options.base_url, keep_v1=True)
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._active: Exchange | None = None

    def clean(self, text: str, limit: int = 300) -> str:
        """A server's text made safe to show: one line, no control characters, bounded,
        and never the API key (some servers echo part of it)."""
        return clean(text, self.options.api_key, limit)

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            exchange = self._active
        if exchange is not None:
            # The reading thread's recv returns at once.
            exchange.shutdown()

    def open(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        track: bool = False,
        deadline: float | None = None,
    ) -> tuple[Exchange, http.client.HTTPResponse]:
        """Send a request; the exchange and the response (headers read). ``track``: the
        exchange ``cancel()`` shuts down. ``deadline`` (``time.monotonic()``; default: the
        options' ``deadline`` from now) bounds everything, reading the answer included.
        Connection problems raise ``RemoteServerError`` (or ``Cancelled`` when the user
        cancelled meanwhile, ``Expired`` when the deadline passed)."""
        opts = self.options
        if deadline is None:
            deadline = time.monotonic() + opts.deadline
        connect = max(0.001, min(opts.connect_timeout, deadline - time.monotonic()))
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self._port, timeout=connect, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(self.host, self._port, timeout=connect)
        exchange = Exchange(conn, deadline)
        headers = {
            "Accept": "text/event-stream" if track else "application/json",
            "User-Agent": "vibechat",
        }
        data = None
        if body is not None:
            data = replace_surrogates(json.dumps(body, ensure_ascii=False)).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if opts.api_key:
            headers["Authorization"] = f"Bearer {opts.api_key}"
        target = self._prefix + path + (f"?{self._query}" if self._query else "")
        if track:
            with self._lock:
                self._active = exchange
        log.debug("%s %s%s", method, self.root, path)
        try:
            if track and self.cancelled.is_set():
                raise Cancelled()
            if exchange.remaining() <= 0:
                raise Expired()
            conn.connect()
            exchange.connected()
            # Cancelled while connecting.
            if track and self.cancelled.is_set():
                raise Cancelled()
            assert exchange.sock is not None
            exchange.sock.settimeout(max(0.001, min(opts.timeout, exchange.remaining())))
            conn.request(method, target, body=data, headers=headers)
            return exchange, conn.getresponse()
        except (Cancelled, Expired):
            self.release(exchange)
            raise
        except (OSError, http.client.HTTPException) as exc:
            self.release(exchange)
            # The socket's timeout may be the time left to the deadline: then it fires when the
            # watchdog does, and either may come first. Past the deadline, it is the deadline.
            if exchange.expired.is_set() or exchange.remaining() <= 0:
                raise Expired() from None
            if track and self.cancelled.is_set():
                raise Cancelled() from None
            raise self.connection_error(exc, path) from None

    def release(self, exchange: Exchange) -> None:
        with self._lock:
            if self._active is exchange:
                self._active = None
        exchange.close()

    def expired(self, what: str) -> RemoteServerError:
        return RemoteServerError(
            f"{self.server} did not finish {what} within {self.options.deadline:g} s "
            "(the deadline for one request); check that the server is up and not "
            "overloaded."
        )

    def connection_error(self, exc: BaseException, path: str) -> RemoteServerError:
        where = self.server
        if isinstance(exc, ConnectionRefusedError):
            return RemoteServerError(
                f"could not connect to {where}: connection refused; start the server, "
                "or check --base-url (base_url in the config file)."
            )
        if isinstance(exc, socket.gaierror):
            return RemoteServerError(
                f"could not find the host {self.host!r} of {where} "
                f"({self.clean(exc.strerror or str(exc))}); check --base-url."
            )
        if isinstance(exc, TimeoutError):
            return RemoteServerError(
                f"{where} did not answer within {self.options.timeout:g} s; check that the server "
                "is up and not overloaded, or raise timeout (VIBECHAT_TIMEOUT) for a slow one."
            )
        if isinstance(exc, ssl.SSLError):
            return RemoteServerError(
                f"TLS error with {where} ({self.clean(exc.reason or str(exc))}); "
                "check the URL's scheme (http or https) and the server's certificate."
            )
        if isinstance(
            exc, (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)
        ):
            return RemoteServerError(
                f"{where} closed the connection without answering {path}; is it an "
                "OpenAI-compatible server, and is the scheme (http/https) right?"
            )
        reason = (
            exc.strerror
            if isinstance(exc, OSError) and exc.strerror
            else str(exc) or type(exc).__name__
        )
        return RemoteServerError(
            f"could not reach {where} ({self.clean(reason)}); check --base-url "
            "and that the server is running."
        )

    def error_message(self, resp: http.client.HTTPResponse) -> str:
        """The server's own explanation from an error response, cleaned ('' if none)."""
        try:
            raw = resp.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            return ""
        text = raw.decode("utf-8", errors="replace")
        try:
            data = loads(text)
        except ValueError:
            return self.clean(text) if "<html" not in text.lower() else ""
        return self.clean(message_of(data))

    def http_error(self, resp: http.client.HTTPResponse, path: str) -> RemoteServerError:
        status = resp.status
        detail = self.error_message(resp)
        said = f"HTTP {status}" + (f": {detail}" if detail else "")
        where = self.server
        if status in (401, 403):
            variable = self.options.api_key_variable
            if self.options.api_key:
                return RemoteServerError(
                    f"{where} refused the API key ({said}); check the key in {variable}."
                )
            withheld = self.options.withheld_key_variable
            if withheld:
                return RemoteServerError(
                    f"{where} needs an API key ({said}); {withheld} is set but not sent to a "
                    f"plain-http server unless named: --api-key-env {withheld}, or put the "
                    f"server's key in {variable}."
                )
            return RemoteServerError(
                f"{where} needs an API key ({said}); put it in {variable} "
                "(or name your variable with --api-key-env)."
            )
        if status == 404:
            return RemoteServerError(
                f"{self.root}{path} was not found ({said}); is --base-url the "
                "server's OpenAI API root, such as http://127.0.0.1:8080/v1?"
            )
        if status == 429:
            return RemoteServerError(
                f"{where} is rate-limiting requests ({said}); wait and try again."
            )
        if status >= 500:
            return RemoteServerError(
                f"{where} failed ({said}); see the server's log, or try again."
            )
        return RemoteServerError(f"{where} rejected the request ({said}).")

    def get_json(self, path: str) -> Any:
        try:
            exchange, resp = self.open("GET", path)
        except Expired:
            raise self.expired(f"answering {path}") from None
        try:
            if resp.status != 200:
                raise self.http_error(resp, path)
            try:
                raw = read_body(resp, MAX_JSON_BODY + 1)
            except (OSError, http.client.HTTPException):
                if exchange.expired.is_set():
                    raise self.expired(f"answering {path}") from None
                raw = b""
            if len(raw) > MAX_JSON_BODY:
                raise RemoteServerError(
                    f"{self.server} answered {path} with more than {size(MAX_JSON_BODY)}; "
                    "is --base-url an OpenAI-compatible API?"
                )
            try:
                return loads(raw.decode("utf-8", errors="replace"))
            except ValueError:
                raise RemoteServerError(
                    f"{self.server} answered {path} with something other than JSON; "
                    "is --base-url an OpenAI-compatible API?"
                ) from None
        finally:
            exchange.close()


def clean(text: str, key: str | None, limit: int = 300) -> str:
    """A server's text made safe to show: one line, no control characters, bounded, and
    never the API ``key`` (some servers echo part of it)."""
    if key:
        text = text.replace(key, "***")
    text = " ".join(sanitize(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A server's event or reply, at most this deep: a tool call's arguments sent as an object sit a
# few levels down (choices/delta/tool_calls/function), and are then bounded as arguments.
MAX_REPLY_DEPTH = MAX_JSON_DEPTH + 16


def loads(text: str) -> Any:
    """``json.loads`` of a server's text, its depth bounded first (engine/json_bounds.py): text
    nested too deeply is a ValueError (``JsonTooDeep``) like text that is not JSON."""
    return bounded_loads(text, MAX_REPLY_DEPTH)


def read_body(resp: http.client.HTTPResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of a response body, read in pieces (the exchange's watchdog
    ends a read that outlives the deadline)."""
    out = bytearray()
    while len(out) < limit:
        data = resp.read1(min(READ_SIZE, limit - len(out)))
        if not data:
            break
        out += data
    return bytes(out)


def size(n: int) -> str:
    return f"{n / (1 << 20):g} MB" if n >= 1 << 20 else f"{n:,} bytes"


def message_of(data: Any) -> str:
    """The human message in the error shapes servers use: OpenAI's and llama-server's
    ``{"error": {"message"}}``, Ollama's and others' ``{"error": "..."}``, vLLM's
    ``{"message"}``, FastAPI's ``{"detail"}``."""
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    if isinstance(data.get("message"), str):
        return data["message"]
    detail = data.get("detail")
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return "; ".join(
            str(d.get("msg", ""))[:MAX_ERROR_BODY]
            + (f" ({'.'.join(map(str, d['loc'][:8]))})" if isinstance(d.get("loc"), list) else "")
            for d in detail[:3]
            if isinstance(d, dict)
        )
    return ""


def count(value: Any) -> int | None:
    """A token count or size from the server: a whole number from 0 to ``MAX_COUNT``, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def number(value: Any) -> float | None:
    """A time or rate from the server: a finite number from 0 on, else None."""
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value < float(MAX_COUNT)
    ):
        return float(value)
    return None
