"""OpenAICompatibleBackend against a stub server on 127.0.0.1 (tests/openai_stub.py):
the request it sends, the stats it reports, and one clear line for every failure.
The same streaming, cancel and parameter checks against a real server are in
test_openai_server.py."""

from __future__ import annotations

import json
import logging
import math
import threading

import pytest

from conftest import collect as collect_reply
from openai_stub import StubServer, refused_url
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.errors import (
    GenerationError,
    InvalidParameterError,
    RemoteServerError,
    StreamInterrupted,
    VibechatError,
)
from vibechat.engine.remote import openai_backend, sse
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend, make_openai_backend
from vibechat.engine.remote.options import OpenAIOptions, display_url, resolve_api_key
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.server_url import normalize_base_url
from vibechat.engine.turns.backend import Backend, ChatMessage, GenerationDone, TextDelta

HELLO = [ChatMessage("system", "Be brief."), ChatMessage("user", "Say hello.")]
KEY = "sk-test-5ecret-KEY-0123456789"
GREEDY = SamplingParams(temperature=0)


def backend_for(
    stub: StubServer, model: str | None = "stub-small", **kw
) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model=model, **kw))


def collect(backend, messages=HELLO, params=GREEDY):
    """conftest's ``collect``, with this file's usual request."""
    return collect_reply(backend, messages, params)


def test_urls_are_normalised_and_shown_without_credentials():
    assert normalize_base_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert normalize_base_url("HTTP://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080/v1"
    assert normalize_base_url("https://host/openai/v1") == "https://host/openai/v1"
    for bad in ("127.0.0.1:8080", "ftp://x/v1", "", "http://"):
        with pytest.raises(InvalidParameterError, match="http:// or https://"):
            normalize_base_url(bad)
    assert display_url("http://user:pw@127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert display_url("https://host/openai/v1?x=1") == "https://host/openai"


def test_api_key_comes_from_the_named_variable_or_the_defaults():
    env = {"VIBECHAT_API_KEY": "a", "OPENAI_API_KEY": "b", "MINE": "c"}
    assert resolve_api_key(None, env) == ("a", "VIBECHAT_API_KEY")
    assert resolve_api_key(None, {"OPENAI_API_KEY": "b"}) == ("b", "OPENAI_API_KEY")
    assert resolve_api_key(None, {"OPENAI_API_KEY": "b"}, "https://host/v1") == (
        "b",
        "OPENAI_API_KEY",
    )
    # an OpenAI key is not sent in clear text to a plain-http server unless named
    assert resolve_api_key(None, {"OPENAI_API_KEY": "b"}, "http://10.0.0.2:8080/v1") == (
        None,
        "VIBECHAT_API_KEY",
    )
    assert resolve_api_key("OPENAI_API_KEY", {"OPENAI_API_KEY": "b"}, "http://h/v1") == (
        "b",
        "OPENAI_API_KEY",
    )
    assert resolve_api_key(None, env, "http://h/v1") == ("a", "VIBECHAT_API_KEY")
    assert resolve_api_key("MINE", env) == ("c", "MINE")
    assert resolve_api_key(None, {}) == (None, "VIBECHAT_API_KEY")
    with pytest.raises(InvalidParameterError, match="MISSING .*is not set"):
        resolve_api_key("MISSING", env)
    backend = make_openai_backend("http://127.0.0.1:1", "m", environ={"VIBECHAT_API_KEY": KEY})
    assert KEY not in repr(backend.options) and "<set>" in repr(backend.options)


def test_load_checks_the_model_and_describes_it(stub):
    backend = backend_for(stub)
    assert isinstance(backend, Backend)
    info = backend.load()
    assert info.name == "stub-small" and info.backend == "openai"
    assert info.server == f"http://127.0.0.1:{stub.port}"
    assert info.device == f"openai · http://127.0.0.1:{stub.port}"
    assert info.path == f"{stub.url}/models/stub-small"
    assert backend.describe() == info
    assert backend.list_models() == ["stub-small", "stub-large"]
    # No cache to manage on our side.
    backend.reset()
    assert backend.prefill(HELLO) == 0
    assert backend.count_tokens(HELLO) > 0


@pytest.mark.parametrize(
    ("fields", "context", "trained"),
    [
        ({"meta": {"n_ctx": 8192, "n_ctx_train": 32768}}, 8192, 32768),  # llama-server
        ({"max_model_len": 4096}, 4096, None),  # vLLM
        (
            {"meta": None},
            0,
            None,
        ),  # JSON null where llama-server sends an object: the server did not say
    ],
)
def test_the_context_size_comes_from_the_model_list_when_the_server_gives_it(
    stub, fields, context, trained
):
    stub.model_fields = fields
    info = backend_for(stub).load()
    assert (info.context_size, info.trained_context) == (context, trained)


def test_the_only_model_is_used_when_none_is_named(stub):
    stub.models = ["only-one"]
    assert backend_for(stub, model=None).load().name == "only-one"
    stub.models = ["a", "b"]
    with pytest.raises(RemoteServerError, match="several models: choose one with --model .*a, b"):
        backend_for(stub, model=None).load()


def test_streams_deltas_and_sends_every_sampling_parameter(stub):
    backend = backend_for(stub, api_key=KEY)
    params = SamplingParams(
        temperature=0.3,
        top_k=7,
        top_p=0.8,
        min_p=0.1,
        repeat_penalty=1.2,
        max_tokens=50,
        seed=42,
        stop=("zzz",),
    )
    deltas, done = collect(backend, HELLO, params)
    assert len(deltas) > 3 and "".join(deltas) == done.text == stub.reply
    body = stub.last_body
    assert body["model"] == "stub-small" and body["stream"] is True
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["stop"]) == (
        0.3,
        0.8,
        50,
        42,
        ["zzz"],
    )
    assert (body["top_k"], body["min_p"], body["repeat_penalty"], body["repetition_penalty"]) == (
        7,
        0.1,
        1.2,
        1.2,
    )
    assert body["stream_options"] == {"include_usage": True}
    headers = [r["headers"] for r in stub.requests]
    assert all(h.get("Authorization") == f"Bearer {KEY}" for h in headers)
    assert done.params == params and done.stats.seed == 42
    # Stats from the server's usage.
    assert done.stats.prompt_tokens == 21 and done.stats.completion_tokens == len(
        stub.reply.split()
    )
    assert done.stats.finish_reason == "stop"


def test_no_max_tokens_or_stop_means_the_fields_are_left_out_and_a_seed_is_drawn(stub):
    _, done = collect(backend_for(stub), HELLO, SamplingParams())
    body = stub.last_body
    assert "max_tokens" not in body and "stop" not in body
    assert isinstance(body["seed"], int) and body["seed"] == done.stats.seed


def test_auto_sends_nothing_the_servers_default_decides(stub):
    """max_tokens and repeat_penalty "auto" (the defaults): the server's own defaults, which know
    its model; no limit (max_tokens 0) is not sent either; an explicit penalty of 1 (off) is."""
    _, done = collect(backend_for(stub), HELLO, SamplingParams())
    body = stub.last_body
    assert (
        "max_tokens" not in body
        and "repeat_penalty" not in body
        and "repetition_penalty" not in body
    )
    assert body["top_k"] == 40  # the other extra fields still go
    assert (
        done.params.max_tokens is None and done.params.repeat_penalty is None
    )  # auto: the server's
    _, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=0, repeat_penalty=1.0))
    body = stub.last_body
    assert "max_tokens" not in body and (body["repeat_penalty"], body["repetition_penalty"]) == (
        1.0,
        1.0,
    )
    assert done.params.max_tokens is None  # no limit, as it reads once resolved


def test_stats_are_measured_when_the_server_sends_none(stub):
    stub.mode = "plain"
    deltas, done = collect(backend_for(stub))
    stats = done.stats
    assert stats.completion_tokens == len(deltas)  # one delta counted as one token
    assert stats.prompt_tokens == backend_for(stub).count_tokens(HELLO)  # the estimate
    assert stats.ttft_ms > 0 and stats.decode_tokens_per_s > 0


def test_llama_server_timings_are_used(stub):
    stub.timings = True
    _, done = collect(backend_for(stub))
    stats = done.stats
    assert (
        stats.prompt_tokens == 21 and stats.prompt_tokens_evaluated == 5
    )  # 16 came from its cache
    assert stats.prompt_eval_ms == 12.5 and stats.decode_tokens_per_s == 70.0


def test_max_tokens_cut_reports_length(stub):
    _, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=2))
    assert done.text == "Hello there," and done.stats.finish_reason == "length"


def test_a_null_delta_in_the_last_chunk_is_no_text(stub):
    stub.finish_delta = None  # JSON null where an object is expected
    _, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=2))
    assert done.text == "Hello there," and done.stats.finish_reason == "length"


def test_stop_strings_hold_even_when_the_server_ignores_them(stub):
    deltas, done = collect(backend_for(stub), HELLO, SamplingParams(stop=("is the",)))
    assert done.text == "Hello there, this " and "".join(deltas) == done.text
    assert done.stats.finish_reason == "stop"


def test_a_server_that_refuses_the_extra_fields_gets_the_standard_ones(stub):
    stub.reject_extras = True
    backend = backend_for(stub)
    _, done = collect(backend)
    assert done.text == stub.reply
    assert "top_k" not in stub.last_body and "stream_options" not in stub.last_body
    collect(backend)  # remembered: no second refusal
    posts = [r for r in stub.requests if r["path"].endswith("/chat/completions")]
    assert ["top_k" in r["body"] for r in posts] == [True, False, False]


def test_cancel_while_the_server_is_silent_returns_promptly(stub):
    """The read blocks in the socket: cancel() shuts it down (the timeout is far away,
    so only a working cancel ends this stream as cancelled)."""
    stub.mode = "stall"
    backend = backend_for(stub, timeout=120)
    stream = backend.stream_chat(HELLO, SamplingParams())
    seen = []
    for event in stream:
        if isinstance(event, TextDelta):
            seen.append(event.text)
            if len(seen) == 3:
                threading.Timer(0.2, backend.cancel).start()
        elif isinstance(event, GenerationDone):
            done = event
    assert (
        done.stats.finish_reason == "cancelled"
        and done.text == "".join(seen) == "Hello there, this"
    )
    stub.mode = "ok"
    _, after = collect(backend)
    assert after.text == stub.reply and after.stats.finish_reason == "stop"


def test_cancel_while_the_server_evaluates_the_prompt(stub):
    """No answer yet (a long prompt on the server): cancel() ends the wait for the headers."""
    backend = backend_for(stub, timeout=120)
    backend.load()
    stub.mode = "stall_headers"
    timer = threading.Timer(0.3, backend.cancel)
    timer.start()
    events = list(backend.stream_chat(HELLO, SamplingParams()))
    timer.join()
    assert (
        len(events) == 1 and events[0].stats.finish_reason == "cancelled" and events[0].text == ""
    )


# ------------------------------------------------------------------- errors
def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_connection_refused_is_one_clear_line():
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=refused_url(), model="m"))
    with pytest.raises(RemoteServerError) as err:
        backend.load()
    assert "connection refused" in one_line(err.value) and "--base-url" in str(err.value)


def test_401_without_a_key_says_which_variable_to_set(stub):
    stub.api_key = KEY
    with pytest.raises(RemoteServerError) as err:
        backend_for(stub).load()
    assert "needs an API key (HTTP 401: Invalid API key)" in one_line(err.value)
    assert "VIBECHAT_API_KEY" in str(err.value)


def test_openai_api_key_goes_to_a_plain_http_server_only_when_named(stub):
    stub.api_key = KEY
    env = {"OPENAI_API_KEY": KEY}
    with pytest.raises(RemoteServerError) as err:
        make_openai_backend(stub.url, "stub-small", environ=env).load()
    assert "Authorization" not in stub.requests[-1]["headers"]
    message = one_line(err.value)
    assert "OPENAI_API_KEY is set but not sent to a plain-http server" in message
    assert "--api-key-env OPENAI_API_KEY" in message and KEY not in message
    make_openai_backend(stub.url, "stub-small", api_key_env="OPENAI_API_KEY", environ=env).load()
    assert stub.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"


def test_a_wrong_key_is_named_by_its_variable_never_by_its_value(stub, caplog):
    stub.api_key = "the-right-one"
    stub.auth_message = f"Incorrect API key provided: {KEY}"  # some servers echo it back
    caplog.set_level(logging.DEBUG, logger="vibechat")
    backend = backend_for(stub, api_key=KEY, api_key_variable="MY_KEY")
    with pytest.raises(RemoteServerError) as err:
        backend.load()
    message = one_line(err.value)
    assert "refused the API key" in message and "MY_KEY" in message
    assert KEY not in message and KEY not in caplog.text and KEY not in repr(err.value)
    stub.api_key = None
    stub.mode = "status"
    stub.status, stub.error_body = 500, {"error": f"boom {KEY}"}
    backend.load()
    with pytest.raises(RemoteServerError) as err:
        collect(backend)
    assert KEY not in str(err.value) and "boom ***" in str(err.value)


def test_an_unknown_model_lists_the_ones_the_server_has(stub):
    with pytest.raises(RemoteServerError) as err:
        backend_for(stub, model="gpt-9").load()
    assert (
        "has no model 'gpt-9'; it offers stub-small, stub-large (choose with --model)"
        in one_line(err.value)
    )
    # A model that disappears between load and the request: the 404 names the others too.
    backend = backend_for(stub)
    backend.load()
    stub.models = ["stub-large"]
    with pytest.raises(RemoteServerError, match="has no model 'stub-small'; it offers stub-large"):
        collect(backend)


def test_a_base_url_that_is_not_the_api_root(stub):
    backend = OpenAICompatibleBackend(
        OpenAIOptions(base_url=stub.url.replace("/v1", "/api"), model="m")
    )
    with pytest.raises(RemoteServerError) as err:
        backend.load()
    assert "HTTP 404" in one_line(err.value) and "API root" in str(err.value)


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (
            500,
            {"error": {"message": "CUDA out of memory", "type": "server_error"}},
            "failed (HTTP 500: CUDA out of memory); see the server's log",
        ),
        (
            503,
            {"detail": "Service is not available"},
            "failed (HTTP 503: Service is not available)",
        ),
        (502, "<html><body>Bad gateway</body></html>", "failed (HTTP 502)"),
        (
            400,
            {"object": "error", "message": "This model's maximum context length is 2048 tokens"},
            "rejected the request (HTTP 400: This model's maximum context length is 2048 tokens)",
        ),
        (429, {"error": "slow down"}, "rate-limiting requests (HTTP 429: slow down)"),
    ],
)
def test_server_errors_carry_the_servers_message(stub, status, body, needle):
    backend = backend_for(stub)
    backend.load()
    stub.mode, stub.status, stub.error_body = "status", status, body
    with pytest.raises(RemoteServerError) as err:
        collect(backend)
    assert needle in one_line(err.value)


def test_a_servers_message_is_cleaned_before_it_is_shown(stub):
    backend = backend_for(stub)
    backend.load()
    stub.mode, stub.error_body = (
        "status",
        {"error": {"message": "bad\x1b]52;c;cHduZWQ=\x07\nthing " + "x" * 900}},
    )
    with pytest.raises(RemoteServerError) as err:
        collect(backend)
    message = one_line(err.value)
    assert "\x1b" not in message and "\x07" not in message and len(message) < 500


def test_a_stream_cut_mid_reply_keeps_the_partial_text(stub):
    stub.mode = "cut"
    backend = backend_for(stub)
    deltas = []
    with pytest.raises(StreamInterrupted) as err:
        for event in backend.stream_chat(HELLO, SamplingParams()):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
    assert err.value.partial == "".join(deltas) == "Hello there, this"
    assert isinstance(err.value, GenerationError)
    assert "dropped mid-reply; the partial reply is kept, marked interrupted" in one_line(err.value)
    stub.mode = "ok"
    assert collect(backend)[1].text == stub.reply  # the next request works


def test_a_server_error_event_mid_stream(stub):
    stub.mode = "error_event"
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub))
    assert "failed mid-reply: the slot was killed" in one_line(err.value)
    assert err.value.partial == "Hello there, this"


def test_an_unreadable_event_mid_stream(stub):
    stub.mode = "garbage"
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub))
    assert "sent something vibechat could not read" in one_line(err.value)
    assert err.value.partial == "Hello there, this"


def test_a_server_that_stalls_mid_reply_times_out_with_the_partial_text(stub):
    stub.mode = "stall"
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub, timeout=1))
    assert "sent nothing for 1 s mid-reply" in one_line(err.value) and "VIBECHAT_TIMEOUT" in str(
        err.value
    )
    assert err.value.partial == "Hello there, this"


@pytest.mark.parametrize(
    "limits, said",
    [
        ({"timeout": 1}, "did not answer within 1 s"),  # the timeout
        (
            {"timeout": 120, "deadline": 1},
            "did not finish the reply within 1 s",
        ),  # the deadline covers it too
    ],
)
def test_a_server_that_never_sends_its_headers_is_given_up(stub, limits, said):
    backend = backend_for(stub, **limits)
    backend.load()
    stub.mode = "stall_headers"
    with pytest.raises(RemoteServerError) as err:
        collect(backend)
    assert said in one_line(err.value)


def test_every_failure_is_a_vibechat_error(stub):
    """Whatever goes wrong, callers see a VibechatError (one line), never a raw socket error."""
    for mode in ("cut", "stall", "error_event", "garbage", "status", "stall_headers"):
        stub.mode = mode
        with pytest.raises(VibechatError):
            collect(backend_for(stub, timeout=1))


def test_chatlog_saves_an_interrupted_reply_with_its_partial_text_and_reason():
    with History() as history:
        chat = ChatLog(
            Conversation(), history, model="stub-small", model_path="http://x/v1/models/stub-small"
        )
        chat.add_user("Say hello.")
        reply = chat.start_reply()
        reply.append("Hello th")
        chat.fail_reply(reply, "the connection dropped mid-reply", partial="Hello th")
        stored = history.get(chat.conversation_id)
    assert [(m.role, m.content, m.status) for m in stored.messages] == [
        ("user", "Say hello.", "complete"),
        ("assistant", "Hello th", "interrupted"),
    ]
    assert stored.messages[1].error == "the connection dropped mid-reply"
    assert stored.messages[1].in_context  # kept as written, like a stopped reply
    assert chat.conversation.turns[-1] == ChatMessage("assistant", "Hello th")


# ------------------------------------------------- a server that misbehaves
# Everything a server sends is untrusted: every loop over it is bounded (issue 13).
def test_lone_surrogates_from_the_server_never_reach_the_app(stub):
    """JSON's \\ud800 escapes decode to lone surrogates, which crashed `vibechat run`
    (UnicodeEncodeError) and cannot be saved or printed."""
    stub.reply = "Hi \ud800 there \udfff!"
    deltas, done = collect(backend_for(stub))
    assert done.text == "".join(deltas) == "Hi \ufffd there \ufffd!"
    json.dumps(done.text, ensure_ascii=False).encode("utf-8")
    # A pair split between two pieces (a UTF-16 string sliced by a JavaScript server) is joined.
    stub.pieces = ["A ", "\ud83d", "\ude00", " B \ud83d"]
    deltas, done = collect(backend_for(stub))
    assert done.text == "".join(deltas) == "A \U0001f600 B \ufffd"
    # Model ids that are not printable one-line text are left out; error messages are cleaned.
    stub.models = ["stub-small", "bad\ud800id", "esc\x1b]0;t\x07", "x" * 300]
    backend = backend_for(stub)
    assert backend.list_models() == ["stub-small"]
    backend.load()
    stub.mode, stub.status, stub.error_body = "status", 500, {"error": "boom \ud800"}
    with pytest.raises(RemoteServerError) as err:
        collect(backend)
    one_line(err.value).encode("utf-8")
    assert "boom \ufffd" in str(err.value)


def test_max_tokens_holds_even_when_the_server_ignores_it(stub):
    """`run -n 5` against an endless stream printed for 30 s: five pieces are kept, the
    sixth is not shown, and the connection is closed (the server sees the client go)."""
    stub.mode = "endless"
    deltas, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=5))
    assert deltas == [f"tok{i} " for i in range(5)] and done.text == "".join(deltas)
    assert done.stats.finish_reason == "length"
    assert stub.client_gone.wait(10) and stub.sent < stub.endless_max


def test_a_server_that_stops_exactly_at_max_tokens_keeps_its_own_finish(stub):
    words = stub.reply.split(" ")
    _, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=len(words)))
    assert done.text == stub.reply and done.stats.finish_reason == "stop"
    assert done.stats.completion_tokens == len(words)  # the usage after the limit was still read


def test_max_tokens_as_the_server_counts_them(stub):
    """A server whose chunks carry a running usage (vLLM's continuous usage stats), two
    tokens a chunk: its own count past max_tokens ends the reply there."""
    stub.pieces = ["a b", " c d", " e f", " g h"]
    stub.reply = "a b c d e f g h"
    stub.running_usage = 2  # tokens a piece
    _, done = collect(backend_for(stub), HELLO, SamplingParams(max_tokens=4))
    assert done.text == "a b c d" and done.stats.finish_reason == "length"


def test_the_reply_is_capped_in_size_and_ends_as_length(stub, monkeypatch):
    monkeypatch.setattr(openai_backend, "MAX_REPLY_CHARS", 100)
    stub.mode = "endless"
    deltas, done = collect(backend_for(stub))
    assert (
        len(done.text) == 100
        and done.text == "".join(deltas)
        and done.text.startswith("tok0 tok1 ")
    )
    assert done.stats.finish_reason == "length"
    assert stub.client_gone.wait(10)


@pytest.mark.parametrize("mode", ["endless_line", "no_blank"])
def test_an_event_without_end_is_an_error_after_a_bounded_read(stub, mode):
    """A data line that never ends, or data lines with no blank line between them (3.7 GB
    in 10 s before): one event is at most MAX_EVENT bytes, and the client stops reading."""
    stub.mode = mode
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub))
    message = one_line(err.value)
    assert (
        "a line longer than 1 MB" if mode == "endless_line" else "an event larger than 1 MB"
    ) in message
    assert err.value.partial == "Hello there, this"
    assert stub.client_gone.wait(10)  # it stopped reading long before the 24 MB the stub had for it


def test_the_whole_answer_and_the_number_of_events_are_bounded(stub, monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENTS", 50)
    stub.mode = "empty_events"
    with pytest.raises(StreamInterrupted, match="more than 50 events in one answer"):
        collect(backend_for(stub))
    assert stub.client_gone.wait(10)
    monkeypatch.setattr(sse, "MAX_STREAM_BYTES", 4096)
    stub.mode, stub.client_gone = "pings", threading.Event()
    with pytest.raises(StreamInterrupted, match="more than 4,096 bytes in one answer"):
        collect(backend_for(stub))
    assert stub.client_gone.wait(10)


def test_keep_alive_comments_do_not_keep_a_silent_server_open(stub):
    """`: ping` every 10 ms, never an event: the timeout (no event for 1 s) still ends it."""
    stub.mode, stub.interval, stub.endless_max = "pings", 0.01, 1000
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub, timeout=1))
    assert "sent only keep-alive comments for 1 s mid-reply" in one_line(err.value)
    assert err.value.partial == "Hello there, this"
    assert stub.client_gone.wait(10)


@pytest.mark.parametrize("mode", ["endless", "pings"])
def test_a_reply_that_outlives_the_deadline_is_cut_with_its_text(stub, mode):
    """A server that keeps sending (text, or comments) past the deadline: the reply ends
    there, whatever arrives, and the text received is kept."""
    stub.mode, stub.interval, stub.endless_max = mode, 0.01, 1000
    with pytest.raises(StreamInterrupted) as err:
        collect(backend_for(stub, timeout=120, deadline=1))
    assert "did not finish the reply within 1 s mid-reply" in one_line(err.value)
    assert err.value.partial.startswith("tok0 tok1 " if mode == "endless" else "Hello there, this")
    assert stub.client_gone.wait(10)


def test_json_nested_too_deeply_is_unreadable_not_a_crash(stub):
    """json.loads raises RecursionError on deep nesting: not a traceback, in an event, an
    error body or the model list."""
    stub.mode, stub.raw_event = "raw_event", b"[" * 100_000
    with pytest.raises(StreamInterrupted, match="could not read .*nested too deeply"):
        collect(backend_for(stub))
    backend = backend_for(stub)
    backend.load()
    stub.mode, stub.status, stub.error_body = "status", 500, "[" * 60_000
    with pytest.raises(RemoteServerError, match=r"failed \(HTTP 500"):
        collect(backend)
    stub.models_body = '{"data": ' + "[" * 100_000
    with pytest.raises(RemoteServerError, match="something other than JSON"):
        backend_for(stub).list_models()


def test_numbers_from_the_server_are_used_only_when_sane(stub):
    stub.timings = True
    stub.final_fields = {
        "usage": {"prompt_tokens": -3, "completion_tokens": 10**30},
        "timings": {
            "prompt_ms": float("nan"),
            "predicted_ms": float("inf"),
            "predicted_per_second": -1.0,
            "prompt_n": "5",
        },
    }
    stub.model_fields = {"max_model_len": 10**30, "meta": {"n_ctx_train": -1}}
    backend = backend_for(stub)
    info = backend.load()
    assert info.context_size == 0 and info.trained_context is None
    _, done = collect(backend)
    stats = done.stats
    assert stats.completion_tokens == len(stub.reply.split())  # counted here instead
    assert all(
        math.isfinite(v) and v >= 0
        for v in (stats.prompt_eval_ms, stats.decode_ms, stats.decode_tokens_per_s)
    )
    json.dumps(done.stats.__dict__, allow_nan=False)


def test_a_thinking_reply_cut_at_the_size_bound_says_which_bound(stub, monkeypatch):
    """Issue 25: a reply that opens <think> and never closes it, cut at MAX_REPLY_CHARS: no
    answer, finish_reason length, and ``bound`` names vibechat's bound (the front ends say it)."""
    monkeypatch.setattr(openai_backend, "MAX_REPLY_CHARS", 100)
    stub.pieces = ["<think>", *["mull " * 10] * 20]
    deltas, done = collect(backend_for(stub))
    assert deltas == [] and done.text == "" and done.thinking.startswith("mull mull")
    assert done.stats.finish_reason == "length"
    assert done.bound == "vibechat's bound of 100 characters for a server's reply"
    stub.pieces = ["Short", " answer."]  # not cut: no bound
    _, done = collect(backend_for(stub))
    assert (done.text, done.bound, done.stats.finish_reason) == ("Short answer.", "", "stop")
