"""``OpenAICompatibleBackend``: replies from a server that speaks OpenAI's chat API.

llama.cpp's ``llama-server``, vLLM, Ollama, LM Studio and llama-cpp-python's
server all answer ``GET /v1/models`` and ``POST /v1/chat/completions`` with
``stream: true`` (server-sent events). This backend talks to them over HTTP with
the standard library's ``http.client``: no new dependency (the ``httpx`` name
is not installed here, huggingface-hub brings ``httpx2``, which needs Python
3.11), and direct access to the socket, which is what a prompt cancel needs:
``cancel()`` from another thread shuts the socket down, the blocked read returns
at once, and the server sees the client go and stops generating.

Sampling: ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop`` are
standard fields; ``top_k``, ``min_p`` and ``repeat_penalty`` are the extra fields
llama.cpp-family servers accept (and ``repetition_penalty``, vLLM's name). A
server that rejects them (HTTP 400 naming one) gets the request again without
them, and this backend remembers not to send them. Stop strings are also applied
here, so they hold on servers that ignore them. "auto" (``max_tokens`` and
``repeat_penalty`` None: engine/settings/params.py) sends nothing: the server's own default
(which knows the model); ``max_tokens`` 0 (no limit) sends nothing either.

Stats come from the server when it sends them (``usage`` with
``stream_options.include_usage``, llama-server's ``timings``) and are measured
here otherwise: time to first token and tokens/s from the streamed deltas, one
delta counted as one token; without ``usage`` the prompt's tokens are an
estimate (``count_tokens``: about four characters a token).

Thinking: a reasoning model's ``delta.reasoning_content`` (llama-server's default
reasoning format, vLLM, the DeepSeek API; ``delta.reasoning`` on OpenRouter and newer
vLLM) comes as ``ThinkingDelta``s, and so does an inline ``<think>…</think>`` block at the
start of ``content`` (engine/turns/thinking.py); stop strings apply to the answer only, and
``max_tokens`` and the size bounds count thinking pieces like answer pieces.

Errors are one line each (``RemoteServerError``), naming the server and the
fix; an API key is never put in a message or a log line, and a server's message
is cleaned (control characters, length, the key itself) before it is shown. A
stream cut mid-reply raises ``StreamInterrupted`` carrying the text received.

Everything a server sends is untrusted, and every loop over it is bounded:

* time: ``timeout`` seconds without an event (keep-alive comments do not count, so
  ``: ping`` lines cannot keep a dead reply open), and ``deadline`` seconds for a whole
  request (connect, headers, the reply), which nothing the server sends extends: a
  watchdog shuts the socket down when it passes;
* size: one event (its ``data:`` lines together, or one line) at most ``MAX_EVENT``
  bytes, a whole answer ``MAX_STREAM_BYTES`` bytes and ``MAX_EVENTS`` events, the
  reply's text ``MAX_REPLY_CHARS`` characters (more ends the reply as ``length``,
  keeping the text), a JSON answer ``MAX_JSON_BODY`` bytes, an error body
  ``MAX_ERROR_BODY``;
* ``max_tokens`` holds on the client too: after that many content pieces (one piece is
  at least one token on the servers we know) the next piece is not shown and the
  connection is closed (``length``), as is a piece that the server's own running
  ``usage`` counts past the limit; the server's own finish after exactly that many
  pieces is still read (a few events at most);
* text: lone surrogates (a JSON ``\\ud800`` escape) become U+FFFD in the reply; model ids
  that are not printable, one-line and short are left out of the model list; numbers
  (context sizes, token counts, timings) are used only when they are sane.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    FinishReason,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    TextDelta,
    ThinkingDelta,
)
from ..errors import GenerationError, InvalidParameterError, RemoteServerError, StreamInterrupted, VibechatError
from ..settings.params import SamplingParams
from ..settings.server_url import normalize_base_url
from ..settings.think_switch import remote_kwargs
from ..sanitize import REPLACEMENT, replace_surrogates, sanitize
from ..turns.thinking import ThinkingSplitter
from ..turns.stops import StopMatcher

log = logging.getLogger("vibechat.openai")

BACKEND_NAME = "openai"
DEFAULT_TIMEOUT = 300.0  # seconds without an event from the server (comments do not count) before giving up
DEFAULT_DEADLINE = 3600.0  # seconds for a whole request, the reply included, whatever arrives meanwhile
CONNECT_TIMEOUT = 10.0
KEY_VARIABLES = ("VIBECHAT_API_KEY", "OPENAI_API_KEY")  # looked up in this order
IMPLICIT_ONLY_OVER_HTTPS = "OPENAI_API_KEY"  # unnamed, it goes only to https servers
EXTRA_FIELDS = ("top_k", "min_p", "repeat_penalty", "repetition_penalty")
OPTIONAL_FIELDS = (*EXTRA_FIELDS, "stream_options")  # what a strict server may refuse
CHARS_PER_TOKEN = 4  # the estimate count_tokens uses (English text, common tokenizers)
MAX_ERROR_BODY = 65536
MAX_EVENT = 1 << 20  # bytes of one server-sent event or line (a reply chunk is a few hundred bytes)
MAX_EVENTS = 2 << 20  # events in one answer (about one a token: a reply far longer than any model writes)
MAX_STREAM_BYTES = 256 << 20  # bytes of one streamed answer, comments and reasoning text included
MAX_REPLY_CHARS = 2 << 20  # characters of reply text (~500k tokens); more ends the reply as 'length'
AFTER_LIMIT_EVENTS = 8  # events read after max_tokens pieces, for the server's finish and usage
MAX_JSON_BODY = 16 << 20
MAX_MODEL_ID = 256  # characters of a model id the server lists (longer ones are left out)
MAX_MODELS = 10_000  # model ids kept from one listing
MAX_COUNT = 1 << 40  # a token count or context size above this is no real number
READ_SIZE = 65536



def model_url(root: str, model: str) -> str:
    """A server's model as ``ModelInfo.path`` names it: its URL under the API root."""
    return f"{root}/models/{quote(model, safe='/:@')}"


def api_root(info: ModelInfo) -> str | None:
    """The API root (``http://127.0.0.1:8080/v1``) of a server's ``ModelInfo``, whose ``path``
    is the model's URL under it (``model_url``); None for a local model."""
    suffix = model_url("", info.name)
    if not info.server or not info.path.endswith(suffix):
        return None
    return info.path[:-len(suffix)]


def display_url(base_url: str, keep_v1: bool = False) -> str:
    """The server as shown to the user: no credentials, no query, no ``/v1`` (unless
    ``keep_v1``: the API root)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    path = parts.path.rstrip("/")
    if path.endswith("/v1") and not keep_v1:
        path = path[:-3]
    return f"{parts.scheme}://{host}{port}{path}"


def resolve_api_key(variable: str | None, environ: Mapping[str, str] | None = None,
                    base_url: str | None = None) -> tuple[str | None, str]:
    """The API key and the variable it came from: ``variable`` when named (it must be
    set), else VIBECHAT_API_KEY, else OPENAI_API_KEY -- but that last one, a key most
    users keep for OpenAI itself, only for an https ``base_url``: it is not sent in
    clear text to a plain-http server unless named. (None, the variable to suggest)
    when there is none."""
    environ = os.environ if environ is None else environ
    if variable:
        value = environ.get(variable, "").strip()
        if not value:
            raise InvalidParameterError(
                f"the API key variable {variable} (api_key_env / --api-key-env) is not set: "
                f"export {variable}=..., or name another variable.")
        return value, variable
    for name in KEY_VARIABLES:
        value = environ.get(name, "").strip()
        if value and name == IMPLICIT_ONLY_OVER_HTTPS and not _is_https(base_url):
            log.info("%s is set but not sent to a plain-http server; --api-key-env %s sends it", name, name)
            continue
        if value:
            return value, name
    return None, KEY_VARIABLES[0]


def _is_https(base_url: str | None) -> bool:
    return base_url is None or urlsplit(base_url.strip()).scheme.lower() == "https"


@dataclass
class OpenAIOptions:
    """Where the server is and which of its models to use."""

    base_url: str
    model: str | None = None  # None: the server's only model
    api_key: str | None = None  # never shown, never logged
    api_key_variable: str = KEY_VARIABLES[0]  # where the key comes from, for messages
    withheld_key_variable: str | None = None  # set, but not sent to this plain-http server
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE  # seconds for a whole request, the streamed reply included

    def __post_init__(self) -> None:
        self.base_url = normalize_base_url(self.base_url)

    def __repr__(self) -> str:  # keeps the key out of tracebacks and debug output
        return (f"OpenAIOptions(base_url={display_url(self.base_url)!r}, model={self.model!r}, "
                f"api_key={'<set>' if self.api_key else None}, timeout={self.timeout}, "
                f"deadline={self.deadline})")


class _Cancelled(Exception):
    """The user cancelled while a request was on its way (internal)."""


class _Expired(Exception):
    """The request's deadline passed (internal)."""


class _TooMuch(ValueError):
    """The server sent more than a bound allows (internal): an event, a line, an answer."""


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # a read blocked on it returns at once
        except OSError:
            pass


class _Exchange:
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


class OpenAICompatibleBackend:
    """One model on an OpenAI-compatible server. One thread drives it; ``cancel()`` is
    thread-safe, and ``list_models()`` may run beside a reply (its own connection)."""

    name = BACKEND_NAME

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        parts = urlsplit(options.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._query = parts.query
        self.server = display_url(options.base_url)
        self._root = display_url(options.base_url, keep_v1=True)  # the API root, shown in messages
        self._info: ModelInfo | None = None
        self._models: dict[str, dict[str, Any]] = {}
        self._send_optional = True  # False once the server refused the extra fields
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._active: _Exchange | None = None

    # ----------------------------------------------------------------- HTTP
    def _clean(self, text: str, limit: int = 300) -> str:
        """A server's text made safe to show: one line, no control characters, bounded,
        and never the API key (some servers echo part of it)."""
        key = self.options.api_key
        if key:
            text = text.replace(key, "***")
        text = " ".join(sanitize(text).split())
        return text if len(text) <= limit else text[:limit - 1] + "…"

    def _open(self, method: str, path: str, body: dict[str, Any] | None = None, *,
              track: bool = False, deadline: float | None = None) -> tuple[_Exchange, http.client.HTTPResponse]:
        """Send a request; the exchange and the response (headers read). ``track``: the
        exchange ``cancel()`` shuts down. ``deadline`` (``time.monotonic()``; default: the
        options' ``deadline`` from now) bounds everything, reading the answer included.
        Connection problems raise ``RemoteServerError`` (or ``_Cancelled`` when the user
        cancelled meanwhile, ``_Expired`` when the deadline passed)."""
        opts = self.options
        if deadline is None:
            deadline = time.monotonic() + opts.deadline
        connect = max(0.001, min(opts.connect_timeout, deadline - time.monotonic()))
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=connect, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=connect)
        exchange = _Exchange(conn, deadline)
        headers = {"Accept": "text/event-stream" if track else "application/json", "User-Agent": "vibechat"}
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
        log.debug("%s %s%s", method, self._root, path)
        try:
            if track and self._cancel.is_set():
                raise _Cancelled()
            if exchange.remaining() <= 0:
                raise _Expired()
            conn.connect()
            exchange.connected()
            if track and self._cancel.is_set():  # cancelled while connecting
                raise _Cancelled()
            assert exchange.sock is not None
            exchange.sock.settimeout(max(0.001, min(opts.timeout, exchange.remaining())))
            conn.request(method, target, body=data, headers=headers)
            return exchange, conn.getresponse()
        except (_Cancelled, _Expired):
            self._release(exchange)
            raise
        except (OSError, http.client.HTTPException) as exc:
            self._release(exchange)
            # The socket's timeout may be the time left to the deadline: then it fires when the
            # watchdog does, and either may come first. Past the deadline, it is the deadline.
            if exchange.expired.is_set() or exchange.remaining() <= 0:
                raise _Expired() from None
            if track and self._cancel.is_set():
                raise _Cancelled() from None
            raise self._connection_error(exc, path) from None

    def _release(self, exchange: _Exchange) -> None:
        with self._lock:
            if self._active is exchange:
                self._active = None
        exchange.close()

    def _expired(self, what: str) -> RemoteServerError:
        return RemoteServerError(f"{self.server} did not finish {what} within {self.options.deadline:g} s "
                                 "(the deadline for one request); check that the server is up and not "
                                 "overloaded.")

    def _connection_error(self, exc: BaseException, path: str) -> RemoteServerError:
        where = self.server
        if isinstance(exc, ConnectionRefusedError):
            return RemoteServerError(f"could not connect to {where}: connection refused; start the server, "
                                     "or check --base-url (base_url in the config file).")
        if isinstance(exc, socket.gaierror):
            return RemoteServerError(f"could not find the host {self._host!r} of {where} "
                                     f"({self._clean(exc.strerror or str(exc))}); check --base-url.")
        if isinstance(exc, TimeoutError):
            return RemoteServerError(
                f"{where} did not answer within {self.options.timeout:g} s; check that the server is up "
                "and not overloaded, or raise timeout (VIBECHAT_TIMEOUT) for a slow one.")
        if isinstance(exc, ssl.SSLError):
            return RemoteServerError(f"TLS error with {where} ({self._clean(exc.reason or str(exc))}); "
                                     "check the URL's scheme (http or https) and the server's certificate.")
        if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
            return RemoteServerError(f"{where} closed the connection without answering {path}; is it an "
                                     "OpenAI-compatible server, and is the scheme (http/https) right?")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return RemoteServerError(f"could not reach {where} ({self._clean(reason)}); check --base-url "
                                 "and that the server is running.")

    def _error_message(self, resp: http.client.HTTPResponse) -> str:
        """The server's own explanation from an error response, cleaned ('' if none)."""
        try:
            raw = resp.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            return ""
        text = raw.decode("utf-8", errors="replace")
        try:
            data = _loads(text)
        except ValueError:
            return self._clean(text) if "<html" not in text.lower() else ""
        return self._clean(_message_of(data))

    def _http_error(self, resp: http.client.HTTPResponse, path: str) -> RemoteServerError:
        status = resp.status
        detail = self._error_message(resp)
        said = f"HTTP {status}" + (f": {detail}" if detail else "")
        where = self.server
        if status in (401, 403):
            variable = self.options.api_key_variable
            if self.options.api_key:
                return RemoteServerError(f"{where} refused the API key ({said}); check the key in {variable}.")
            withheld = self.options.withheld_key_variable
            if withheld:
                return RemoteServerError(
                    f"{where} needs an API key ({said}); {withheld} is set but not sent to a plain-http "
                    f"server unless named: --api-key-env {withheld}, or put the server's key in {variable}.")
            return RemoteServerError(f"{where} needs an API key ({said}); put it in {variable} "
                                     "(or name your variable with --api-key-env).")
        if status == 404:
            return RemoteServerError(f"{self._root}{path} was not found ({said}); is --base-url the "
                                     "server's OpenAI API root, such as http://127.0.0.1:8080/v1?")
        if status == 429:
            return RemoteServerError(f"{where} is rate-limiting requests ({said}); wait and try again.")
        if status >= 500:
            return RemoteServerError(f"{where} failed ({said}); see the server's log, or try again.")
        return RemoteServerError(f"{where} rejected the request ({said}).")

    def _get_json(self, path: str) -> Any:
        try:
            exchange, resp = self._open("GET", path)
        except _Expired:
            raise self._expired(f"answering {path}") from None
        try:
            if resp.status != 200:
                raise self._http_error(resp, path)
            try:
                raw = _read_body(resp, MAX_JSON_BODY + 1)
            except (OSError, http.client.HTTPException):
                if exchange.expired.is_set():
                    raise self._expired(f"answering {path}") from None
                raw = b""
            if len(raw) > MAX_JSON_BODY:
                raise RemoteServerError(f"{self.server} answered {path} with more than {_size(MAX_JSON_BODY)}; "
                                        "is --base-url an OpenAI-compatible API?")
            try:
                return _loads(raw.decode("utf-8", errors="replace"))
            except ValueError:
                raise RemoteServerError(f"{self.server} answered {path} with something other than JSON; "
                                        "is --base-url an OpenAI-compatible API?") from None
        finally:
            exchange.close()

    # ---------------------------------------------------------------- models
    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /v1/models``), in its order."""
        data = self._get_json("/models")
        entries = data.get("data") if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise RemoteServerError(f"{self.server}/models did not list models; is --base-url an "
                                    "OpenAI-compatible API?")
        models: dict[str, dict[str, Any]] = {}
        unusable = 0
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            model_id = entry.get("id")
            if not _usable_id(model_id):
                unusable += 1
                continue
            assert isinstance(model_id, str)
            if len(models) < MAX_MODELS:
                models[model_id] = entry
        if unusable:
            log.info("%s lists %d model ids that are not printable one-line text of at most %d characters; "
                     "left out", self.server, unusable, MAX_MODEL_ID)
        if len(entries) > MAX_MODELS:
            log.info("%s lists %d models; kept the first %d", self.server, len(entries), MAX_MODELS)
        self._models = models
        return list(models)

    def _pick(self, wanted: str | None, ids: list[str]) -> str:
        if wanted is None:
            if len(ids) == 1:
                return ids[0]
            if not ids:
                raise RemoteServerError(f"{self.server} lists no models; load one on the server first.")
            raise RemoteServerError(f"{self.server} offers several models: choose one with --model "
                                    f"({_listing(ids, self._clean)}).")
        if wanted in ids:
            return wanted
        if f"{wanted}:latest" in ids:  # Ollama lists "llama3.2:latest" and accepts "llama3.2"
            return wanted
        raise RemoteServerError(f"{self.server} has no model {self._clean(wanted, 120)!r}; it offers "
                                f"{_listing(ids, self._clean) or 'none'} (choose with --model).")

    def _describe(self, model: str) -> ModelInfo:
        entry = self._models.get(model) or self._models.get(f"{model}:latest") or {}
        meta = entry.get("meta")
        if not isinstance(meta, dict):  # llama-server's; absent (or null) elsewhere
            meta = {}
        context = _count(entry.get("max_model_len")) or _count(meta.get("n_ctx"))  # vLLM / llama-server
        trained = _count(meta.get("n_ctx_train")) or None
        return ModelInfo(
            name=model,
            path=model_url(self._root, model),
            architecture="",
            quantization="",
            trained_context=trained if isinstance(trained, int) else None,
            context_size=context if isinstance(context, int) else 0,  # 0: the server did not say
            n_layers=None,
            gpu_layers=0,
            gpu_offload_supported=False,
            chat_format="server",  # the server applies its own chat template
            file_size=0,
            backend=BACKEND_NAME,
            server=self.server,
        )

    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """Check that the server answers and offers the model (``GET /v1/models``)."""
        if self._info is not None:
            return self._info
        model = self._pick(self.options.model, self.list_models())
        self.options.model = model
        self._info = self._describe(model)
        log.info("using model %s on %s", model, self.server)
        if on_progress is not None:
            on_progress(1.0)
        return self._info

    @property
    def model_id(self) -> str | None:
        """The server's model in use (None: the server's default)."""
        return self.options.model

    def switch_model(self, model: str) -> ModelInfo:
        """Use another of the server's models (nothing is loaded here)."""
        model = self._pick(model, self.list_models())
        self.options.model = model
        self._info = self._describe(model)
        return self._info

    def describe(self) -> ModelInfo:
        if self._info is None:
            raise GenerationError("no model is selected yet.")
        return self._info

    def close(self) -> None:
        self.cancel()

    # ------------------------------------------------------------ the cache
    def reset(self) -> None:
        """Nothing to forget here: the server keeps (or not) its own cache."""

    def prefill(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        """Nothing to rebuild: the server evaluates the prompt with the next reply."""
        return 0

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        """An estimate (the server's tokenizer is not at hand): about four characters a
        token, plus a few for each message's turn markers."""
        return sum(len(m.content) // CHARS_PER_TOKEN + 4 for m in messages)

    # ------------------------------------------------------------ generation
    def cancel(self) -> None:
        self._cancel.set()
        with self._lock:
            exchange = self._active
        if exchange is not None:
            exchange.shutdown()  # the reading thread's recv returns at once

    def _body(self, messages: Sequence[ChatMessage], params: SamplingParams) -> dict[str, Any]:
        assert self.options.model is not None
        body: dict[str, Any] = {
            "model": self.options.model,
            "messages": [m.to_dict() for m in messages],
            "stream": True,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
        }
        if params.max_tokens:  # None ("auto": the server's default) and 0 (no limit) send nothing
            body["max_tokens"] = params.max_tokens
        if params.stop:
            body["stop"] = list(params.stop)
        if params.output_format is not None:
            params.output_format.check_remote()  # a grammar: a one-line error, nothing sent
            body["response_format"] = params.output_format.response_format()
        switch = remote_kwargs(params.thinking)
        if switch is not None:  # asked for: llama-server and vLLM pass these to the template
            body["chat_template_kwargs"] = switch
        if self._send_optional:
            body["stream_options"] = {"include_usage": True}
            body.update(top_k=params.top_k, min_p=params.min_p)
            if params.repeat_penalty is not None:  # None, "auto": the server's default
                body.update(repeat_penalty=params.repeat_penalty, repetition_penalty=params.repeat_penalty)
        return body

    def _start(self, messages: Sequence[ChatMessage], params: SamplingParams, deadline: float
               ) -> tuple[_Exchange, http.client.HTTPResponse]:
        """POST the chat; the open stream. Retries once without the extra fields when the
        server refuses them; a 404 names the models the server has."""
        path = "/chat/completions"
        while True:
            exchange, resp = self._open("POST", path, self._body(messages, params), track=True, deadline=deadline)
            if resp.status == 200:
                return exchange, resp
            try:
                error = self._http_error(resp, path)
            finally:
                self._release(exchange)
            if resp.status in (400, 422) and self._send_optional and any(
                    name in str(error) for name in OPTIONAL_FIELDS):
                log.info("%s refused the extra sampling fields; sending only the standard ones", self.server)
                self._send_optional = False
                continue
            if resp.status == 404:
                error = self._missing_model(error)
            if resp.status in (400, 422) and params.output_format is not None and any(
                    name in str(error) for name in ("response_format", "json_schema", "json_object")):
                error = RemoteServerError(f"{self.server} does not take structured output (response_format "
                                          f"{params.output_format.response_format()['type']}): {error}")
            raise error

    def _missing_model(self, error: RemoteServerError) -> RemoteServerError:
        try:
            ids = self.list_models()
            self._pick(self.options.model, ids)
        except RemoteServerError as listed:
            return listed  # "has no model 'x'; it offers a, b"
        return error

    def stream_chat(self, messages: Sequence[ChatMessage],
                    params: SamplingParams) -> Generator[ChatEvent, None, None]:
        self.load()
        self._cancel.clear()
        params = params.with_seed()
        if params.max_tokens == 0:  # asked for no limit: None, what "no limit" is once resolved
            params = params.replace(max_tokens=None)
        messages = list(messages)
        stats = GenerationStats(seed=params.seed)
        t_start = time.perf_counter()
        deadline = time.monotonic() + self.options.deadline
        reply = _Reply(StopMatcher(params.stop))
        stops, parts = reply.stops, reply.parts
        finish: FinishReason = "stop"
        try:
            exchange, resp = self._start(messages, params, deadline)
        except _Cancelled:
            stats.finish_reason = "cancelled"
            yield GenerationDone(text="", stats=stats, params=params)
            return
        except _Expired:
            raise self._expired("the reply") from None
        reader = _Stream(resp, exchange, idle=self.options.timeout)
        limit = params.max_tokens
        deltas = received = after_limit = 0
        t_first = t_last = 0.0
        usage: dict[str, Any] | None = None
        timings: dict[str, Any] | None = None
        server_finish: str | None = None
        capped = False  # ended here at max_tokens or MAX_REPLY_CHARS: a 'length' finish
        bound = ""  # MAX_REPLY_CHARS cut it: said on stderr by the front ends (app/bounds.py)
        try:
            while True:
                try:
                    chunk = reader.next_event()
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    if self._cancel.is_set():
                        finish = "cancelled"
                        break
                    yield from reply.flush()
                    raise self._cut(exc, "".join(parts), reader) from None
                if chunk is None:  # the stream ended
                    if self._cancel.is_set():
                        finish = "cancelled"
                    elif exchange.expired.is_set() or (not reader.done and server_finish is None):
                        yield from reply.flush()
                        raise self._cut(None, "".join(parts), reader)
                    break
                if isinstance(chunk.get("error"), (dict, str)):
                    yield from reply.flush()
                    raise self._server_failed(chunk, "".join(parts))
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                if isinstance(chunk.get("timings"), dict):
                    timings = chunk["timings"]
                choices = chunk.get("choices")
                choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
                delta = choice.get("delta")
                if not isinstance(delta, dict):  # absent or null: no text in this chunk
                    delta = {}
                content = delta.get("content")
                reasoning = delta.get("reasoning_content")
                if not isinstance(reasoning, str):
                    reasoning = delta.get("reasoning")  # OpenRouter's, newer vLLM's name
                for piece, is_reasoning in ((reasoning, True), (content, False)):
                    if not isinstance(piece, str) or not piece:
                        continue
                    if limit is not None and (deltas >= limit or _past(usage, limit)):
                        capped = True  # a piece past max_tokens: not shown, and the connection closes
                        break
                    if received + len(piece) > MAX_REPLY_CHARS:
                        piece, capped = piece[:MAX_REPLY_CHARS - received], True
                        bound = f"vibechat's bound of {MAX_REPLY_CHARS:,} characters for a server's reply"
                    received += len(piece)  # the thinking counts: it is generated too
                    deltas += 1
                    t_last = time.perf_counter()
                    if not t_first:
                        t_first = t_last
                    yield from (reply.reasoning(piece) if is_reasoning else reply.content(piece))
                    if stops.stopped or capped:
                        break
                if stops.stopped or capped:
                    break  # closing the connection stops the server's generation
                if isinstance(choice.get("finish_reason"), str):
                    server_finish = choice["finish_reason"]
                if self._cancel.is_set():
                    finish = "cancelled"
                    break
                if limit is not None and deltas >= limit:
                    after_limit += 1  # waiting for the server's finish, usage and [DONE]: not long
                    if after_limit > AFTER_LIMIT_EVENTS:
                        capped = server_finish is None
                        break
        finally:
            self._release(exchange)
        if finish != "cancelled":
            yield from reply.flush()
            if (server_finish == "length" or capped) and not stops.stopped:
                finish = "length"
        if capped:
            log.info("the reply from %s was cut at %s", self.server,
                     f"max_tokens ({limit})" if limit is not None and deltas >= limit
                     else f"{MAX_REPLY_CHARS:,} characters")
        t_end = time.perf_counter()
        text = "".join(parts)
        self._fill_stats(stats, messages, deltas, t_start, t_first, t_last, t_end, usage, timings)
        thought = _reasoning_tokens(usage) if reply.thinking else None  # else not known: 0
        if thought:
            stats.thinking_tokens = min(thought, stats.completion_tokens) if stats.completion_tokens else thought
        stats.finish_reason = finish
        if params.output_format is not None and finish == "stop" and not stops.stopped:
            _check_json_reply(self.server, text)
        yield GenerationDone(text=text, stats=stats, params=params, thinking="".join(reply.thinking),
                             bound=bound if finish == "length" else "")

    def _cut(self, exc: BaseException | None, partial: str, reader: "_Stream") -> VibechatError:
        """A stream that ended before the reply did: StreamInterrupted with the text so far."""
        if reader.exchange.expired.is_set():
            why = f"{self.server} did not finish the reply within {self.options.deadline:g} s"
            fix = "that is the deadline for one reply; ask for a shorter one (--max-tokens), or check the server"
        elif isinstance(exc, TimeoutError):
            sent = "only keep-alive comments" if reader.comments else "nothing"
            why = f"{self.server} sent {sent} for {self.options.timeout:g} s"
            fix = "the server may be stuck or overloaded (raise timeout, VIBECHAT_TIMEOUT, for a slow one)"
        elif isinstance(exc, _TooMuch):
            why = f"{self.server} sent {exc}"
            fix = "is it an OpenAI-compatible server? See its log"
        elif isinstance(exc, ValueError):  # not JSON
            why = f"{self.server} sent something vibechat could not read ({self._clean(str(exc), 120)})"
            fix = "is it an OpenAI-compatible server? See its log"
        else:
            why = f"the connection to {self.server} dropped"
            fix = "check the server (its log), then try again"
        if partial:
            return StreamInterrupted(f"{why} mid-reply; the partial reply is kept, marked interrupted. "
                                     f"{fix[0].upper()}{fix[1:]}.", partial)
        return GenerationError(f"{why} before the reply began; {fix}.")

    def _server_failed(self, chunk: dict[str, Any], partial: str) -> VibechatError:
        message = f"{self.server} failed mid-reply: {self._clean(_message_of(chunk)) or 'no reason given'}"
        if partial:
            return StreamInterrupted(f"{message}; the partial reply is kept, marked interrupted.", partial)
        return RemoteServerError(f"{message}.")

    def _fill_stats(self, stats: GenerationStats, messages: list[ChatMessage], deltas: int, t_start: float,
                    t_first: float, t_last: float, t_end: float, usage: dict[str, Any] | None,
                    timings: dict[str, Any] | None) -> None:
        """The server's numbers where it sent them, else measured (see the module doc)."""
        stats.completion_tokens = deltas
        stats.prompt_tokens = stats.prompt_tokens_evaluated = self.count_tokens(messages)
        stats.ttft_ms = (t_first - t_start) * 1000 if t_first else 0.0
        stats.prompt_eval_ms = stats.ttft_ms
        stats.decode_ms = (t_end - t_first) * 1000 if t_first else 0.0
        if deltas > 1 and t_last > t_first:
            stats.decode_tokens_per_s = (deltas - 1) / (t_last - t_first)
        if usage:
            prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            if prompt is not None:
                stats.prompt_tokens = stats.prompt_tokens_evaluated = prompt
                details = usage.get("prompt_tokens_details")
                cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
                if cached:
                    stats.prompt_tokens_evaluated = max(0, prompt - cached)
            if completion is not None:
                stats.completion_tokens = completion
        if timings:  # llama-server: what the server itself measured
            evaluated, cached = _count(timings.get("prompt_n")), _count(timings.get("cache_n"))
            if evaluated is not None:
                stats.prompt_tokens_evaluated = evaluated
                if cached is not None:
                    stats.prompt_tokens = evaluated + cached
            for key, attr in (("prompt_ms", "prompt_eval_ms"), ("predicted_ms", "decode_ms"),
                              ("predicted_per_second", "decode_tokens_per_s")):
                value = _number(timings.get(key))
                if value is not None:
                    setattr(stats, attr, value)


def _reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    """The thinking's tokens where the server reports them (OpenAI, vLLM, the DeepSeek API:
    ``usage.completion_tokens_details.reasoning_tokens``)."""
    details = usage.get("completion_tokens_details") if usage else None
    return _count(details.get("reasoning_tokens")) if isinstance(details, dict) else None


class _Reply:
    """A streamed reply's text: ``reasoning_content`` is thinking; ``content`` goes through
    a ``ThinkingSplitter`` (inline ``<think>`` tags), and its answer pieces through the
    stop strings (which apply to the answer only). Lone surrogates become U+FFFD."""

    def __init__(self, stops: StopMatcher) -> None:
        self.stops = stops
        self.parts: list[str] = []
        self.thinking: list[str] = []
        self._splitter = ThinkingSplitter()
        self._joiner = _SurrogateJoiner()
        self._reasoning_joiner = _SurrogateJoiner()

    def reasoning(self, text: str) -> list[ChatEvent]:
        return self._events([(True, self._reasoning_joiner.feed(text))])

    def content(self, text: str) -> list[ChatEvent]:
        return self._events(self._splitter.feed(self._joiner.feed(text)))

    def flush(self) -> list[ChatEvent]:
        """The end of the stream: what was held back."""
        events = self._events([(True, self._reasoning_joiner.flush())])
        events += self._events(self._splitter.feed(self._joiner.flush()) + self._splitter.flush())
        return events + self._events([(False, self.stops.flush())], past_stops=True)

    def _events(self, pieces: list[tuple[bool, str]], past_stops: bool = False) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        for thinking, text in pieces:
            if thinking:
                if text and not self.stops.stopped:
                    self.thinking.append(text)
                    events.append(ThinkingDelta(text))
                continue
            text = text if past_stops else self.stops.feed(text)
            if text:
                self.parts.append(text)
                events.append(TextDelta(text))
        return events


class _Stream:
    """Server-sent events from a response: each ``data:`` event parsed as JSON, within
    the bounds in the module doc. ``done`` is set by ``data: [DONE]``; llama-server's
    ``error: {...}`` lines come back as ``{"error": ...}``. ``comments``: keep-alive
    comments since the last event."""

    def __init__(self, resp: http.client.HTTPResponse, exchange: _Exchange, idle: float) -> None:
        self.resp = resp
        self.exchange = exchange
        self.idle = idle
        self.done = False
        self.comments = 0
        self.events = 0
        self.received = 0  # bytes
        self._buf = bytearray()
        self._pos = 0  # where the unread lines begin
        self._scanned = 0  # no newline before this
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
            raise _TooMuch(f"more than {_size(MAX_STREAM_BYTES)} in one answer")
        if self._pos:
            del self._buf[:self._pos]
            self._scanned -= self._pos
            self._pos = 0
        self._buf += data

    def _line(self) -> bytes | None:
        """The next line (without its newline), or None at the end of the stream."""
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buf[self._pos:end])
                self._pos = self._scanned = end + 1
                return line
            self._scanned = len(self._buf)
            if self._scanned - self._pos > MAX_EVENT:
                raise _TooMuch(f"a line longer than {_size(MAX_EVENT)}")
            if self._eof:
                if self._pos < len(self._buf):  # the last line, without a newline
                    line = bytes(self._buf[self._pos:])
                    self._pos = self._scanned = len(self._buf)
                    return line
                return None
            self._fill()

    def _event(self, data: list[str]) -> dict[str, Any]:
        self.events += 1
        if self.events > MAX_EVENTS:
            raise _TooMuch(f"more than {MAX_EVENTS:,} events in one answer")
        self.comments = 0
        self._last_event = time.monotonic()
        return _parse(data)

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
                self.comments += 1  # a comment (keep-alive ping): does not count as an event
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                if value.strip() == "[DONE]":
                    self.done = True
                    return None
                size += len(value) + 1
                if size > MAX_EVENT:
                    raise _TooMuch(f"an event larger than {_size(MAX_EVENT)}")
                data.append(value)
            elif field == "error":  # llama-server's non-standard error event
                try:
                    body: Any = _loads(value)
                except ValueError:
                    body = value
                self._last_event = time.monotonic()
                return {"error": body}
        return None


class _SurrogateJoiner:
    """Reply text without lone surrogates: a pair a server split across two pieces (a
    UTF-16 client-side string sliced between its halves) is joined, any other surrogate
    becomes U+FFFD."""

    __slots__ = ("_high",)

    def __init__(self) -> None:
        self._high = ""  # a high surrogate that ended the last piece

    def feed(self, text: str) -> str:
        if self._high:
            text, self._high = self._high + text, ""
        elif text.isascii():
            return text
        if "\ud800" <= text[-1] <= "\udbff":
            text, self._high = text[:-1], text[-1]
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace") if text else ""

    def flush(self) -> str:
        high, self._high = self._high, ""
        return REPLACEMENT if high else ""


def _parse(data: list[str]) -> dict[str, Any]:
    chunk = _loads("\n".join(data))
    if not isinstance(chunk, dict):
        raise ValueError("an event that is not a JSON object")
    return chunk


def _loads(text: str) -> Any:
    """``json.loads``, with nesting too deep for it a ValueError too (not RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _read_body(resp: http.client.HTTPResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of a response body, read in pieces (the exchange's watchdog
    ends a read that outlives the deadline)."""
    out = bytearray()
    while len(out) < limit:
        data = resp.read1(min(READ_SIZE, limit - len(out)))
        if not data:
            break
        out += data
    return bytes(out)


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MB" if n >= 1 << 20 else f"{n:,} bytes"


def _usable_id(value: Any) -> bool:
    """A model id we can show, save and send back: printable one-line text, not too long."""
    return isinstance(value, str) and 0 < len(value) <= MAX_MODEL_ID and value.isprintable()


def _past(usage: dict[str, Any] | None, limit: int) -> bool:
    """The server's own running count (some send ``usage`` with every chunk) is past ``limit``."""
    completion = _count(usage.get("completion_tokens")) if usage else None
    return completion is not None and completion > limit


def _message_of(data: Any) -> str:
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
        return "; ".join(str(d.get("msg", ""))[:MAX_ERROR_BODY]
                         + (f" ({'.'.join(map(str, d['loc'][:8]))})" if isinstance(d.get("loc"), list) else "")
                         for d in detail[:3] if isinstance(d, dict))
    return ""


def _count(value: Any) -> int | None:
    """A token count or size from the server: a whole number from 0 to ``MAX_COUNT``, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _number(value: Any) -> float | None:
    """A time or rate from the server: a finite number from 0 on, else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float(MAX_COUNT):
        return float(value)
    return None


def _listing(ids: list[str], clean: Callable[[str, int], str], most: int = 8) -> str:
    shown = ", ".join(clean(i, 80) for i in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def make_openai_backend(base_url: str, model: str | None, *, api_key_env: str | None = None,
                        timeout: float | None = None, environ: Mapping[str, str] | None = None,
                        deadline: float | None = None) -> OpenAICompatibleBackend:
    """A backend for ``base_url`` with the API key from the environment (see
    ``resolve_api_key``); nothing is contacted until ``load()``. ``deadline`` (seconds for
    one whole request) is at least ``timeout``."""
    key, variable = resolve_api_key(api_key_env, environ, base_url)
    env = os.environ if environ is None else environ
    withheld = None if key or not env.get(IMPLICIT_ONLY_OVER_HTTPS, "").strip() else IMPLICIT_ONLY_OVER_HTTPS
    return OpenAICompatibleBackend(OpenAIOptions(
        base_url=base_url, model=model or None, api_key=key, api_key_variable=variable,
        withheld_key_variable=withheld,
        timeout=float(timeout) if timeout is not None else DEFAULT_TIMEOUT,
        deadline=max(float(deadline) if deadline is not None else DEFAULT_DEADLINE,
                     float(timeout) if timeout is not None else 0.0)))


__all__ = ["OpenAICompatibleBackend", "OpenAIOptions", "make_openai_backend", "normalize_base_url",
           "display_url", "resolve_api_key", "DEFAULT_TIMEOUT", "DEFAULT_DEADLINE"]


def _check_json_reply(server: str, text: str) -> None:
    """A server that ignores ``response_format`` answers in free text: say so, rather than
    hand on a reply that is not the JSON asked for."""
    try:
        json.loads(text)
    except ValueError:
        raise RemoteServerError(f"{server} answered with text that is not JSON: it seems to ignore "
                                "response_format (structured output); use the local engine, or a server "
                                "that supports it (llama-server, vLLM, OpenAI).") from None
