"""A tiny OpenAI-compatible server on 127.0.0.1 (stdlib http.server in a thread) for the
cases a real server will not produce on demand: refused keys, missing models, server
errors, a stream cut mid-reply, a server that stalls, a server that refuses extra
fields. It records every request it gets.

``mode`` picks what ``POST /v1/chat/completions`` does:

- ``ok``: streams ``reply`` word by word (chunked SSE), then usage (and llama-server
  ``timings`` when ``timings`` is set) and ``[DONE]``;
- ``plain``: the same without usage or timings (stats are measured client-side);
- ``cut``: streams the first ``cut_after`` words, then closes the connection mid-body;
- ``stall``: streams ``cut_after`` words, then sends nothing until released;
- ``stall_headers``: reads the request and answers nothing until released;
- ``error_event``: a few words, then llama-server's ``error: {...}`` event;
- ``garbage``: a few words, then an event that is not JSON;
- ``status``: answers ``status`` with ``error_body``.

Misbehaving servers (each bounded here, so a client that does not stop still ends: after
``endless_max`` sends or ``endless_bytes`` bytes, far more than socket buffers hold, the
stream ends normally; ``client_gone`` is set when the client closes the connection first):

- ``endless``: content pieces ("tok0 ", "tok1 ", ...) without end, ignoring ``max_tokens``,
  every ``interval`` seconds;
- ``empty_events``: after ``cut_after`` words, events with an empty delta without end;
- ``endless_line``: after ``cut_after`` words, a ``data:`` line that never ends;
- ``no_blank``: after ``cut_after`` words, ``data:`` lines with no blank line between them;
- ``pings``: after ``cut_after`` words, only ``: ping`` comments, every ``interval`` seconds;
- ``raw_event``: after ``cut_after`` words, ``raw_event`` as one event's data.

Tool calls (as llama-server, vLLM and Ollama stream them): when ``tool_deltas`` is set, a
request whose last message is not a ``tool`` message is answered with ``tool_text`` (content
pieces), then one chunk for each entry of ``tool_deltas`` (that chunk's ``delta.tool_calls``:
``fragments()`` splits a call into pieces, ``whole_call()`` sends it in one, its arguments an
object), then ``tool_finish``; the next request (the calls' results in ``tool`` messages)
is answered with ``reply`` as usual. With ``tool_stall`` set, the calls are followed by one
more content piece, " ...", then nothing until released (a reply cancelled mid-call: that
piece tells the client the calls have been read).

Images: a request records its messages as sent (content parts included: ``image_parts()``
lists a body's images); with ``refuse_images`` set, a request carrying an ``image_url`` part
is answered as llama-server without ``--mmproj`` answers it (HTTP 500, "image input is not
supported"), text-only requests as usual.

Logprobs: a request with ``logprobs: true`` gets, with each content piece, OpenAI's
``choices[0].logprobs`` (``piece_logprobs``: the piece at probability 0.6, then
``ALTERNATIVES``: an escape sequence and half a character among them), cut to its
``top_logprobs``; with ``logprobs`` False the stub ignores the request, as a server without them.

``pieces`` replaces the words of ``reply`` with exact content pieces; ``final_fields`` is
merged into the last (usage) event; ``running_usage`` adds a running ``usage`` to every
content chunk (that many tokens a piece); ``models_body`` replaces the ``/v1/models`` answer.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A client that goes away is normal here (a stopped reply): no traceback on stderr.
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], _DISCONNECTS):
            super().handle_error(request, client_address)


class StubServer:
    def backend(self, model: str = "stub-small"):
        """vibechat's remote backend pointed at this server."""
        from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
        from vibechat.engine.remote.options import OpenAIOptions

        return OpenAICompatibleBackend(OpenAIOptions(base_url=self.url, model=model))

    def __init__(self) -> None:
        self.models = ["stub-small", "stub-large"]
        self.mode = "ok"
        self.reply = "Hello there, this is the stub speaking."
        self.cut_after = 3
        self.status = 500
        self.error_body: Any = {"error": {"message": "CUDA out of memory", "type": "server_error"}}
        self.api_key: str | None = None  # when set, requests need "Authorization: Bearer KEY"
        self.auth_message = "Invalid API key"
        self.reject_extras = False  # 400 when the body has top_k (a strict server)
        self.timings = False
        self.model_fields: dict[
            str, Any
        ] = {}  # added to every /v1/models entry (llama-server's "meta")
        self.finish_delta: Any = {}  # the "delta" of the chunk that carries finish_reason
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        self.pieces: list[str] | None = None
        self.reasoning: list[str] = []  # sent first, as delta[reasoning_field] (a reasoning model)
        self.reasoning_field = "reasoning_content"
        self.running_usage = (
            0  # when set, every content chunk carries usage: this many tokens a piece
        )
        self.final_fields: dict[str, Any] = {}
        self.models_body: str | None = None
        self.raw_event = b"{}"
        self.interval = 0.0
        self.endless_max = 1_000_000  # events, lines or pings a misbehaving mode sends at most
        self.endless_bytes = 24 << 20  # and bytes
        self.sent = 0  # events, lines or pings a misbehaving mode sent
        self.client_gone = (
            threading.Event()
        )  # the client closed a misbehaving stream before its end
        self.release = threading.Event()
        self.tool_deltas: list[list[dict[str, Any]]] = []  # each: one chunk's delta.tool_calls
        self.tool_text: list[str] = []  # content pieces sent before the calls
        self.tool_finish: str | None = "tool_calls"  # Ollama before 0.5 said "stop"
        self.tool_stall = False
        self.refuse_images = (
            False  # a server whose model takes no images (llama-server without --mmproj)
        )
        # Asked for logprobs (logprobs: true), each content chunk carries them
        # (piece_logprobs); False: a server that ignores the request.
        self.logprobs = True
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def last_body(self) -> dict[str, Any]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")][-1]["body"]

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, data: Any) -> None:
                raw = (data if isinstance(data, str) else json.dumps(data)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _authorised(self) -> bool:
                if (
                    stub.api_key is None
                    or self.headers.get("Authorization") == f"Bearer {stub.api_key}"
                ):
                    return True
                self._json(
                    401, {"error": {"message": stub.auth_message, "type": "invalid_request_error"}}
                )
                return False

            def do_GET(self) -> None:
                stub.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": None}
                )
                if not self._authorised():
                    return
                if self.path.split("?")[0] == "/v1/models" and stub.models_body is not None:
                    self._json(200, stub.models_body)
                elif self.path.split("?")[0] == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": m,
                                    "object": "model",
                                    "owned_by": "stub",
                                    **stub.model_fields,
                                }
                                for m in stub.models
                            ],
                        },
                    )
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                if not self._authorised():
                    return
                if self.path.split("?")[0] != "/v1/chat/completions":
                    self._json(404, {"detail": "Not Found"})
                    return
                if body.get("model") not in stub.models:
                    self._json(
                        404,
                        {
                            "error": {
                                "message": f"model '{body.get('model')}' not found",
                                "type": "not_found_error",
                            }
                        },
                    )
                    return
                if stub.reject_extras and "top_k" in body:
                    self._json(
                        400,
                        {
                            "error": {
                                "message": "Unrecognized request argument supplied: top_k",
                                "type": "invalid_request_error",
                            }
                        },
                    )
                    return
                if stub.refuse_images and image_parts(body):
                    self._json(
                        500,
                        {
                            "error": {
                                "code": 500,
                                "type": "server_error",
                                "message": (
                                    "image input is not supported - hint: if this is "
                                    "unexpected, you may need to "
                                    "provide the mmproj"
                                ),
                            }
                        },
                    )
                    return
                mode = stub.mode
                if mode == "status":
                    self._json(stub.status, stub.error_body)
                    return
                if mode == "stall_headers":
                    stub.release.wait(30)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                words = stub.reply.split(" ")
                self._event(
                    {
                        "choices": [
                            {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
                        ]
                    }
                )
                self.wfile.write(b"6\r\n: ping\r\n")  # a keep-alive comment, split across chunks
                self.wfile.write(b"1\r\n\n\r\n")
                messages = body.get("messages") or [{}]
                if stub.tool_deltas and messages[-1].get("role") != "tool":
                    for piece in stub.tool_text:
                        self._event(
                            {
                                "choices": [
                                    {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                                ]
                            }
                        )
                    for calls in stub.tool_deltas:
                        self._event(
                            {
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"content": None, "tool_calls": calls},
                                        "finish_reason": None,
                                    }
                                ]
                            }
                        )
                    if stub.tool_stall:
                        self._event(
                            {
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"content": " ..."},
                                        "finish_reason": None,
                                    }
                                ]
                            }
                        )
                        stub.release.wait(30)
                        return
                    self._event(
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": stub.tool_finish}]}
                    )
                    self._event(
                        {
                            "choices": [],
                            "usage": {
                                "prompt_tokens": 30,
                                "completion_tokens": 12,
                                "total_tokens": 42,
                            },
                        }
                    )
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                    return
                if mode == "endless":
                    self._misbehave(
                        lambda i: self._event(
                            {
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"content": f"tok{i} "},
                                        "finish_reason": None,
                                    }
                                ]
                            }
                        )
                    )
                    return
                if stub.pieces is not None:
                    words = [
                        p[1:] if i and p.startswith(" ") else p for i, p in enumerate(stub.pieces)
                    ]
                for thought in stub.reasoning:
                    self._event(
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "delta": {stub.reasoning_field: thought, "content": None},
                                    "finish_reason": None,
                                }
                            ]
                        }
                    )
                max_tokens = body.get("max_tokens") or len(words)
                for i, word in enumerate(words[:max_tokens]):
                    if mode in MISBEHAVING and i == stub.cut_after:
                        self._misbehave(MISBEHAVING[mode].__get__(self))
                        return
                    if mode == "garbage" and i == stub.cut_after:
                        self._chunk(b"data: {this is not json\n\n")
                    if mode in ("cut", "stall", "error_event") and i == stub.cut_after:
                        if mode == "cut":
                            self.wfile.write(b'40\r\ndata: {"choi')  # half a chunk, then gone
                            self.wfile.flush()
                            self.close_connection = True
                            return
                        if mode == "error_event":
                            self._chunk(
                                b'error: {"code": 500, "message": "the slot was killed", '
                                b'"type": "server_error"}\n\n'
                            )
                            self._chunk(b"")
                            return
                        self.wfile.flush()
                        stub.release.wait(30)
                        return
                    piece = word if i == 0 else " " + word
                    if stub.pieces is not None:
                        piece = stub.pieces[i]
                    event: dict[str, Any] = {
                        "choices": [
                            {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                        ]
                    }
                    if stub.running_usage:
                        event["usage"] = {"completion_tokens": (i + 1) * stub.running_usage}
                    if body.get("logprobs") and stub.logprobs:
                        event["choices"][0]["logprobs"] = piece_logprobs(
                            piece, int(body.get("top_logprobs") or 0)
                        )
                    self._event(event)
                    time.sleep(0.002)
                finish = "length" if max_tokens < len(words) else "stop"
                self._event(
                    {"choices": [{"index": 0, "delta": stub.finish_delta, "finish_reason": finish}]}
                )
                if mode != "plain":
                    final: dict[str, Any] = {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 21,
                            "completion_tokens": min(max_tokens, len(words)),
                            "total_tokens": 0,
                        },
                    }
                    if stub.timings:
                        final["timings"] = {
                            "prompt_n": 5,
                            "cache_n": 16,
                            "prompt_ms": 12.5,
                            "predicted_n": 7,
                            "predicted_ms": 100.0,
                            "predicted_per_second": 70.0,
                        }
                    final.update(stub.final_fields)
                    self._event(final)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _misbehave(self, send) -> None:
                """Call ``send(i)`` until ``endless_max`` calls or ``endless_bytes`` bytes, the
                client going away, or the stub stopping; then end the stream as a normal one
                ends."""
                self.written = 0
                try:
                    for i in range(stub.endless_max):
                        if stub.release.is_set() or self.written >= stub.endless_bytes:
                            break
                        send(i)
                        stub.sent = i + 1
                        if stub.interval:
                            time.sleep(stub.interval)
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                except _DISCONNECTS:
                    stub.client_gone.set()
                    self.close_connection = True

            def _empty_event(self, i: int) -> None:
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": None}]})

            def _endless_line(self, i: int) -> None:
                if i == 0:
                    self._chunk(b'data: {"choices": [')
                self._chunk(b" " * 65536)

            def _data_line(self, i: int) -> None:
                line = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n'
                self._chunk(line * 512)  # 512 lines a chunk, never a blank one

            def _ping(self, i: int) -> None:
                self._chunk(b": ping\n\n")

            def _raw_event(self, i: int) -> None:
                if i == 0:
                    self._chunk(b"data: " + stub.raw_event + b"\n\n")
                else:
                    self.written = stub.endless_bytes  # one event, then the end

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                self.written = getattr(self, "written", 0) + len(data)

            def _event(self, data: dict[str, Any]) -> None:
                self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

        MISBEHAVING = {
            "empty_events": Handler._empty_event,
            "endless_line": Handler._endless_line,
            "no_blank": Handler._data_line,
            "pings": Handler._ping,
            "raw_event": Handler._raw_event,
        }
        return Handler


def image_parts(body: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``image_url`` content parts of a request body's messages, in order."""
    parts: list[dict[str, Any]] = []
    for message in (body or {}).get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            parts += [
                part
                for part in content
                if isinstance(part, dict) and part.get("type") == "image_url"
            ]
    return parts


def fragments(
    index: int, call_id: str, name: str, arguments: str, size: int = 5
) -> list[list[dict[str, Any]]]:
    """One call as llama-server and vLLM stream it: the id and the name first, then the
    arguments in ``size``-character fragments (each list: one chunk's ``delta.tool_calls``)."""
    chunks = [
        [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    ]
    chunks += [
        [{"index": index, "function": {"arguments": arguments[i : i + size]}}]
        for i in range(0, len(arguments), size)
    ]
    return chunks


def whole_call(
    index: int | None, call_id: str, name: str, arguments: dict[str, Any]
) -> list[dict[str, Any]]:
    """One call in one piece, its arguments an object (as some servers send them); ``index``
    None leaves it out."""
    call: dict[str, Any] = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    if index is not None:
        call["index"] = index
    return [call]


# A content piece's alternatives (piece_logprobs): a word, an escape sequence, half a character.
ALTERNATIVES = [
    (" maybe", list(b" maybe"), math.log(0.2)),
    ("\x1b[2J", list(b"\x1b[2J"), math.log(0.1)),
    ("\ufffd", [0xE2, 0x82], math.log(0.05)),
    (" so", list(b" so"), math.log(0.01)),
]


def piece_logprobs(piece: str, top: int) -> dict[str, Any]:
    """A content piece's ``logprobs`` as OpenAI streams them: the piece as one token at
    probability 0.6, its ``top`` candidates: itself, then ``ALTERNATIVES``."""
    chosen = {"token": piece, "logprob": math.log(0.6), "bytes": list(piece.encode())}
    others = [{"token": t, "logprob": lp, "bytes": b} for t, b, lp in ALTERNATIVES]
    return {"content": [{**chosen, "top_logprobs": [chosen, *others][:top]}]}


def refused_url() -> str:
    """A 127.0.0.1 URL nothing listens on (a port just freed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
