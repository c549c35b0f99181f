"""Reasoning effort and the thinking budget as settings (issue 45, points 3, 4 and 6): the efforts
(low, medium, high) reach gpt-oss's template as its reasoning_effort, turn an on/off switch on
(and say once that the model has no levels), and go to a server as its reasoning_effort field;
the budget's flag, config key and /think budget, its one-line refusals (0, negative, beyond the
context), what a server is sent, what `run --json` says, and the status bar while a reply thinks.
Servers are the real stub on 127.0.0.1 (tests/openai_stub.py); the engine's own budget on the
real starter is tests/engine/llama/test_think_budget.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fakes import INFO, RecordingBackend, send, settle
from helpers import notices, was_notified
from test_think_switch import GPT_OSS, GRANITE, HI, QWEN3, SIZE, render, vibechat
from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.settings.config import load_config
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.preset_file import load_presets
from vibechat.engine.settings.think_switch import (
    check_budget,
    check_think_budget_message,
    remote_effort,
    unswitchable,
)


# ------------------------------------------------------------------ efforts
def test_efforts_reach_gpt_oss_as_its_reasoning_effort():
    for effort in ("low", "medium", "high"):
        assert f"Reasoning: {effort}<|end|>" in render(GPT_OSS, effort), effort
    assert "Reasoning: low<|end|>" in render(GPT_OSS, "off")  # no full off, as before
    assert unswitchable(None, "reasoning_effort", "high") is None


def test_an_effort_turns_an_on_off_switch_on_and_says_the_model_has_no_levels():
    assert render(QWEN3, "low") == render(QWEN3, "high") == render(QWEN3, "on")
    assert render(GRANITE, "medium") == render(GRANITE, "on") != render(GRANITE, "off")
    said = unswitchable(None, "enable_thinking", "low")
    assert said is not None and "\n" not in said
    assert "has no levels" in said and "thinking is on" in said
    assert unswitchable(None, "enable_thinking", "on") is None
    # A server's template is not known here: it is asked.
    assert unswitchable("http://127.0.0.1:1/v1", "enable_thinking", "low") is None
    assert "has no switch for thinking" in (unswitchable(None, None, "high") or "")


def test_efforts_check_and_travel_with_the_parameters():
    assert SamplingParams(thinking="HIGH").thinking == "high"
    assert SamplingParams().set_from_text("think", "med").thinking == "medium"
    high = SamplingParams(thinking="low")
    assert SamplingParams.from_dict(high.to_dict()) == high
    assert remote_effort("high") == "high" and remote_effort("on") is None
    with pytest.raises(InvalidParameterError, match="auto, on, off, low, medium, high"):
        SamplingParams(thinking="extreme")


def test_the_remote_backend_sends_reasoning_effort_for_an_effort_only(stub):
    backend = stub.backend()
    for mode, effort, kwargs in (
        ("high", "high", {"enable_thinking": True}),
        ("low", "low", {"enable_thinking": True}),
        ("on", None, {"enable_thinking": True}),
        ("off", None, {"enable_thinking": False}),
        ("auto", None, None),
    ):
        list(backend.stream_chat(HI, SamplingParams(seed=1, thinking=mode)))
        body = stub.last_body
        assert body.get("reasoning_effort") == effort, mode
        assert body.get("chat_template_kwargs") == kwargs, mode


# ------------------------------------------------------------------ the budget
def test_the_budget_checks_and_travels_with_the_parameters(tmp_path: Path):
    assert SamplingParams().think_budget is None
    assert "think_budget" not in SamplingParams().to_dict()  # older readers of saved parameters
    budget = SamplingParams().set_from_text("think_budget", "256")
    assert budget.think_budget == 256 and SamplingParams.from_dict(budget.to_dict()) == budget
    assert budget.set_from_text("think-budget", "off").think_budget is None
    for bad in ("0", "-5"):
        with pytest.raises(InvalidParameterError) as refused:
            SamplingParams().set_from_text("think_budget", bad)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("think_budget must be between 1 and")
        assert "'none'" in message
    with pytest.raises(InvalidParameterError, match=r"beyond the model's context \(4,096 tokens\)"):
        check_budget(4096, 4096)
    check_budget(4095, 4096)
    path = tmp_path / "config.toml"
    path.write_text('think_budget_message = "Enough.\\n"\n[params]\nthink_budget = 512\n')
    loaded = load_config(path, environ={})
    assert loaded.config.params.think_budget == 512
    assert loaded.config.think_budget_message == "Enough.\n"
    path.write_text("[params]\nthink_budget = 0\n")
    problem = load_config(path, environ={}).problem
    assert problem is not None and "think_budget must be between 1 and" in problem


def test_a_preset_sets_the_effort_and_the_budget(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text(
        '[presets.quick]\nthinking = "low"\n[presets.quick.params]\nthink_budget = 128\n'
    )
    applied = load_presets(path).presets["quick"].over(SamplingParams())
    assert applied.thinking == "low" and applied.think_budget == 128
    path.write_text("[presets.quick.params]\nthink_budget = 0\n")
    book = load_presets(path)
    assert "quick" not in book.presets
    assert "think_budget must be between 1 and" in book.problems["quick"]


def test_the_closing_phrase_is_bounded_text():
    assert check_think_budget_message("Time is up.\n") == "Time is up.\n"
    for bad in ("x" * 1001, "stop\x1b[2J", 5):
        with pytest.raises(InvalidParameterError, match="think_budget_message"):
            check_think_budget_message(bad)


def test_a_server_is_sent_the_budget_as_llama_server_and_vllm_take_it(stub):
    backend = stub.backend()
    events = list(backend.stream_chat(HI, SamplingParams(seed=1, think_budget=300)))
    body = stub.last_body
    assert body["thinking_budget_tokens"] == 300 and body["thinking_token_budget"] == 300
    stats = events[-1].stats
    # Sent; whether the server's thinking reached it, the server does not say.
    assert stats.think_budget == 300 and stats.think_budget_reached is None
    list(backend.stream_chat(HI, SamplingParams(seed=1)))
    assert "thinking_budget_tokens" not in stub.last_body


def test_run_takes_think_and_think_budget_and_reports_them_in_json(stub):
    server = ["--base-url", stub.url, "--model", "stub-small", "--no-save"]
    out = vibechat("run", *server, "-p", "Hi", "--think", "high", "--think-budget", "128", "--json")
    assert out.returncode == 0, out.stderr
    body = stub.last_body
    assert body["reasoning_effort"] == "high" and body["thinking_budget_tokens"] == 128
    obj = json.loads(out.stdout)
    assert obj["params"]["thinking"] == "high" and obj["params"]["think_budget"] == 128
    stats = obj["stats"]
    assert {"thinking_tokens", "think_budget", "think_budget_reached"} <= set(stats)
    assert stats["think_budget"] == 128 and stats["think_budget_reached"] is None


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_run_refuses_a_budget_of_zero_or_less_in_one_line_and_sends_nothing(stub, budget):
    server = ["--base-url", stub.url, "--model", "stub-small", "--no-save"]
    sent = len(stub.requests)
    out = vibechat("run", *server, "-p", "Hi", "--think-budget", budget)
    assert out.returncode != 0 and not out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"think_budget must be between 1 and 1000000 (or 'none') (got {budget})" in lines[0]
    assert "Traceback" not in out.stderr
    assert not [r for r in stub.requests[sent:] if r["path"].endswith("/chat/completions")]


# ------------------------------------------------------------------- the chat
async def test_think_high_and_a_budget_in_the_chat_reach_the_server(stub):
    from vibechat.app.tui import create_app

    app = create_app(stub.backend(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/think high")
        assert was_notified(app, "Thinking high for the next replies")
        await send(pilot, "/think budget 300")
        assert was_notified(app, "Thinking budget 300 tokens for the next replies")
        assert "think high" in app.status.render().plain
        assert "budget 300" in app.status.render().plain
        await send(pilot, "Hello")
        body = stub.last_body
        assert body["reasoning_effort"] == "high" and body["thinking_budget_tokens"] == 300
        # Refused in one line, and nothing changes.
        await send(pilot, "/think budget 0")
        assert was_notified(app, "think_budget must be between 1 and")
        await send(pilot, "Again")
        assert stub.last_body["thinking_budget_tokens"] == 300
        await send(pilot, "/think budget off")
        assert was_notified(app, "No thinking budget")
        await send(pilot, "Once more")
        assert "thinking_budget_tokens" not in stub.last_body
        assert "budget" not in app.status.render().plain


async def test_the_chat_refuses_a_budget_beyond_the_context_and_says_a_model_has_no_levels():
    from vibechat.app.tui import create_app

    backend = RecordingBackend(
        "Sure.", replace(INFO, thinking_switch="enable_thinking", context_size=2048)
    )
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/think budget 5000")
        assert was_notified(app, "think budget 5,000 is beyond the model's context (2,048 tokens)")
        assert app.session.conversation.params.think_budget is None
        await send(pilot, "/think low")
        messages = notices(app)
        assert any("has no levels: thinking is on" in m for m in messages), messages
        await send(pilot, "Hi")
        assert backend.requests[-1][1].thinking == "low"
