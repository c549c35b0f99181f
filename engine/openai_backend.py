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
here, so they hold on servers that ignore them.

Stats come from the server when it sends them (``usage`` with
``stream_options.include_usage``, llama-server's ``timings``) and are measured
here otherwise: time to first token and tokens/s from the streamed deltas, one
delta counted as one token; without ``usage`` the prompt's tokens are an
estimate (``count_tokens``: about four characters a token).

Errors are one line each (``RemoteServerError``), naming the server and the
fix; an API key is never put in a message or a log line, and a server's message
is cleaned (control characters, length, the key itself) before it is shown. A
stream cut mid-reply raises ``StreamInterrupted`` carrying the text received.
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
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from .backend import ChatEvent, ChatMessage, FinishReason, GenerationDone, GenerationStats, ModelInfo, TextDelta
from .errors import GenerationError, InvalidParameterError, RemoteServerError, StreamInterrupted, VibechatError
from .params import SamplingParams
from .sanitize import sanitize
from .stops import StopMatcher

log = logging.getLogger("vibechat.openai")

BACKEND_NAME = "openai"
DEFAULT_TIMEOUT = 300.0  # seconds without a byte from the server before giving up
CONNECT_TIMEOUT = 10.0
KEY_VARIABLES = ("VIBECHAT_API_KEY", "OPENAI_API_KEY")  # looked up in this order
IMPLICIT_ONLY_OVER_HTTPS = "OPENAI_API_KEY"  # unnamed, it goes only to https servers
EXTRA_FIELDS = ("top_k", "min_p", "repeat_penalty", "repetition_penalty")
OPTIONAL_FIELDS = (*EXTRA_FIELDS, "stream_options")  # what a strict server may refuse
CHARS_PER_TOKEN = 4  # the estimate count_tokens uses (English text, common tokenizers)
MAX_ERROR_BODY = 65536
MAX_LINE = 8 << 20  # one server-sent event line, at most (a reply chunk is a few hundred bytes)
MAX_JSON_BODY = 16 << 20


def normalize_base_url(url: str) -> str:
    """``url`` as the API root: http(s) only, no trailing slash, ``/v1`` added when the
    URL names only a host (``http://127.0.0.1:8080`` → ``http://127.0.0.1:8080/v1``)."""
    text = (url or "").strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidParameterError(
            f"the base URL must be an http:// or https:// URL such as http://127.0.0.1:8080/v1 (got {text!r}).")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise InvalidParameterError(f"the base URL has an invalid port (got {text!r}).") from None
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1"
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{parts.netloc}{path}{query}"


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

    def __post_init__(self) -> None:
        self.base_url = normalize_base_url(self.base_url)

    def __repr__(self) -> str:  # keeps the key out of tracebacks and debug output
        return (f"OpenAIOptions(base_url={display_url(self.base_url)!r}, model={self.model!r}, "
                f"api_key={'<set>' if self.api_key else None}, timeout={self.timeout})")


class _Cancelled(Exception):
    """The user cancelled while a request was on its way (internal)."""


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
        self._active: http.client.HTTPConnection | None = None

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
              track: bool = False) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request; the connection and the response (headers read). ``track``:
        the connection ``cancel()`` shuts down. Connection problems raise
        ``RemoteServerError`` (or ``_Cancelled`` when the user cancelled meanwhile)."""
        opts = self.options
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=opts.connect_timeout, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=opts.connect_timeout)
        headers = {"Accept": "text/event-stream" if track else "application/json", "User-Agent": "vibechat"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if opts.api_key:
            headers["Authorization"] = f"Bearer {opts.api_key}"
        target = self._prefix + path + (f"?{self._query}" if self._query else "")
        if track:
            with self._lock:
                self._active = conn
        log.debug("%s %s%s", method, self._root, path)
        try:
            if track and self._cancel.is_set():
                raise _Cancelled()
            conn.connect()
            if track and self._cancel.is_set():  # cancelled while connecting
                raise _Cancelled()
            assert conn.sock is not None
            conn.sock.settimeout(opts.timeout)
            conn.request(method, target, body=data, headers=headers)
            return conn, conn.getresponse()
        except _Cancelled:
            self._release(conn)
            raise
        except (OSError, http.client.HTTPException) as exc:
            self._release(conn)
            if track and self._cancel.is_set():
                raise _Cancelled() from None
            raise self._connection_error(exc, path) from None

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if self._active is conn:
                self._active = None
        try:
            conn.close()
        except OSError:
            pass

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
            data = json.loads(text)
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
        conn, resp = self._open("GET", path)
        try:
            if resp.status != 200:
                raise self._http_error(resp, path)
            try:
                return json.loads(resp.read(MAX_JSON_BODY).decode("utf-8", errors="replace"))
            except (ValueError, OSError, http.client.HTTPException):
                raise RemoteServerError(f"{self.server} answered {path} with something other than JSON; "
                                        "is --base-url an OpenAI-compatible API?") from None
        finally:
            conn.close()

    # ---------------------------------------------------------------- models
    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /v1/models``), in its order."""
        data = self._get_json("/models")
        entries = data.get("data") if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise RemoteServerError(f"{self.server}/models did not list models; is --base-url an "
                                    "OpenAI-compatible API?")
        models: dict[str, dict[str, Any]] = {}
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                models[entry["id"]] = entry
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
        context = entry.get("max_model_len") or meta.get("n_ctx")  # vLLM / llama-server
        trained = meta.get("n_ctx_train")
        return ModelInfo(
            name=model,
            path=f"{self._root}/models/{quote(model, safe='/:@')}",
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

    def prefill(self, messages: Sequence[ChatMessage]) -> int:
        """Nothing to rebuild: the server evaluates the prompt with the next reply."""
        return 0

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """An estimate (the server's tokenizer is not at hand): about four characters a
        token, plus a few for each message's turn markers."""
        return sum(len(m.content) // CHARS_PER_TOKEN + 4 for m in messages)

    # ------------------------------------------------------------ generation
    def cancel(self) -> None:
        self._cancel.set()
        with self._lock:
            conn = self._active
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the reading thread's recv returns at once
            except OSError:
                pass

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
        if params.max_tokens is not None:
            body["max_tokens"] = params.max_tokens
        if params.stop:
            body["stop"] = list(params.stop)
        if self._send_optional:
            body["stream_options"] = {"include_usage": True}
            body.update(top_k=params.top_k, min_p=params.min_p, repeat_penalty=params.repeat_penalty,
                        repetition_penalty=params.repeat_penalty)
        return body

    def _start(self, messages: Sequence[ChatMessage], params: SamplingParams
               ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """POST the chat; the open stream. Retries once without the extra fields when the
        server refuses them; a 404 names the models the server has."""
        path = "/chat/completions"
        while True:
            conn, resp = self._open("POST", path, self._body(messages, params), track=True)
            if resp.status == 200:
                return conn, resp
            try:
                error = self._http_error(resp, path)
            finally:
                self._release(conn)
            if resp.status in (400, 422) and self._send_optional and any(
                    name in str(error) for name in OPTIONAL_FIELDS):
                log.info("%s refused the extra sampling fields; sending only the standard ones", self.server)
                self._send_optional = False
                continue
            if resp.status == 404:
                error = self._missing_model(error)
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
        messages = list(messages)
        stats = GenerationStats(seed=params.seed)
        t_start = time.perf_counter()
        parts: list[str] = []
        stops = StopMatcher(params.stop)
        finish: FinishReason = "stop"
        try:
            conn, resp = self._start(messages, params)
        except _Cancelled:
            stats.finish_reason = "cancelled"
            yield GenerationDone(text="", stats=stats, params=params)
            return
        reader = _Stream(resp)
        deltas = 0
        t_first = t_last = 0.0
        usage: dict[str, Any] | None = None
        timings: dict[str, Any] | None = None
        server_finish: str | None = None
        try:
            while True:
                try:
                    chunk = reader.next_event()
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    if self._cancel.is_set():
                        finish = "cancelled"
                        break
                    yield from self._flush(stops, parts)
                    raise self._cut(exc, "".join(parts), reader.done) from None
                if chunk is None:  # the stream ended
                    if self._cancel.is_set():
                        finish = "cancelled"
                    elif not reader.done and server_finish is None:
                        yield from self._flush(stops, parts)
                        raise self._cut(None, "".join(parts), False)
                    break
                if isinstance(chunk.get("error"), (dict, str)):
                    yield from self._flush(stops, parts)
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
                if isinstance(content, str) and content:
                    deltas += 1
                    t_last = time.perf_counter()
                    if not t_first:
                        t_first = t_last
                    text = stops.feed(content)
                    if text:
                        parts.append(text)
                        yield TextDelta(text)
                    if stops.stopped:
                        break  # closing the connection stops the server's generation
                if isinstance(choice.get("finish_reason"), str):
                    server_finish = choice["finish_reason"]
                if self._cancel.is_set():
                    finish = "cancelled"
                    break
        finally:
            self._release(conn)
        if finish != "cancelled":
            yield from self._flush(stops, parts)
            if server_finish == "length" and not stops.stopped:
                finish = "length"
        t_end = time.perf_counter()
        text = "".join(parts)
        self._fill_stats(stats, messages, deltas, t_start, t_first, t_last, t_end, usage, timings)
        stats.finish_reason = finish
        yield GenerationDone(text=text, stats=stats, params=params)

    @staticmethod
    def _flush(stops: StopMatcher, parts: list[str]) -> Iterator[ChatEvent]:
        tail = stops.flush()
        if tail:
            parts.append(tail)
            yield TextDelta(tail)

    def _cut(self, exc: BaseException | None, partial: str, done: bool) -> VibechatError:
        """A stream that ended before the reply did: StreamInterrupted with the text so far."""
        if isinstance(exc, TimeoutError):
            why = f"{self.server} sent nothing for {self.options.timeout:g} s"
            fix = "the server may be stuck or overloaded (raise timeout, VIBECHAT_TIMEOUT, for a slow one)"
        elif isinstance(exc, ValueError):  # not JSON, or absurdly long
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
            prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
            if prompt is not None:
                stats.prompt_tokens = stats.prompt_tokens_evaluated = prompt
                details = usage.get("prompt_tokens_details")
                cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
                if cached:
                    stats.prompt_tokens_evaluated = max(0, prompt - cached)
            if completion is not None:
                stats.completion_tokens = completion
        if timings:  # llama-server: what the server itself measured
            evaluated, cached = _int(timings.get("prompt_n")), _int(timings.get("cache_n"))
            if evaluated is not None:
                stats.prompt_tokens_evaluated = evaluated
                if cached is not None:
                    stats.prompt_tokens = evaluated + cached
            if isinstance(timings.get("prompt_ms"), (int, float)):
                stats.prompt_eval_ms = float(timings["prompt_ms"])
            if isinstance(timings.get("predicted_ms"), (int, float)):
                stats.decode_ms = float(timings["predicted_ms"])
            if isinstance(timings.get("predicted_per_second"), (int, float)):
                stats.decode_tokens_per_s = float(timings["predicted_per_second"])


class _Stream:
    """Server-sent events from a response: each ``data:`` event parsed as JSON.
    ``done`` is set by ``data: [DONE]``; llama-server's ``error: {...}`` lines come
    back as ``{"error": ...}``."""

    def __init__(self, resp: http.client.HTTPResponse) -> None:
        self.resp = resp
        self.done = False

    def next_event(self) -> dict[str, Any] | None:
        """The next event's JSON, or None at the end of the stream. Raises OSError /
        HTTPException when the connection fails, ValueError on an unreadable event."""
        data: list[str] = []
        while not self.done:
            raw = self.resp.readline(MAX_LINE)
            if len(raw) >= MAX_LINE and not raw.endswith(b"\n"):
                raise ValueError(f"an event line longer than {MAX_LINE >> 20} MB")
            if not raw:
                if data:
                    return _parse(data)
                return None
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line:
                if data:
                    return _parse(data)
                continue
            if line.startswith(":"):
                continue  # a comment (keep-alive ping)
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                if value.strip() == "[DONE]":
                    self.done = True
                    return None
                data.append(value)
            elif field == "error":  # llama-server's non-standard error event
                try:
                    body = json.loads(value)
                except ValueError:
                    body = value
                return {"error": body}
        return None


def _parse(data: list[str]) -> dict[str, Any]:
    chunk = json.loads("\n".join(data))
    if not isinstance(chunk, dict):
        raise ValueError("an event that is not a JSON object")
    return chunk


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
        return "; ".join(str(d.get("msg", "")) + (f" ({'.'.join(map(str, d['loc']))})" if d.get("loc") else "")
                         for d in detail[:3])
    return ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _listing(ids: list[str], clean: Callable[[str, int], str], most: int = 8) -> str:
    shown = ", ".join(clean(i, 80) for i in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def make_openai_backend(base_url: str, model: str | None, *, api_key_env: str | None = None,
                        timeout: float | None = None, environ: Mapping[str, str] | None = None
                        ) -> OpenAICompatibleBackend:
    """A backend for ``base_url`` with the API key from the environment (see
    ``resolve_api_key``); nothing is contacted until ``load()``."""
    key, variable = resolve_api_key(api_key_env, environ, base_url)
    env = os.environ if environ is None else environ
    withheld = None if key or not env.get(IMPLICIT_ONLY_OVER_HTTPS, "").strip() else IMPLICIT_ONLY_OVER_HTTPS
    return OpenAICompatibleBackend(OpenAIOptions(
        base_url=base_url, model=model or None, api_key=key, api_key_variable=variable,
        withheld_key_variable=withheld,
        timeout=float(timeout) if timeout is not None else DEFAULT_TIMEOUT))


__all__ = ["OpenAICompatibleBackend", "OpenAIOptions", "make_openai_backend", "normalize_base_url",
           "display_url", "resolve_api_key", "DEFAULT_TIMEOUT"]

