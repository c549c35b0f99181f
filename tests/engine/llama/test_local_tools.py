"""Tool calls on the local engine, through the engine process as the chat uses it: the starter's
weights with llama.cpp's official Qwen 2.5 template (a Hermes-style `<tool_call>` family), tool
choice `required` (the grammar forces a call from the first token): the reply ends asking for
one call whose arguments parse and follow the tool's schema, its text held back from the reply;
the call and its result then render back through the template for the next reply. The starter
is a tiny base model: what it says is not judged, only that the call is well formed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import collect, worker_threads
from ggufgen import copy_with_metadata
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.tool_calls import ToolSpec

pytestmark = pytest.mark.model

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
WEATHER = ToolSpec(
    "get_weather",
    "The weather forecast for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
    server="test",
    tool="get_weather",
)


@pytest.fixture(scope="module")
def qwen_tools(starter_path: Path, tmp_path_factory: pytest.TempPathFactory):
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    path = copy_with_metadata(
        starter_path,
        tmp_path_factory.mktemp("tools") / "qwen-tools-like.gguf",
        {"tokenizer.chat_template": source},
    )
    backend = WorkerBackend(
        LlamaCppOptions(
            model_path=path,
            context_size=2048,
            repack="off",
            prompt_format="template",
            threads=worker_threads(),
        )
    )
    yield backend
    backend.close()


def reply(backend, messages, choice):
    text, done = collect(
        backend,
        messages,
        SamplingParams(temperature=0, max_tokens=80, seed=1),
        tools=(WEATHER,),
        tool_choice=choice,
    )
    return "".join(text), done


def test_required_makes_the_starter_call_the_tool_with_arguments_that_parse(qwen_tools):
    asked = [ChatMessage("user", "What will the weather be in Paris for the next 3 days?")]
    text, done = reply(qwen_tools, asked, "required")
    assert done.finish_reason == "tool_calls" and len(done.tool_calls) == 1, (text, done)
    call = done.tool_calls[0]
    arguments = call.parsed_arguments()
    assert (
        call.name == "get_weather"
        and isinstance(arguments["city"], str)
        and isinstance(arguments["days"], int)
    )
    assert "<tool_call>" not in text and "<tool_call>" not in done.text

    # The call and its result go back through the template; choice none: an answer in words.
    follow = [
        *asked,
        ChatMessage("assistant", done.text, tool_calls=done.tool_calls),
        ChatMessage("tool", "Sunny, 24 C.", tool_call_id=call.id, name=call.name),
    ]
    _text, after = reply(qwen_tools, follow, "none")
    assert after.finish_reason in ("stop", "length") and not after.tool_calls
    # The tools are still listed (choice none calls none): the prompt goes on from the last one's.
    assert after.stats.prompt_tokens > done.stats.prompt_tokens
    reused = after.stats.prompt_tokens - after.stats.prompt_tokens_evaluated
    assert (
        reused >= done.stats.prompt_tokens - 24
    )  # (the call as rendered may differ from how it was written)


def test_the_starters_call_reaches_a_real_mcp_tool_and_its_result_the_model(qwen_tools, tmp_path):
    """Through the session as `vibechat run` drives it: the starter (required) calls the test MCP
    server's add(a, b); the arguments parse, the tool runs, and its result is the conversation's
    next message, sent back to the model."""
    import json
    import sys

    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.session import ChatSession
    from vibechat.engine.chat.tool_turns import answer_with_tools
    from vibechat.engine.settings.table import Config
    from vibechat.engine.tools.registry import ToolRegistry

    server = Path(__file__).resolve().parents[2] / "mcp_test_server.py"
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"test": {"command": sys.executable, "args": [str(server)]}}})
    )
    with (
        ToolRegistry.load(Config(tool_timeout=30), mcp) as registry,
        History(tmp_path / "history.db") as history,
    ):
        adder = registry.find("add") or next(s for s in registry.specs() if s.name == "add")

        class OnlyAdd:  # the one tool offered, as the registry runs it
            def specs(self):
                return [adder]

            def run(self, call, spec=None, cancel=None):
                return registry.run(call, spec, cancel)

        session = ChatSession(qwen_tools, ChatLog(Conversation(), history))
        session.chat.add_user("Add 2 and 3 with the tool.")
        answer_with_tools(
            session,
            OnlyAdd(),
            lambda call, spec: True,
            rounds=1,
            tool_choice="required",
            params=SamplingParams(temperature=0, max_tokens=60, seed=1),
        )
        stored = history.get(session.chat.conversation_id)
        roles = [m.role for m in stored.messages]
        assert roles[:3] == ["user", "assistant", "tool"], roles
        call = stored.messages[1].tool_calls[0]
        arguments = call.parsed_arguments()
        assert (
            call.name == "add"
            and isinstance(arguments["a"], int)
            and isinstance(arguments["b"], int)
        )
        assert stored.messages[2].content.strip() == str(
            arguments["a"] + arguments["b"]
        )  # the tool ran
        assert stored.messages[2].tool_name == "test/add" and roles[3:] == ["assistant"]


def test_an_opened_tool_chat_is_prefilled_with_its_tools_so_the_next_reply_reads_only_the_new_turn(
    qwen_tools,
):
    from vibechat.engine.turns.tool_calls import ToolCall

    call = ToolCall("call_1", "get_weather", '{"city": "Paris", "days": 2}')
    opened = [
        ChatMessage("user", "Weather in Paris for 2 days?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "Sunny.", tool_call_id="call_1", name="get_weather"),
        ChatMessage("assistant", "It will be sunny."),
    ]
    cached = qwen_tools.prefill(opened, "auto", (WEATHER,))
    _text, done = reply(qwen_tools, [*opened, ChatMessage("user", "And in Rome?")], "none")
    assert done.stats.prompt_tokens > cached
    assert (
        done.stats.prompt_tokens_evaluated <= done.stats.prompt_tokens - cached + 8
    )  # the tools' prefix was kept


def test_a_side_of_a_pair_calls_its_tool_through_the_engine_process(qwen_tools):
    """Two replies at once (engine/llama/pairing.py) in the engine process: side A, offered the
    tool with choice ``required``, ends asking for one call whose arguments parse; side B,
    offered none, answers as text."""
    from vibechat.engine.turns.backend import GenerationDone, SideRequest

    asked = (ChatMessage("user", "What will the weather be in Paris for the next 3 days?"),)
    a = SideRequest(
        asked, SamplingParams(temperature=0, max_tokens=80, seed=1), (WEATHER,), "required"
    )
    b = SideRequest(asked, SamplingParams(temperature=0, max_tokens=16, seed=1))
    done = {}
    for item in qwen_tools.stream_pair(a, b):
        if isinstance(item.event, GenerationDone):
            done[item.side] = item.event
    assert done["A"].finish_reason == "tool_calls" and len(done["A"].tool_calls) == 1
    assert isinstance(done["A"].tool_calls[0].parsed_arguments()["city"], str)
    assert done["B"].tool_calls == () and done["B"].finish_reason in ("stop", "length")
