"""`vibechat run --prompts-file`: line parsing (engine/batch.py)."""

from __future__ import annotations

import json

import pytest

from vibechat.engine.batch import BatchLineError, BatchRequest, parse_line, read_requests
from vibechat.engine.params import SamplingParams


# ------------------------------------------------------------------ parsing
def test_a_full_line_parses_into_a_request():
    request = parse_line(json.dumps({
        "prompt": "Hi", "system": "Be brief.", "id": "q1", "temperature": 0, "top_k": 5, "top_p": 0.5,
        "min_p": 0.1, "repeat_penalty": 1.1, "max_tokens": 8.0, "seed": 3, "stop": "END"}), 7)
    assert (request.line, request.prompt, request.system, request.id) == (7, "Hi", "Be brief.", "q1")
    assert request.overrides == {"temperature": 0.0, "top_k": 5, "top_p": 0.5, "min_p": 0.1,
                                 "repeat_penalty": 1.1, "max_tokens": 8, "seed": 3, "stop": ("END",)}
    assert parse_line('{"prompt": "x", "max_tokens": null, "seed": null, "id": 4}', 1).overrides == {
        "max_tokens": None, "seed": None}


def test_line_parameters_sit_on_top_of_the_command():
    base = SamplingParams(temperature=0.2, top_k=7, max_tokens=64, stop=("a", "b"))
    params = parse_line('{"prompt": "x", "top_k": 3, "stop": ["c"], "max_tokens": null}', 1).params(base)
    assert (params.temperature, params.top_k, params.max_tokens, params.stop) == (0.2, 3, None, ("c",))
    assert parse_line('{"prompt": "x"}', 1).params(base) == base


@pytest.mark.parametrize(("text", "needle"), [
    ('{"prompt": "x",}', "not valid JSON"),
    ("# a comment", "JSON Lines has no comments"),
    ('["prompt"]', "expected a JSON object"),
    ('"just text"', "expected a JSON object"),
    ('{"system": "Be brief."}', 'no "prompt"'),
    ('{"prompt": "   "}', "the prompt is empty"),
    ('{"prompt": 42}', "prompt must be a string"),
    ('{"prompt": "x", "temprature": 0}', "unknown key 'temprature' (did you mean 'temperature'?)"),
    ('{"prompt": "x", "model": "m.gguf"}', "pass --model"),
    ('{"prompt": "x", "temperature": 9}', "temperature must be between 0 and 5 (got 9)"),
    ('{"prompt": "x", "temperature": "hot"}', "temperature must be a number"),
    ('{"prompt": "x", "top_k": true}', "top_k must be a whole number"),
    ('{"prompt": "x", "temperature": null}', "temperature needs a value"),
    ('{"prompt": "x", "max_tokens": 2.5}', "max_tokens must be a whole number between 1 and 1000000 (or null)"),
    ('{"prompt": "x", "seed": -1}', "seed must be between 0 and"),
    ('{"prompt": "x", "stop": [1]}', "stop must be a string or a list of strings"),
    ('{"prompt": "x", "stop": [""]}', "stop strings must be non-empty"),
    ('{"prompt": "x", "system": null}', "system must be a string"),
    ('{"prompt": "x", "id": [1]}', "id must be a string or a whole number"),
    ('{"prompt": "x", "prompt": "y"}', "key 'prompt' appears twice"),
])
def test_each_bad_line_names_its_problem_and_line(text, needle):
    with pytest.raises(BatchLineError) as caught:
        parse_line(text, 12)
    assert caught.value.line == 12
    assert needle in str(caught.value)


def test_a_bad_line_keeps_its_id_when_it_has_one():
    with pytest.raises(BatchLineError) as caught:
        parse_line('{"prompt": "x", "id": "q9", "top_p": 2}', 1)
    assert caught.value.id == "q9"


def test_reading_numbers_physical_lines_and_skips_blank_ones():
    lines = [b'\xef\xbb\xbf{"prompt": "a"}\n', b"\n", b"   \r\n", b'{"prompt": \xff}\n', b"# note\n",
             b'{"prompt": "b"}\r\n', b'{"prompt": "c"}']
    items = list(read_requests(lines))
    assert [(type(i).__name__, i.line) for i in items] == [
        ("BatchRequest", 1), ("BatchLineError", 4), ("BatchLineError", 5), ("BatchRequest", 6),
        ("BatchRequest", 7)]
    assert "not valid UTF-8" in str(items[1])
    assert [i.prompt for i in items if isinstance(i, BatchRequest)] == ["a", "b", "c"]
