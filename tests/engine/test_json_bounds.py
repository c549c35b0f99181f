"""engine/json_bounds.py: outside JSON is measured before anything recurses over it (issue 40,
point 1). json.loads of 20,000 nested arrays raises RecursionError; the check is a linear scan
of the brackets outside strings, and every parser of outside JSON goes through it."""

from __future__ import annotations

import json

import pytest

from vibechat.engine.chat.records import tool_calls_from
from vibechat.engine.json_bounds import (
    MAX_JSON_DEPTH,
    JsonTooDeep,
    bounded_loads,
    check_value_depth,
    json_depth,
    value_depth,
)
from vibechat.engine.remote.request import wire_messages
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.tool_calls import ToolCall

DEEP = '{"a":' + "[" * 20_000 + "]" * 20_000 + "}"


def test_the_depth_counts_brackets_outside_strings_only():
    assert (
        json_depth("{}") == 1 and json_depth('{"a": [1, {"b": []}]}') == 4 and json_depth("3") == 0
    )
    assert (
        json_depth('{"a": "[[[[{{{{\\"[[["}') == 1
    )  # brackets inside strings (and escaped quotes) do not count
    assert (
        json_depth(DEEP, stop_after=MAX_JSON_DEPTH) == MAX_JSON_DEPTH + 1
    )  # stops once past the bound


def test_bounded_loads_refuses_deep_text_with_a_value_error_not_recursion():
    with pytest.raises(RecursionError):
        json.loads(DEEP)  # what every parser did before
    with pytest.raises(JsonTooDeep, match=f"more than {MAX_JSON_DEPTH} levels"):
        bounded_loads(DEEP)
    assert issubclass(JsonTooDeep, ValueError)
    at_bound = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert value_depth(bounded_loads(at_bound)) == MAX_JSON_DEPTH
    with pytest.raises(JsonTooDeep):
        bounded_loads("[" + at_bound + "]")
    assert bounded_loads(b'{"x": "\\u00e9"}') == {"x": "é"}


def test_a_parsed_value_is_measured_without_recursion():
    value: list = []
    for _ in range(20_000):
        value = [value]
    with pytest.raises(RecursionError):
        json.dumps(value)
    assert value_depth(value) == MAX_JSON_DEPTH + 1
    with pytest.raises(JsonTooDeep):
        check_value_depth(value)
    check_value_depth({"a": [1, {"b": "c"}]})


def test_deep_tool_call_arguments_are_refused_saved_turns_read_back_and_sent_again():
    call = ToolCall("c1", "add", DEEP)
    with pytest.raises(ValueError, match="too deeply nested"):
        call.parsed_arguments()
    assert tool_calls_from(json.dumps([call.to_dict()])) == (call,)  # the saved turn reads back
    assert tool_calls_from("[" * 50_000) == ()  # damaged past the bound: none, not a crash
    sent = wire_messages(
        [ChatMessage("user", "hi"), ChatMessage("assistant", "", tool_calls=(call,))]
    )
    assert sent[-1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_an_mcp_result_whose_structured_content_nests_too_deeply_is_a_note_not_a_crash():
    from types import SimpleNamespace

    from vibechat.engine.tools.mcp_reading import result_of

    deep: list = []
    for _ in range(5_000):  # what a library's parser may hand over (json.dumps of it would recurse)
        deep = [deep]
    result = result_of(SimpleNamespace(content=[], structured_content={"a": deep}, is_error=False))
    assert f"nested more than {MAX_JSON_DEPTH} levels deep" in result.text
    assert (
        result_of(SimpleNamespace(content=[], structured_content={"a": [1]}, is_error=False)).text
        == '{"a": [1]}'
    )


def test_an_mcp_config_nested_too_deeply_is_one_line(tmp_path):
    from vibechat.engine.tools.mcp_config import McpConfigError, load_mcp_config

    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": ' + "[" * 20_000 + "]" * 20_000 + "}")
    with pytest.raises(McpConfigError) as exc:
        load_mcp_config(path)
    assert "nested too deeply" in str(exc.value) and "\n" not in str(exc.value)
