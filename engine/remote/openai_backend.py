"""``OpenAICompatibleBackend``: replies from a server that speaks OpenAI's chat API.

llama.cpp's ``llama-server``, vLLM, Ollama, LM Studio and llama-cpp-python's
server all answer ``GET /v1/models`` and ``POST /v1/chat/completions`` with
``stream: true`` (server-sent events). This backend drives one such exchange after
another; the room's other modules do the parts:

* options.py: where the server is, the API key (never put in a message or a log line);
* client.py: the HTTP client (``http.client``: no new dependency, and the socket at hand,
  so ``cancel()`` from another thread shuts it down, the blocked read returns at once and
  the server stops generating), each request's deadline, the one-line errors;
* listing.py: the server's models; request.py: the request's body (the sampling
  parameters, and the extra fields a strict server refuses, sent again without them);
* sse.py: the server-sent events, within their size and idle bounds;
* reply.py: the reply's text and thinking, the stats (the server's where it sends them,
  measured here otherwise), a structured-output reply's JSON check;
* tool_stream.py: the tool calls a reply streams (``delta.tool_calls``), put together and
  bounded; they end the reply as ``GenerationDone.tool_calls``, finish reason ``tool_calls``;
* images.py: a message's images as content parts (``data:`` URIs of the kept copies); a
  server that refuses them is one line naming the fix (``--mmproj``, a vision model).

Stop strings are also applied here, so they hold on servers that ignore them. Without
``usage`` the prompt's tokens are an estimate (``count_tokens``: about four characters a
token; an image ``images.IMAGE_TOKENS``). A stream cut mid-reply raises ``StreamInterrupted``
carrying the text received.

Everything a server sends is untrusted, and every loop over it is bounded:

* time: ``timeout`` seconds without an event (keep-alive comments do not count, so
  ``: ping`` lines cannot keep a dead reply open), and ``deadline`` seconds for a whole
  request (connect, headers, the reply), which nothing the server sends extends: a
  watchdog shuts the socket down when it passes;
* size: one event at most ``sse.MAX_EVENT`` bytes, a whole answer ``sse.MAX_STREAM_BYTES``
  bytes and ``sse.MAX_EVENTS`` events, the reply's text ``MAX_REPLY_CHARS`` characters
  (more ends the reply as ``length``, keeping the text), a JSON answer
  ``client.MAX_JSON_BODY`` bytes, an error body ``client.MAX_ERROR_BODY``; a reply's tool
  calls ``tool_stream.MAX_TOOL_CALLS``, each one's arguments ``MAX_ARGUMENTS_CHARS`` (more is
  a one-line error, the text so far kept);
* ``max_tokens`` holds on the client too: after that many content pieces (one piece is
  at least one token on the servers we know) the next piece is not shown and the
  connection is closed (``length``), as is a piece that the server's own running
  ``usage`` counts past the limit; the server's own finish after exactly that many
  pieces is still read (a few events at most); thinking pieces count like answer pieces;
* text: lone surrogates (a JSON ``\\ud800`` escape) become U+FFFD in the reply; model ids
  that are not printable, one-line and short are left out of the model list; numbers
  (context sizes, token counts, timings) are used only when they are sane.
"""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from ..errors import GenerationError, RemoteServerError, StreamInterrupted, VibechatError
from ..settings.params import SamplingParams
from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    FinishReason,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    ReplyPrefix,
)
from ..turns.lens_steps import PATH_NEEDS_LOCAL
from ..turns.stops import StopMatcher
from ..turns.tool_calls import ToolCall, ToolSpec
from .client import Cancelled, Exchange, Expired, ServerClient, TooMuch, message_of
from .images import IMAGE_TOKENS, NO_IMAGES_FIX, refused_images
from .lens import RemoteLens
from .listing import ServerModels
from .options import (
    BACKEND_NAME,
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    OpenAIOptions,
    resolve_api_key,
    withheld_key,
)
from .reply import ReplyText, check_json_reply, fill_stats, past, reasoning_tokens
from .request import chat_body, optional_fields
from .sse import EventStream
from .tool_stream import ToolCallBound, ToolCallStream

log = logging.getLogger("vibechat.openai")

# The estimate count_tokens uses (English text, common tokenizers).
CHARS_PER_TOKEN = 4
# Characters of reply text (~500k tokens); more ends the reply as 'length'.
MAX_REPLY_CHARS = 2 << 20
# Events read after max_tokens pieces, for the server's finish and usage.
AFTER_LIMIT_EVENTS = 8


class OpenAICompatibleBackend:
    """One model on an OpenAI-compatible server. One thread drives it; ``cancel()`` is
    thread-safe, and ``list_models()`` may run beside a reply (its own connection)."""

    name = BACKEND_NAME

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        self._http = ServerClient(options)
        self._catalog = ServerModels(self._http)
        self.server = self._http.server
        self._info: ModelInfo | None = None
        # False once the server refused the extra fields.
        self._send_optional = True

    # ---------------------------------------------------------------- models
    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /v1/models``), in its order."""
        return self._catalog.fetch()

    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """Check that the server answers and offers the model (``GET /v1/models``)."""
        if self._info is not None:
            return self._info
        model = self._catalog.pick(self.options.model, self.list_models())
        self.options.model = model
        self._info = self._catalog.describe(model)
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
        model = self._catalog.pick(model, self.list_models())
        self.options.model = model
        self._info = self._catalog.describe(model)
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

    def prefill(
        self,
        messages: Sequence[ChatMessage],
        thinking: str = "auto",
        tools: Sequence[ToolSpec] = (),
    ) -> int:
        """Nothing to rebuild: the server evaluates the prompt with the next reply."""
        return 0

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        """An estimate (the server's tokenizer is not at hand): about four characters a
        token, plus a few for each message's turn markers (a call's name and arguments count
        as text), and a rough fixed cost for each image (``images.IMAGE_TOKENS``)."""
        return sum(
            (len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls))
            // CHARS_PER_TOKEN
            + 4
            + IMAGE_TOKENS * len(m.images)
            for m in (m.inlined() for m in messages)
        )

    # ------------------------------------------------------------ generation
    def cancel(self) -> None:
        self._http.cancel()

    def _start(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        deadline: float,
        tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto",
    ) -> tuple[Exchange, http.client.HTTPResponse]:
        """POST the chat; the open stream. Retries once without the extra fields when the
        server refuses them; a 404 names the models the server has; a refusal that names
        images or tools says how to start the server so that it takes them."""
        path = "/chat/completions"
        model = self.options.model
        assert model is not None  # load() picked it
        while True:
            body = chat_body(model, messages, params, self._send_optional, tools, tool_choice)
            exchange, resp = self._http.open("POST", path, body, track=True, deadline=deadline)
            if resp.status == 200:
                return exchange, resp
            try:
                error = self._http.http_error(resp, path)
            finally:
                self._http.release(exchange)
            if (
                resp.status in (400, 422)
                and self._send_optional
                and any(name in str(error) for name in optional_fields())
            ):
                log.info(
                    "%s refused the extra sampling fields; sending only the standard ones",
                    self.server,
                )
                self._send_optional = False
                continue
            if resp.status == 404:
                error = self._missing_model(error)
            if (
                resp.status in (400, 422)
                and params.output_format is not None
                and any(
                    name in str(error) for name in ("response_format", "json_schema", "json_object")
                )
            ):
                error = RemoteServerError(
                    f"{self.server} does not take structured output (response_format "
                    f"{params.output_format.response_format()['type']}): {error}"
                )
            elif (
                resp.status in (400, 415, 422, 500, 501)
                and any(m.images for m in messages)
                and refused_images(str(error).replace(self.server, ""))
            ):
                error = RemoteServerError(f"{str(error).rstrip('.')}: {NO_IMAGES_FIX}")
            elif (
                "tools" in body
                and resp.status in (400, 422, 500, 501)
                and any(word in str(error).lower() for word in ("tool", "jinja", "function"))
            ):
                error = RemoteServerError(
                    f"{str(error).rstrip('.')}: it does not take tool calls as sent; start "
                    "llama-server with --jinja or vLLM with --enable-auto-tool-choice "
                    "--tool-call-parser NAME, pick a model that supports tools (Ollama), or turn "
                    "the tools off (tool_choice none)."
                )
            raise error

    def _missing_model(self, error: RemoteServerError) -> RemoteServerError:
        try:
            ids = self.list_models()
            self._catalog.pick(self.options.model, ids)
        except RemoteServerError as listed:
            # Its message: "has no model 'x'; it offers a, b".
            return listed
        return error

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Generator[ChatEvent, None, None]:
        """The reply, streamed (see ``Backend.stream_chat``). ``tools``: offered to the model
        (``tool_choice`` auto, none or required: request.py); the calls it asks for end the
        reply as ``GenerationDone.tool_calls`` (finish reason ``tool_calls``), after its text.
        ``prefix`` (another path from a token) is refused: its token ids are a local model's."""
        if prefix is not None:
            raise GenerationError(PATH_NEEDS_LOCAL)
        self.load()
        self._http.cancelled.clear()
        params = params.with_seed()
        # Asked for no limit: None, what "no limit" is once resolved.
        if params.max_tokens == 0:
            params = params.replace(max_tokens=None)
        messages = list(messages)
        # A budget is sent (request.py); whether the server's thinking reached it is not known.
        budget = params.think_budget
        stats = GenerationStats(
            seed=params.seed, think_budget=budget, think_budget_reached=None if budget else False
        )
        t_start = time.perf_counter()
        deadline = time.monotonic() + self.options.deadline
        reply = ReplyText(StopMatcher(params.stop))
        calls = ToolCallStream()
        stops, parts = reply.stops, reply.parts
        finish: FinishReason = "stop"
        try:
            exchange, resp = self._start(messages, params, deadline, tools, tool_choice)
        except Cancelled:
            stats.finish_reason = "cancelled"
            yield GenerationDone(text="", stats=stats, params=params)
            return
        except Expired:
            raise self._http.expired("the reply") from None
        reader = EventStream(resp, exchange, idle=self.options.timeout)
        # The token lens (remote/lens.py): the candidates the server sends with each piece.
        lens = RemoteLens(params) if params.logprobs else None
        limit = params.max_tokens
        deltas = received = after_limit = 0
        t_first = t_last = 0.0
        usage: dict[str, Any] | None = None
        timings: dict[str, Any] | None = None
        server_finish: str | None = None
        # Ended here at max_tokens or MAX_REPLY_CHARS: a 'length' finish.
        capped = False
        # Set when MAX_REPLY_CHARS cut it: said on stderr by the front ends
        # (app/commands/bounds.py).
        bound = ""
        try:
            while True:
                try:
                    chunk = reader.next_event()
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    if self._http.cancelled.is_set():
                        finish = "cancelled"
                        break
                    yield from reply.flush()
                    raise self._cut(exc, "".join(parts), reader) from None
                if chunk is None:  # the stream ended
                    if self._http.cancelled.is_set():
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
                choice = (
                    choices[0]
                    if isinstance(choices, list) and choices and isinstance(choices[0], dict)
                    else {}
                )
                if lens is not None:
                    yield from lens.feed(choice)
                delta = choice.get("delta")
                # Absent or null: no text in this chunk.
                if not isinstance(delta, dict):
                    delta = {}
                content = delta.get("content")
                reasoning = delta.get("reasoning_content")
                if not isinstance(reasoning, str):
                    # OpenRouter's, newer vLLM's name.
                    reasoning = delta.get("reasoning")
                for piece, is_reasoning in ((reasoning, True), (content, False)):
                    if not isinstance(piece, str) or not piece:
                        continue
                    if limit is not None and (deltas >= limit or past(usage, limit)):
                        # A piece past max_tokens: not shown, and the connection closes.
                        capped = True
                        break
                    if received + len(piece) > MAX_REPLY_CHARS:
                        piece, capped = piece[: MAX_REPLY_CHARS - received], True
                        bound = (
                            f"vibechat's bound of {MAX_REPLY_CHARS:,} characters for a server's "
                            "reply"
                        )
                    # The thinking counts: it is generated too.
                    received += len(piece)
                    deltas += 1
                    t_last = time.perf_counter()
                    if not t_first:
                        t_first = t_last
                    yield from (reply.reasoning(piece) if is_reasoning else reply.content(piece))
                    if stops.stopped or capped:
                        break
                if stops.stopped or capped:
                    # Closing the connection stops the server's generation.
                    break
                if delta.get("tool_calls"):
                    if limit is not None and (deltas >= limit or past(usage, limit)):
                        # Like a text piece past max_tokens.
                        capped = True
                        break
                    try:
                        fed = calls.feed(delta["tool_calls"])
                    except ToolCallBound as exc:
                        yield from reply.flush()
                        raise self._too_many(exc, "".join(parts)) from None
                    # One piece of a call: at least one token, as a text piece.
                    if fed:
                        deltas += 1
                        t_last = time.perf_counter()
                        t_first = t_first or t_last
                if isinstance(choice.get("finish_reason"), str):
                    server_finish = choice["finish_reason"]
                if self._http.cancelled.is_set():
                    finish = "cancelled"
                    break
                if limit is not None and deltas >= limit:
                    # Waiting for the server's finish, usage and [DONE]: not long.
                    after_limit += 1
                    if after_limit > AFTER_LIMIT_EVENTS:
                        capped = server_finish is None
                        break
        finally:
            self._http.release(exchange)
        if finish != "cancelled":
            yield from reply.flush()
            if (server_finish == "length" or capped) and not stops.stopped:
                finish = "length"
        if capped:
            log.info(
                "the reply from %s was cut at %s",
                self.server,
                f"max_tokens ({limit})"
                if limit is not None and deltas >= limit
                else f"{MAX_REPLY_CHARS:,} characters",
            )
        asked: tuple[ToolCall, ...] = ()
        if finish == "stop" and not stops.stopped and (calls or server_finish == "tool_calls"):
            # Calls, or a server that says so without any: passed on as they are (the chat tells
            # the model a tool it does not have does not exist). A reply cut or cancelled: none.
            finish, asked = "tool_calls", calls.calls()
        t_end = time.perf_counter()
        text = "".join(parts)
        fill_stats(
            stats,
            self.count_tokens(messages),
            deltas,
            t_start,
            t_first,
            t_last,
            t_end,
            usage,
            timings,
        )
        # Without thinking text the count is not known: thinking_tokens stays 0.
        thought = reasoning_tokens(usage) if reply.thinking else None
        if thought:
            stats.thinking_tokens = (
                min(thought, stats.completion_tokens) if stats.completion_tokens else thought
            )
        stats.finish_reason = finish
        if params.output_format is not None and finish == "stop" and not stops.stopped:
            check_json_reply(self.server, text)
        notice = lens.notice(deltas) if lens is not None else None
        if notice is not None:
            yield notice
        yield GenerationDone(
            text=text,
            stats=stats,
            params=params,
            thinking="".join(reply.thinking),
            bound=bound if finish == "length" else "",
            tool_calls=asked,
        )

    def _cut(self, exc: BaseException | None, partial: str, reader: EventStream) -> VibechatError:
        """A stream that ended before the reply did: StreamInterrupted with the text so far."""
        if reader.exchange.expired.is_set():
            why = f"{self.server} did not finish the reply within {self.options.deadline:g} s"
            fix = (
                "that is the deadline for one reply; ask for a shorter one (--max-tokens), or "
                "check the server"
            )
        elif isinstance(exc, TimeoutError):
            sent = "only keep-alive comments" if reader.comments else "nothing"
            why = f"{self.server} sent {sent} for {self.options.timeout:g} s"
            fix = (
                "the server may be stuck or overloaded (raise timeout, VIBECHAT_TIMEOUT, for a "
                "slow one)"
            )
        elif isinstance(exc, TooMuch):
            why = f"{self.server} sent {exc}"
            fix = "is it an OpenAI-compatible server? See its log"
        elif isinstance(exc, ValueError):  # not JSON
            why = (
                f"{self.server} sent something vibechat could not read "
                f"({self._http.clean(str(exc), 120)})"
            )
            fix = "is it an OpenAI-compatible server? See its log"
        else:
            why = f"the connection to {self.server} dropped"
            fix = "check the server (its log), then try again"
        if partial:
            return _kept(f"{why} mid-reply", fix, partial)
        return GenerationError(f"{why} before the reply began; {fix}.")

    def _too_many(self, exc: ToolCallBound, partial: str) -> VibechatError:
        """A reply whose tool calls went past a bound: one line, the text so far kept."""
        why = f"{self.server} sent {exc}, more than vibechat takes"
        fix = "the model may be looping: ask again, or offer fewer tools"
        if partial:
            return _kept(why, fix, partial)
        return RemoteServerError(f"{why}; {fix}.")

    def _server_failed(self, chunk: dict[str, Any], partial: str) -> VibechatError:
        message = (
            f"{self.server} failed mid-reply: "
            f"{self._http.clean(message_of(chunk)) or 'no reason given'}"
        )
        if partial:
            return StreamInterrupted(
                f"{message}; the partial reply is kept, marked interrupted.", partial
            )
        return RemoteServerError(f"{message}.")


def make_openai_backend(
    base_url: str,
    model: str | None,
    *,
    api_key_env: str | None = None,
    timeout: float | None = None,
    environ: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> OpenAICompatibleBackend:
    """A backend for ``base_url`` with the API key from the environment (see
    ``resolve_api_key``); nothing is contacted until ``load()``. ``deadline`` (seconds for
    one whole request) is at least ``timeout``."""
    key, variable = resolve_api_key(api_key_env, environ, base_url)
    return OpenAICompatibleBackend(
        OpenAIOptions(
            base_url=base_url,
            model=model or None,
            api_key=key,
            api_key_variable=variable,
            withheld_key_variable=withheld_key(key, environ),
            timeout=float(timeout) if timeout is not None else DEFAULT_TIMEOUT,
            deadline=max(
                float(deadline) if deadline is not None else DEFAULT_DEADLINE,
                float(timeout) if timeout is not None else 0.0,
            ),
        )
    )


def _kept(why: str, fix: str, partial: str) -> StreamInterrupted:
    """A reply cut by ``why``: its text so far kept (marked interrupted), and ``fix``."""
    return StreamInterrupted(
        f"{why}; the partial reply is kept, marked interrupted. {fix[0].upper()}{fix[1:]}.", partial
    )
