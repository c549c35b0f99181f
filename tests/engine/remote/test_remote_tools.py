"""Tool calls with an OpenAI-compatible server (engine/remote: request.py, tool_stream.py,
openai_backend.py) against the stub server on 127.0.0.1 (tests/openai_stub.py), which streams
``tool_calls`` as llama-server and vLLM do (fragments) and as Ollama does (a whole call in one
chunk, its arguments an object): what the request offers, the calls put together, the request
that carries their results, and the bounds."""

from __future__ import annotations

import json
import threading

import pytest

from conftest import collect
from openai_stub import StubServer, fragments, whole_call
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.tool_turns import answer_with_tools
from vibechat.engine.errors import InvalidParameterError, RemoteServerError, StreamInterrupted
from vibechat.engine.remote.tool_stream import MAX_TOOL_CALLS
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta
from vibechat.engine.turns.tool_calls import MAX_ARGUMENTS_CHARS, ToolCall, ToolSpec

ASK = [
    ChatMessage("system", "Use the tools."),
    ChatMessage("user", "Weather in Paris, and the time?"),
]
WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    server="meteo",
    tool="weather",
)
CLOCK = ToolSpec(
    "get_time",
    "The time in a time zone",
    {"type": "object", "properties": {"tz": {"type": "string"}}},
)
PARAMS = SamplingParams(temperature=0)


def reply(backend, messages=ASK, tools=(WEATHER, CLOCK), tool_choice="auto"):
    """The text of one reply and its final event."""
    texts, done = collect(backend, messages, PARAMS, tools=tools, tool_choice=tool_choice)
    return "".join(texts), done


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_the_request_offers_the_tools_and_the_choice(stub: StubServer, choice: str):
    reply(stub.backend(), tool_choice=choice)
    body = stub.last_body
    assert body["tools"] == [WEATHER.to_openai(), CLOCK.to_openai()]
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tool_choice"] == choice


def test_tool_choice_none_offers_no_tools_at_all(stub: StubServer):
    text, done = reply(stub.backend(), tool_choice="none")
    assert "tools" not in stub.last_body and "tool_choice" not in stub.last_body
    assert text == stub.reply and done.finish_reason == "stop" and done.tool_calls == ()


def test_an_unknown_tool_choice_is_one_clear_line(stub: StubServer):
    with pytest.raises(
        InvalidParameterError, match="tool_choice must be one of auto, none, required"
    ):
        reply(stub.backend(), tool_choice="always")


def test_streamed_fragments_become_calls_after_the_replys_text(stub: StubServer):
    weather, clock = '{"city": "Paris", "unit": "celsius"}', '{"tz": "Europe/Paris"}'
    stub.tool_text = ["Let me ", "check."]
    stub.tool_deltas = fragments(0, "call_w", "get_weather", weather, size=4) + fragments(
        1, "call_t", "get_time", clock
    )
    text, done = reply(stub.backend())
    assert text == done.text == "Let me check."
    assert done.tool_calls == (
        ToolCall("call_w", "get_weather", weather),
        ToolCall("call_t", "get_time", clock),
    )
    assert done.tool_calls[0].parsed_arguments() == {"city": "Paris", "unit": "celsius"}
    assert done.finish_reason == done.stats.finish_reason == "tool_calls"
    assert done.stats.completion_tokens == 12  # the server's usage


def test_a_whole_call_in_one_chunk_with_object_arguments(stub: StubServer):
    """Ollama's shape: a whole call in one chunk; and arguments sent as an object, and
    calls without an index (each with its own id), are taken too."""
    stub.tool_deltas = [
        whole_call(0, "call_1", "get_weather", {"city": "Zürich"}),
        whole_call(None, "call_2", "get_time", {"tz": "UTC"}),
        whole_call(None, "call_3", "get_time", {"tz": "CET"}),
    ]
    text, done = reply(stub.backend())
    assert text == "" and done.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.parsed_arguments()) for c in done.tool_calls] == [
        ("call_1", "get_weather", {"city": "Zürich"}),
        ("call_2", "get_time", {"tz": "UTC"}),
        ("call_3", "get_time", {"tz": "CET"}),
    ]


def test_a_call_whose_id_and_name_come_again_is_one_call(stub: StubServer):
    """llama-server sends the id and the name again when it settles on another id for a call."""
    stub.tool_deltas = [
        [
            {
                "index": 0,
                "id": "a1",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{"},
            }
        ],
        [
            {
                "index": 0,
                "id": "a2",
                "type": "function",
                "function": {"name": "get_time", "arguments": ""},
            }
        ],
        [{"index": 0, "function": {"arguments": '"tz": "UTC"}'}}],
    ]
    _, done = reply(stub.backend())
    assert done.tool_calls == (ToolCall("a2", "get_time", '{"tz": "UTC"}'),)


def test_ollamas_stop_finish_with_calls_is_still_a_tool_call_finish(stub: StubServer):
    stub.tool_finish = "stop"
    stub.tool_deltas = [whole_call(0, "c", "get_time", {})]
    _, done = reply(stub.backend())
    assert done.finish_reason == "tool_calls" and [c.name for c in done.tool_calls] == ["get_time"]


def test_a_tool_calls_finish_without_calls_and_unknown_names_are_passed_on(stub: StubServer):
    stub.tool_deltas = [[]]  # a chunk with an empty tool_calls list: no call
    _, done = reply(stub.backend())
    assert done.finish_reason == "tool_calls" and done.tool_calls == ()
    stub.tool_deltas = [whole_call(0, "x", "no_such_tool", {"a": 1})]
    _, done = reply(stub.backend())
    assert [(c.name, c.arguments) for c in done.tool_calls] == [("no_such_tool", '{"a": 1}')]


def test_names_and_ids_are_kept_as_data_and_a_missing_id_is_made_up(stub: StubServer):
    name = "[bold red]x[/]\x1b[31m\ud800"
    stub.tool_deltas = [
        [
            {
                "index": 0,
                "type": "function",
                "function": {"name": name, "arguments": '{"k": "[i]v\\u001b"}'},
            }
        ]
    ]
    _, done = reply(stub.backend())
    (call,) = done.tool_calls
    assert (
        call.name == "[bold red]x[/]\x1b[31m\ufffd"
    )  # as sent (the front ends sanitise), no lone surrogate
    assert call.parsed_arguments() == {"k": "[i]v\x1b"}
    assert call.id.startswith("call_") and len(call.id) > 8


def test_the_follow_up_request_carries_the_calls_and_their_results(stub: StubServer):
    stub.tool_deltas = fragments(0, "call_w", "get_weather", '{"city": "Paris"}') + [
        whole_call(1, "call_bad", "get_time", {})
    ]
    backend = stub.backend()
    _, done = reply(backend)
    asked = ChatMessage(
        "assistant", "", tool_calls=(done.tool_calls[0], ToolCall("call_bad", "get_time", "{oops"))
    )
    results = [
        ChatMessage("tool", "18 °C, sunny", tool_call_id="call_w", name="weather"),
        ChatMessage(
            "tool", "The call was not run: not JSON.", tool_call_id="call_bad", name="get_time"
        ),
    ]
    text, done = reply(backend, [*ASK, asked, *results])
    assert text == stub.reply and done.finish_reason == "stop" and done.tool_calls == ()
    sent = stub.last_body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [  # see request.wire_messages
            {
                "id": "call_w",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            # Arguments that are not a JSON object would make Ollama and llama-server refuse it all.
            {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    }
    # A tool message is named after the function the model called, not the tool on its server.
    assert sent[3] == {
        "role": "tool",
        "content": "18 °C, sunny",
        "tool_call_id": "call_w",
        "name": "get_weather",
    }
    assert sent[4]["tool_call_id"] == "call_bad" and sent[4]["name"] == "get_time"
    # An assistant message with text and calls keeps its text.
    reply(
        backend,
        [
            *ASK,
            ChatMessage("assistant", "Checking.", tool_calls=done.tool_calls or asked.tool_calls),
        ],
    )
    assert stub.last_body["messages"][2]["content"] == "Checking."


def test_a_chat_runs_the_servers_calls_and_answers_with_their_results(
    stub: StubServer, history: History
):
    """The chat's runner (engine/chat/tool_turns.py) with the remote backend: the streamed call
    is run, its result saved and sent back, and the server's answer ends the reply."""
    stub.reply = "It is 18 degrees in Paris."
    stub.tool_deltas = fragments(0, "call_w", "get_weather", '{"city": "Paris"}')
    ran: list[ToolCall] = []

    class Box:
        def specs(self):
            return [WEATHER]

        def run(self, call: ToolCall, spec: ToolSpec, cancel: threading.Event) -> ToolResult:
            ran.append(call)
            return ToolResult(f"{call.parsed_arguments()['city']}: 18 C")

    session = ChatSession(stub.backend(), ChatLog(Conversation(), history))
    session.chat.add_user("Weather in Paris?")
    answer = answer_with_tools(session, Box(), lambda call, spec: True, rounds=3, params=PARAMS)
    assert answer.text == stub.reply and ran == [
        ToolCall("call_w", "get_weather", '{"city": "Paris"}')
    ]
    first, second = [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]
    assert first["tools"] == [WEATHER.to_openai()] and first["tool_choice"] == "auto"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert second["messages"][1]["tool_calls"][0]["id"] == "call_w"
    assert second["messages"][2] == {
        "role": "tool",
        "content": "Paris: 18 C",
        "tool_call_id": "call_w",
        "name": "get_weather",
    }
    stored = history.get(session.chat.conversation_id)
    assert [m.role for m in stored.messages] == ["user", "assistant", "tool", "assistant"]


def test_too_many_calls_is_one_line_not_a_hang(stub: StubServer):
    stub.tool_deltas = [whole_call(i, f"c{i}", "get_time", {}) for i in range(MAX_TOOL_CALLS + 1)]
    with pytest.raises(RemoteServerError) as caught:
        reply(stub.backend())
    message = str(caught.value)
    assert f"more than {MAX_TOOL_CALLS} tool calls in one reply" in message and "\n" not in message


def test_oversized_arguments_are_one_line_and_the_text_so_far_is_kept(stub: StubServer):
    stub.tool_text = ["Working on it."]
    stub.tool_deltas = fragments(
        0, "c", "get_time", '{"tz": "' + "x" * MAX_ARGUMENTS_CHARS + '"}', size=50_000
    )
    with pytest.raises(StreamInterrupted) as caught:
        reply(stub.backend())
    assert "arguments longer than" in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.partial == "Working on it."


@pytest.mark.parametrize(
    "status, said",
    [
        (500, "tools param requires --jinja flag"),  # llama-server without --jinja
        (400, "registry.ollama.ai/library/gemma3:270m does not support tools"),  # Ollama
    ],
)
def test_a_server_that_refuses_tools_says_how_to_start_it(stub: StubServer, status: int, said: str):
    stub.mode, stub.status = "status", status
    stub.error_body = {"error": {"code": status, "message": said, "type": "server_error"}}
    with pytest.raises(RemoteServerError) as caught:
        reply(stub.backend())
    message = str(caught.value)
    assert (
        said in message
        and "start llama-server with --jinja" in message
        and "supports tools" in message
    )
    assert "\n" not in message
    with pytest.raises(
        RemoteServerError
    ) as caught:  # the same refusal without tools: the server's words
        reply(stub.backend(), tool_choice="none")
    assert said in str(caught.value) and "turn the tools off" not in str(caught.value)


def test_a_reply_cut_at_max_tokens_asks_for_no_calls(stub: StubServer):
    stub.tool_deltas = fragments(0, "c", "get_weather", '{"city": "Paris"}', size=2)
    done = [
        e
        for e in stub.backend().stream_chat(ASK, PARAMS.replace(max_tokens=3), tools=(WEATHER,))
        if isinstance(e, GenerationDone)
    ][0]
    assert done.finish_reason == "length" and done.tool_calls == ()
    assert json.loads(json.dumps(stub.last_body))["max_tokens"] == 3


def test_a_reply_cancelled_mid_call_asks_for_no_calls(stub: StubServer):
    stub.tool_stall = True  # the call's first fragments, then " ...", then silence
    stub.tool_deltas = fragments(0, "c", "get_weather", '{"city": "Par')
    backend = stub.backend()
    done = None
    for event in backend.stream_chat(ASK, PARAMS, tools=(WEATHER,)):
        if (
            isinstance(event, TextDelta) and event.text == " ..."
        ):  # the fragments were read before it
            backend.cancel()
        elif isinstance(event, GenerationDone):
            done = event
    assert done is not None and done.finish_reason == "cancelled" and done.tool_calls == ()


@pytest.mark.model
def test_a_real_server_takes_the_tools_and_the_calls_results(llama_server):
    """llama-cpp-python's server (the starter model, Gemma's format: it does not parse calls itself)
    takes a request offering tools, with an assistant's calls (content "": it refuses ``null``, and
    its formats need the key) and the tool messages that answer them, and answers in words."""
    from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
    from vibechat.engine.remote.options import OpenAIOptions

    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=llama_server, model="starter"))
    call = ToolCall("call_w", "get_weather", '{"city": "Paris"}')
    messages = [
        *ASK,
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "18 C, sunny", tool_call_id="call_w", name="weather"),
    ]
    done = [
        e
        for e in backend.stream_chat(
            messages, PARAMS.replace(max_tokens=8, seed=1), tools=(WEATHER,)
        )
        if isinstance(e, GenerationDone)
    ][0]
    assert done.finish_reason in ("stop", "length") and done.text.strip() and done.tool_calls == ()
