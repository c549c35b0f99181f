"""The chat's /compare when the chat talks to an OpenAI-compatible server (issue 44 point 1): the
same server model at two settings, side B on a connection of its own, the two requests in
parallel. A real Textual app (Pilot) on a real SQLite file against the stub server on
127.0.0.1 (tests/openai_stub.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fakes import send, settle
from helpers import notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.compare_view import CompareView
from vibechat.engine.chat.history import History

SIZE = (120, 36)


def completions(stub) -> list[dict]:
    return [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]


async def compared(pilot, spec: str) -> CompareView:
    """``/compare SPEC`` armed, a prompt sent and both sides settled: the comparison's view."""
    await settle(pilot)
    await send(pilot, f"/compare {spec}")
    await send(pilot, "Say hello.")
    await settle(pilot)
    return list(pilot.app.chat.query(CompareView))[-1]


async def test_compare_on_a_server_asks_the_same_model_twice_at_two_settings(stub, tmp_path):
    history = History(tmp_path / "history.db")
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        view = await compared(pilot, "temperature=1.2")
        assert not [n for n in notices(app) if "one reply at a time" in n]
        assert [reply.text for reply in view.replies] == [stub.reply, stub.reply]
        bodies = completions(stub)
        assert len(bodies) == 2 and {b["model"] for b in bodies} == {"stub-small"}
        temperatures = sorted(b["temperature"] for b in bodies)
        assert temperatures[1] == 1.2 and temperatures[0] == app.conversation.params.temperature
        heads = [str(c.head.render()) for c in view.columns]
        assert "temperature=1.2" in heads[1]
    stored = history.get(history.latest().id)
    reply = next(m for m in stored.messages if m.role == "assistant")
    assert len(history.siblings(reply.id)) == 2


async def test_the_two_server_requests_run_in_parallel_and_esc_stops_both(stub, tmp_path: Path):
    stub.mode, stub.cut_after = "stall", 3
    app = create_app(stub.backend(), blink=False, history=History(tmp_path / "history.db"))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/compare temperature=1.2")
        await send(pilot, "Say hello.", wait=False)
        # Both requests stall on the server after three words: each column shows them, which
        # only one request at a time could not do.
        await wait_for(pilot, lambda: list(app.chat.query(CompareView)))
        view = list(app.chat.query(CompareView))[-1]
        partial = "Hello there, this"
        await wait_for(pilot, lambda: [r.text for r in view.replies] == [partial, partial])
        assert len(completions(stub)) == 2
        await pilot.press("escape")
        await wait_for(pilot, lambda: not app.state.generating)
        stub.release.set()
        assert [r.text for r in view.replies] == [partial, partial]
        assert all("stopped" in str(r.status_shown) for r in view.replies)


async def test_each_side_has_what_a_normal_reply_has(stub, tmp_path: Path):
    """Point 5 on a server: the prompt's text file reaches both sides, /format json applies to
    both, and each column shows its side's thinking block, saved with its reply."""
    stub.reasoning = ["The user greets me.\n", "I should greet back."]
    stub.reply = '{"greeting": "hello"}'
    notes = tmp_path / "notes.txt"
    notes.write_text("the secret word is heron\n", encoding="utf-8")
    history = History(tmp_path / "history.db")
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/format json")
        await send(pilot, f"/file {notes}")
        await send(pilot, "/compare temperature=1.2")
        await send(pilot, "Say hello.")
        await settle(pilot)
        view = list(app.chat.query(CompareView))[-1]
        bodies = completions(stub)
        assert len(bodies) == 2
        for body in bodies:
            assert "heron" in json.dumps(body["messages"])
            assert body["response_format"]["type"] == "json_object"
        for reply in view.replies:
            assert json.loads(reply.text) == {"greeting": "hello"}
            assert reply.thinking is not None
            assert "I should greet back." in reply.thinking.text
    stored = history.get(history.latest().id)
    reply = next(m for m in stored.messages if m.role == "assistant")
    siblings = history.siblings(reply.id)
    assert len(siblings) == 2
    saved = [history.message(row) for row in siblings]
    assert all("I should greet back." in (m.thinking or "") for m in saved if m is not None)
    assert all(m is not None for m in saved)


def test_side_b_on_the_chats_server_keeps_the_address_as_the_chat_was_given_it(stub):
    """The twin connection uses the chat's base_url as given (what the shown address leaves
    out, such as credentials, kept), and the model in use; a local model has no twin."""
    from dataclasses import replace

    from vibechat.app.backends import same_server
    from vibechat.engine.settings.knobs import EngineSettings

    info = stub.backend().load()
    given = stub.url.replace("http://", "http://user:secret@")
    twin = same_server(EngineSettings(base_url=given), info)
    assert twin is not None
    assert twin.options.base_url == given and twin.options.model == "stub-small"
    assert same_server(EngineSettings(), info).options.base_url == stub.url
    assert same_server(EngineSettings(), replace(info, server=None)) is None


async def test_model_name_on_a_server_chat_asks_the_same_server_for_that_model(stub, tmp_path):
    """``/compare model:NAME`` in a chat on a server compares against the server's model NAME
    (as the server lists it), never a local model of that name; the chat's own model stays."""
    history = History(tmp_path / "history.db")
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        view = await compared(pilot, "model:stub-large")
        assert [reply.text for reply in view.replies] == [stub.reply, stub.reply]
        assert sorted(b["model"] for b in completions(stub)) == ["stub-large", "stub-small"]
        assert "stub-large" in str(view.columns[1].head.render())
        assert app.session.info is not None and app.session.info.name == "stub-small"
