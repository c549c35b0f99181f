"""`vibechat run --compare A B` end to end in a subprocess: against the stub server on 127.0.0.1
(tests/openai_stub.py), one side down or mistyped while the other answers, and on the real
starter model (both sides decoded at once in one context); the replies saved as siblings."""

from __future__ import annotations

import json
from functools import partial

import pytest

from helpers import vibechat as run_vibechat
from openai_stub import image_parts, refused_url
from vibechat.app.compare_plan import parse_side
from vibechat.engine.errors import VibechatError

# A comparison may load two sides: longer than one run before a hang is assumed.
vibechat = partial(run_vibechat, timeout=240)


def shown(cid: int) -> dict:
    out = vibechat("history", "show", str(cid), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_side_is_a_preset_or_key_value_pairs_whose_values_may_hold_commas():
    assert parse_side("precise").preset == "precise"
    side = parse_side("temperature=1.2, system=Be brief, and kind,top-k=20,model=tiny")
    assert side.settings == (("temperature", "1.2"), ("top_k", "20"))
    assert side.system == "Be brief, and kind"
    assert side.model == "tiny"
    assert parse_side("base-url=http://127.0.0.1:1/v1").base_url == "http://127.0.0.1:1/v1"
    with pytest.raises(VibechatError, match="not key=value"):
        parse_side("=5")


def test_two_servers_answer_and_both_replies_are_saved_as_siblings(stub):
    stub.reply = "Paris is the capital."
    a = f"base-url={stub.url},model=stub-large,temperature=0.2"
    b = f"base-url={stub.url},model=stub-large,temperature=1.1,top_k=7"
    out = vibechat("run", "--compare", a, b, "-p", "Capital of France?", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["a"]["text"] == obj["b"]["text"] == "Paris is the capital.", out.stdout
    assert obj["a"]["params"]["temperature"] == 0.2
    assert obj["b"]["params"]["temperature"] == 1.1 and obj["b"]["params"]["top_k"] == 7
    assert obj["differs"]["temperature"] == {"a": 0.2, "b": 1.1}
    assert obj["differs"]["top_k"]["b"] == 7
    assert obj["a"]["differs"] == obj["differs"] and obj["paired"] is False
    bodies = [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]
    sent = sorted(body["temperature"] for body in bodies)
    assert sent == [0.2, 1.1]
    conversation = shown(obj["a"]["conversation_id"])
    prompt = [m for m in conversation["tree"] if m["role"] == "user"]
    replies = [m for m in conversation["tree"] if m["role"] == "assistant"]
    assert len(prompt) == 1 and len(replies) == 2
    assert {m["parent_id"] for m in replies} == {prompt[0]["id"]}
    assert sorted(m["params"]["temperature"] for m in replies) == [0.2, 1.1]
    # The conversation goes on from A's reply.
    assert conversation["leaf_id"] == replies[0]["id"]


def test_text_output_heads_each_reply_with_its_settings(stub):
    stub.reply = "Blue light scatters."
    a = f"base-url={stub.url},model=stub-small,temperature=0.3"
    b = f"base-url={stub.url},model=stub-small,temperature=0.9"
    out = vibechat("run", "--compare", a, b, "-p", "Why is the sky blue?", "--no-save")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("=== B ")
    assert first.startswith("=== A (") and "temperature=0.3" in first
    assert "Blue light scatters." in first and "Blue light scatters." in second
    assert "temperature=0.9" in second


def test_a_server_that_is_down_is_one_line_and_the_other_side_answers(stub):
    stub.reply = "Still here."
    down = refused_url()
    out = vibechat(
        "run",
        "--compare",
        f"base-url={stub.url},model=stub-small",
        f"base-url={down}",
        "-p",
        "Hello?",
        "--json",
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: side B: "), out.stderr
    obj = json.loads(out.stdout)
    assert obj["a"]["text"] == "Still here." and "error" not in obj["a"]
    assert obj["b"]["error"]["exit_status"] == 1 and obj["b"]["text"] == ""


def test_a_setting_that_does_not_parse_is_one_line_for_its_side(stub):
    stub.reply = "Fine."
    out = vibechat(
        "run",
        "--compare",
        f"base-url={stub.url},model=stub-small,temperature=hot",
        f"base-url={stub.url},model=stub-small,temperature=0.5",
        "-p",
        "Hi",
    )
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: side A ("), out.stderr
    assert "temperature" in lines[0] and "Traceback" not in out.stderr
    assert "Fine." in out.stdout.split("=== B ")[1]


def test_neither_side_running_is_one_error(stub):
    out = vibechat("run", "--compare", "temperature=hot", "top_k=many", "-p", "Hi")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].startswith("vibechat: error: neither side")
    assert "Traceback" not in out.stderr


def test_compare_refuses_what_it_does_not_take(stub, tmp_path):
    out = vibechat("run", "--compare", "temperature=0", "temperature=1", "-p", "Hi", "--continue")
    assert out.returncode == 1
    assert "--compare and --continue do not mix" in out.stderr


def test_compare_refuses_tools_in_one_line_saying_why(stub, tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    for flags in (("--allow-tool", "builtin.time"), ("--mcp-config", str(config))):
        out = vibechat("run", "--compare", "temperature=0", "temperature=1", "-p", "Hi", *flags)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        (line,) = out.stderr.splitlines()
        said = f"--compare and {flags[0]} do not mix: a comparison's sides are offered no tools"
        assert said in line, line


def chat_bodies(stub) -> list[dict]:
    return [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]


def test_image_and_file_are_attached_to_the_prompt_both_sides_are_sent(stub, tmp_path):
    from PIL import Image

    stub.reply = "A green dot, and a note."
    picture = tmp_path / "dot.png"
    Image.new("RGB", (12, 8), (10, 200, 30)).save(picture, "PNG")
    note = tmp_path / "note.txt"
    note.write_text("The secret word is heliotrope.\n")
    a = f"base-url={stub.url},model=stub-small,temperature=0.2"
    b = f"base-url={stub.url},model=stub-small,temperature=0.9"
    args = ("--image", str(picture), "--file", str(note), "-p", "What is here?", "--json")
    out = vibechat("run", "--compare", a, b, *args)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["a"]["text"] == obj["b"]["text"] == "A green dot, and a note."
    bodies = chat_bodies(stub)
    assert len(bodies) == 2
    for body in bodies:
        assert len(image_parts(body)) == 1
        assert "heliotrope" in json.dumps(body["messages"][-1])
    conversation = shown(obj["a"]["conversation_id"])
    (prompt,) = [m for m in conversation["tree"] if m["role"] == "user"]
    assert sorted(a["kind"] for a in prompt["attachments"]) == ["file", "image"]


def test_a_bad_attachment_is_one_line_and_nothing_is_sent(stub, tmp_path):
    a = f"base-url={stub.url},model=stub-small"
    missing = str(tmp_path / "nowhere.png")
    out = vibechat("run", "--compare", a, a, "--image", missing, "-p", "Hi")
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""
    # --json: its one object, with the error, as run's.
    out = vibechat("run", "--compare", a, a, "--image", missing, "-p", "Hi", "--json")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    error = json.loads(out.stdout)["error"]
    assert error["exit_status"] == 2 and "nowhere.png" in error["message"]
    assert chat_bodies(stub) == []


def json_against_plain(stub, a_extra: str = ""):
    """``run --compare`` on the stub: side A asks for JSON (and ``a_extra``), side B plain."""
    a = f"base-url={stub.url},model=stub-small,temperature=0,format=json{a_extra}"
    b = f"base-url={stub.url},model=stub-small,temperature=1"
    return vibechat("run", "--compare", a, b, "-p", "Is it?", "--json", "--no-save")


def test_a_sides_own_format_asks_json_of_that_side_only(stub):
    stub.reply = '{"answer": "yes"}'
    out = json_against_plain(stub)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["a"]["structured_output"] == "complete"
    assert "structured_output" not in obj["b"]
    assert obj["differs"]["output_format"]["b"] is None
    formats = {body["temperature"]: body.get("response_format") for body in chat_bodies(stub)}
    assert formats[0.0] is not None and formats[1.0] is None


def test_a_structured_reply_cut_short_exits_3_as_run_does(stub):
    # The stub cuts its reply at max_tokens words (finish_reason "length").
    stub.reply = '{"answer": "yes, it is, as far as I know"}'
    out = json_against_plain(stub, ",max_tokens=2")
    assert out.returncode == 3, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("vibechat: side A: the reply hit the 2-token limit"), line
    obj = json.loads(out.stdout)
    assert obj["a"]["structured_output"] == "incomplete"
    assert obj["a"]["finish_reason"] == "length" and "error" not in obj["a"]
    assert obj["b"]["text"] == stub.reply


def test_a_prompts_file_runs_every_line_through_both_sides(stub, tmp_path):
    stub.reply = "Yes."
    prompts = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": "One?", "id": "q1"},
        {"prompt": "Two?"},
        {"oops": 1},
        {"prompt": "Three?", "temperature": 0.5},
    ]
    prompts.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    a = f"base-url={stub.url},model=stub-small,temperature=0"
    b = f"base-url={stub.url},model=stub-small,temperature=1"
    out = vibechat("run", "--prompts-file", str(prompts), "--compare", a, b, "--no-save")
    # The bad line fails the run; the others are answered.
    assert out.returncode == 1
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert results[0]["id"] == "q1"
    for result in results[:2]:
        assert result["a"]["text"] == result["b"]["text"] == "Yes."
        assert result["differs"]["temperature"] == {"a": 0.0, "b": 1.0}
    assert "error" in results[2] and "a" not in results[2]
    # A line's own sampling settings would be ignored: the line is refused instead.
    assert "drop temperature" in results[3]["error"] and "a" not in results[3]


# Two sides on the starter that differ by their temperature (B with its own seed).
TWO_TEMPERATURES = ("temperature=0,max_tokens=8", "temperature=1.0,seed=3,max_tokens=8")


@pytest.mark.model
def test_the_same_local_model_answers_both_sides_at_once(starter_installed):
    out = vibechat(
        "run",
        "--compare",
        *TWO_TEMPERATURES,
        "-p",
        "What is the capital of France?",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["paired"] is True
    a, b = obj["a"], obj["b"]
    assert a["text"].strip() and b["text"].strip()
    assert b["params"]["seed"] == 3 and a["params"]["temperature"] == 0.0
    # The shared prompt was evaluated once: one prompt's tokens, and its last token again.
    prompt = a["stats"]["prompt_tokens"]
    evaluated = a["stats"]["prompt_tokens_evaluated"] + b["stats"]["prompt_tokens_evaluated"]
    assert evaluated == prompt + 1
    conversation = shown(a["conversation_id"])
    assert len([m for m in conversation["tree"] if m["role"] == "assistant"]) == 2


@pytest.mark.model
def test_json_schema_reaches_both_sides_of_a_pair(starter_installed, tmp_path):
    schema = tmp_path / "answer.json"
    # An enum and little whitespace: each reply completes well within its limit.
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"answer": {"enum": ["yes", "no"]}},
                "required": ["answer"],
                "additionalProperties": False,
            }
        )
    )
    out = vibechat(
        "run",
        "--compare",
        "temperature=0,max_tokens=200",
        "temperature=0.9,seed=3,max_tokens=200",
        "--json-schema",
        str(schema),
        "-p",
        "Is Paris the capital of France?",
        "--json",
        "--no-save",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["paired"] is True
    for side in ("a", "b"):
        assert obj[side]["finish_reason"] == "stop", obj[side]
        assert json.loads(obj[side]["text"])["answer"] in ("yes", "no")
    assert "output_format" not in obj["differs"]


@pytest.mark.model
def test_a_missing_local_model_is_one_line_and_the_starter_answers(starter_installed, tmp_path):
    missing = tmp_path / "nowhere.gguf"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say hi."}) + "\n")
    out = vibechat(
        "run",
        "--prompts-file",
        str(prompts),
        "--compare",
        "temperature=0,max_tokens=6",
        f"model={missing}",
        "--no-save",
    )
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: side B: "), out.stderr
    result = json.loads(out.stdout)
    assert result["a"]["text"].strip() and result["paired"] is False
    assert "nowhere.gguf" in result["b"]["error"]["message"]


@pytest.mark.model
def test_a_thinking_budget_too_big_for_one_side_fails_only_that_side(
    starter_installed, monkeypatch
):
    monkeypatch.setenv("VIBECHAT_CONTEXT_SIZE", "2048")
    out = vibechat(
        "run",
        "--compare",
        "temperature=0,max_tokens=6,think_budget=100000",
        "temperature=0,max_tokens=6",
        "-p",
        "Say hi.",
        "--json",
        "--no-save",
    )
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("vibechat: side A: think budget 100,000 is beyond"), line
    obj = json.loads(out.stdout)
    assert "2,048" in obj["a"]["error"]["message"] and obj["a"]["text"] == ""
    assert "error" not in obj["b"] and obj["b"]["finish_reason"] in ("stop", "length")


@pytest.mark.model
def test_an_image_to_the_starter_is_one_line_for_each_side(starter_installed, tmp_path):
    from PIL import Image

    picture = tmp_path / "dot.png"
    Image.new("RGB", (12, 8), (10, 200, 30)).save(picture, "PNG")
    args = ("--image", str(picture), "-p", "What is this?", "--json")
    out = vibechat("run", "--compare", "temperature=0", "temperature=1", *args)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert [line[:17] for line in lines] == ["vibechat: side A:", "vibechat: side B:"], lines
    assert all("takes no images" in line and "--mmproj" in line for line in lines)
    obj = json.loads(out.stdout)
    assert obj["a"]["conversation_id"] is None and obj["b"]["text"] == ""


# Over 256 tokens (the least a KV snapshot is kept of: engine/llama/kv_snapshots.py).
STORY = (
    "Here is a short history of Rome, to read before the question that follows it. "
    "Rome began as a small settlement of farmers and shepherds on hills beside the river "
    "Tiber, grew into a city ruled by kings, then a republic governed by elected consuls and "
    "a senate of its leading families, and finally an empire that stretched from Britain to "
    "Egypt and from Spain to the borders of Persia. "
) * 4


@pytest.mark.model
def test_run_continue_after_a_compare_restores_side_as_snapshot(starter_installed, monkeypatch):
    monkeypatch.setenv("VIBECHAT_CONTEXT_SIZE", "2048")
    out = vibechat(
        "run",
        "--compare",
        *TWO_TEMPERATURES,
        "-p",
        STORY + "Who founded Rome?",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["paired"] is True
    again = vibechat("run", "--continue", "-p", "And then?", "-t", "0", "-n", "4", "--json")
    assert again.returncode == 0, again.stderr
    stats = json.loads(again.stdout)["stats"]
    # Side A's prompt and reply came back from its snapshot instead of being evaluated.
    assert stats["restored_tokens"] > 256, stats
    assert stats["prompt_tokens_evaluated"] == stats["prompt_tokens"] - stats["restored_tokens"]
