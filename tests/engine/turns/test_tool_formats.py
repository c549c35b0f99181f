"""Tool calls through a local model's chat template: llama.cpp's official templates
(tests/templates/) render tools, a call and its result; each family's recogniser finds the
calls in a streamed reply, split anywhere, and survives malformed and oversized ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vibechat.engine.errors import ChatTemplateError
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec
from vibechat.engine.turns.tool_formats import (
    MAX_CALL_CHARS,
    MAX_CALLS,
    ToolCallRecogniser,
    tool_family,
    tool_format,
)

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
OFFICIAL = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "openai-gpt-oss-120b.jinja": "harmony",
}
WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)


def template(name: str) -> ChatTemplate:
    return ChatTemplate(
        "gguf", (TEMPLATES / name).read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>"
    )


def conversation() -> list[ChatMessage]:
    call = ToolCall("call_abc1", "get_weather", '{"city": "Paris", "days": 2}')
    return [
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", '{"temp": 21}', tool_call_id="call_abc1", name="get_weather"),
    ]


@pytest.mark.parametrize(("name", "family"), sorted(OFFICIAL.items()))
def test_each_official_template_renders_tools_a_call_and_its_result(name, family):
    tmpl = template(name)
    assert tool_family(tmpl.source) == family
    assert tmpl.reads_tools and tmpl.tool_format is not None and tmpl.tool_format.family == family
    prompt = tmpl.render(conversation(), tools=[WEATHER])
    assert "get_weather" in prompt and "The weather in a city" in prompt  # the tool, offered
    assert "Paris" in prompt and "21" in prompt  # the call's arguments and the result
    # The arguments went in as a mapping: rendered as JSON, not as a quoted JSON string.
    assert '\\"city\\"' not in prompt and '"city": "Paris"' in prompt.replace('":"', '": "')


def test_mistral_gets_the_nine_character_ids_its_template_demands():
    prompt = template("mistralai-Mistral-Nemo-Instruct-2407.jinja").render(
        conversation(), tools=[WEATHER]
    )
    ids = [part.split('"')[0] for part in prompt.split('"id": "')[1:]]
    results = [part.split('"')[0] for part in prompt.split('"call_id": "')[1:]]
    assert len(ids[0]) == 9 and ids == results  # the call and its result keep one id


def test_a_template_without_tools_says_so():
    plain = ChatTemplate("gguf", "{% for m in messages %}{{ m.content }}{% endfor %}")
    assert tool_family(plain.source) is None and tool_format(plain.source) is None
    assert plain.tool_format is None and not plain.reads_tools
    with pytest.raises(ChatTemplateError, match="no tool support"):
        plain.render([ChatMessage("user", "hi")], tools=[WEATHER])


def test_a_template_that_refuses_the_tool_calls_gives_a_clear_error():
    llama = template("meta-llama-Llama-3.1-8B-Instruct.jinja")
    two = (ToolCall("a", "get_weather", "{}"), ToolCall("b", "get_weather", "{}"))
    with pytest.raises(ChatTemplateError, match="cannot render tools.*single tool-calls"):
        llama.render(
            [ChatMessage("user", "x"), ChatMessage("assistant", "", tool_calls=two)],
            tools=[WEATHER],
        )


def test_without_tools_the_prompt_is_unchanged():
    tmpl = template("Qwen-Qwen2.5-7B-Instruct.jinja")
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")]
    assert (
        tmpl.render(messages)
        == tmpl.render(messages, tools=None)
        == tmpl.render(messages, tools=[])
    )
    assert "<tools>" not in tmpl.render(messages)


# ------------------------------------------------------------------ recognisers
def counter(n: int) -> str:
    return f"call_{n}"


def run(family_template: str, chunks: list[str]) -> tuple[str, list[ToolCall], ToolCallRecogniser]:
    fmt = tool_format((TEMPLATES / family_template).read_text(encoding="utf-8"))
    assert fmt is not None
    rec = fmt.recogniser(counter)
    text = "".join(rec.feed(chunk) for chunk in chunks)
    rest, calls = rec.finish()
    return text + rest, calls, rec


def every_split(reply: str) -> list[list[str]]:
    """The reply cut in two at every character, and in single characters."""
    return [[reply[:i], reply[i:]] for i in range(len(reply) + 1)] + [list(reply)]


QWEN, LLAMA = "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"
NEMO, GPT_OSS = "mistralai-Mistral-Nemo-Instruct-2407.jinja", "openai-gpt-oss-120b.jinja"
CASES = [
    (
        QWEN,
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
        '"Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": '
        "3}}\n</tool_call>",
        "Let me check.\n",
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 3})],
    ),
    (
        LLAMA,
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        LLAMA,
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        NEMO,
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        GPT_OSS,
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}',
        "<|channel|>analysis<|message|>Need weather.<|end|>",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        GPT_OSS,
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
]


@pytest.mark.parametrize(("name", "reply", "text", "expected"), CASES)
def test_each_family_finds_its_calls_wherever_the_stream_splits(name, reply, text, expected):
    assert OFFICIAL[name]
    for chunks in every_split(reply):
        got_text, calls, _ = run(name, chunks)
        assert got_text == text, chunks
        assert [(c.name, c.parsed_arguments()) for c in calls] == expected, chunks
    assert [c.id for c in calls][:1] in (["call_1"], ["abcDEF123"])


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        (QWEN, "Use <tool_call> tags to call tools."),
        (QWEN, "Plain answer, no call."),
        (LLAMA, "Paris is sunny."),
        (LLAMA, "{not a call at all}"),
        (NEMO, "The [TOOL_CALLS] token is special."),
        (GPT_OSS, "<|channel|>final<|message|>Sunny."),
    ],
)
def test_text_that_only_looks_like_a_call_stays_text(name, reply):
    for chunks in every_split(reply):
        text, calls, _ = run(name, chunks)
        assert calls == [] and text == reply, chunks


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        (QWEN, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'),
        (QWEN, '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>'),
        (LLAMA, '{"name": "get_weather", "parameters": {"city": "Pa'),
        (
            GPT_OSS,
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": ',
        ),
    ],
)
def test_a_malformed_call_keeps_its_name_and_its_raw_arguments(name, reply):
    text, calls, _ = run(name, [reply])
    assert text == "" and len(calls) == 1 and calls[0].name == "get_weather"
    with pytest.raises(ValueError, match="not valid JSON"):
        calls[0].parsed_arguments()


def test_an_oversized_call_is_cut_and_held_back_no_more():
    huge = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "x" * (
        3 * MAX_CALL_CHARS
    )
    fmt = tool_format("<tool_call>")
    assert fmt is not None
    rec = fmt.recogniser(counter)
    passed = "".join(rec.feed(huge[i : i + 4096]) for i in range(0, len(huge), 4096))
    assert passed == "" and rec.in_call
    assert sum(len(b) for b in rec._body) <= MAX_CALL_CHARS  # bounded while it streams
    text, calls = rec.finish()
    assert text == "" and len(calls) == 1 and calls[0].name == "get_weather"
    with pytest.raises(ValueError):
        calls[0].parsed_arguments()


def test_an_oversized_llama_reply_that_is_no_call_comes_back_as_text():
    reply = "{" + "y" * (2 * MAX_CALL_CHARS)
    text, calls, _ = run(LLAMA, [reply[i : i + 1000] for i in range(0, len(reply), 1000)])
    assert calls == [] and text.startswith("{yyy") and len(text) >= MAX_CALL_CHARS


def test_calls_past_the_bound_are_dropped_and_counted():
    one = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    text, calls, rec = run(QWEN, [one * (MAX_CALLS + 5)])
    assert text == "" and len(calls) == MAX_CALLS and rec.dropped == 5
    _, calls, rec = run(LLAMA, ['{"name": "a", "parameters": {}}'])
    assert len(calls) == 1


def test_the_newer_mistral_form_is_read_too():
    fmt = tool_format("[TOOL_CALLS] [ARGS]")
    assert fmt is not None and fmt.args_marker
    rec = fmt.recogniser(counter)
    rec.feed(
        '[TOOL_CALLS]get_weather[ARGS]{"city": '
        '"Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}'
    )
    _, calls = rec.finish()
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Rome"]


def test_a_long_text_after_a_stray_marker_is_passed_on_whole():
    reply = "Write <tool_call> like this: " + "z" * (2 * MAX_CALL_CHARS) + " the end"
    for size in (997, 65536):
        text, calls, _ = run(QWEN, [reply[i : i + size] for i in range(0, len(reply), size)])
        assert calls == [] and text == reply


def test_harmony_calls_come_out_before_the_harmony_splitter_which_still_sees_the_thinking():
    from vibechat.engine.turns.harmony import HarmonySplitter

    reply = (
        "<|channel|>analysis<|message|>Need the "
        "weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    )
    for chunks in every_split(reply):
        fmt = tool_format((TEMPLATES / GPT_OSS).read_text(encoding="utf-8"))
        assert fmt is not None
        rec, splitter = fmt.recogniser(counter), HarmonySplitter()
        pieces = [p for chunk in chunks for p in splitter.feed(rec.feed(chunk))]
        rest, calls = rec.finish()
        pieces += splitter.feed(rest) + splitter.flush()
        assert "".join(t for thinking, t in pieces if thinking) == "Need the weather."
        assert "".join(t for thinking, t in pieces if not thinking) == ""
        assert [(c.name, c.parsed_arguments()) for c in calls] == [
            ("get_weather", {"city": "Paris"})
        ]


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_no_jumble_of_markers_and_json_crashes_a_recogniser_or_loses_it_more_than_a_bound(name):
    import random

    rng = random.Random(28)
    parts = [
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<|python_tag|>",
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|end|>",
        " to=functions.",
        "get_weather",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"',
        "\\",
        "Paris",
        " ",
        "\n",
        "é",
        "\x00",
    ]
    for _ in range(200):
        reply = "".join(rng.choice(parts) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(len(reply) + 1), min(4, len(reply) + 1)))
        chunks = [reply[a:b] for a, b in zip([0, *cuts], [*cuts, len(reply)], strict=True)]
        text, calls, _ = run(name, chunks)
        assert len(calls) <= MAX_CALLS and len(text) <= len(reply)
        for call in calls:
            assert isinstance(call.name, str) and isinstance(call.arguments, str)
