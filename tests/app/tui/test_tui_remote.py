"""The chat on a remote backend (OpenAICompatibleBackend against the stub server on
127.0.0.1): the status bar and welcome name the server, F3 lists the server's models and
switches the model id, a cut stream keeps the partial reply, marked and saved
interrupted."""

from __future__ import annotations

from pathlib import Path

from fakes import send, settle
from helpers import was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.model_picker import RemoteModelPicker
from vibechat.engine.chat.history import History
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
from vibechat.engine.remote.options import OpenAIOptions

SIZE = (110, 36)


def status_text(widget) -> str:
    return widget.status_shown.plain


async def test_the_chat_on_a_server(stub, tmp_path: Path):
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model="stub-small"))
    app = create_app(backend, blink=False, history=History(tmp_path / "history.db"))
    server = f"http://127.0.0.1:{stub.port}"
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert f"stub-small · openai · {server} · ctx 0" in app.status.render().plain
        welcome = str(app.chat.query_one(".chat--empty").render())
        assert welcome.startswith(f"stub-small · openai · {server}\n")

        await send(pilot, "Say hello.")
        assert app.chat.messages()[-1].text == stub.reply
        assert app.status.stats.completion_tokens == len(stub.reply.split())
        assert "tok/s" in app.status.render().plain

        # F3: the server's models; choosing one switches the model id, a new conversation starts.
        await pilot.press("f3")
        picker = app.screen
        assert isinstance(picker, RemoteModelPicker)
        await picker.workers.wait_for_complete()
        await pilot.pause()
        table = picker.query_one("DataTable")
        assert picker.ids == ["stub-small", "stub-large"]
        assert table.get_row_at(0)[0] == "●"
        table.move_cursor(row=1)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.backend is backend and app.status.model.name == "stub-large"
        assert app.conversation.turns == [] and app.chat.messages() == []
        assert was_notified(app, "Switched to stub-large")
        await send(pilot, "Hello again.")
        assert stub.last_body["model"] == "stub-large"

        # The server drops the connection mid-reply: what arrived stays, marked interrupted.
        stub.mode = "cut"
        await send(pilot, "Tell me more.")
        reply = app.chat.messages()[-1]
        assert reply.text == "Hello there, this"
        assert "dropped mid-reply" in status_text(reply) and "interrupted" in status_text(reply)
        assert app.conversation.turns[-1].content == "Hello there, this"
        stored = app.history.get(app.chatlog.conversation_id)
        assert [m.status for m in stored.messages] == [
            "complete",
            "complete",
            "complete",
            "interrupted",
        ]

        # Reopened from the history, the reply still says why it stopped.
        cid = app.chatlog.conversation_id
        await pilot.press("ctrl+n")
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        assert "dropped mid-reply" in status_text(app.chat.messages()[-1])


async def test_a_server_that_is_down_is_explained_and_the_picker_says_so(tmp_path: Path):
    from openai_stub import refused_url

    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=refused_url(), model="m"))
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.status.state == "no model"
        assert was_notified(app, "connection refused")
        await pilot.press("f3")
        picker = app.screen
        assert isinstance(picker, RemoteModelPicker)
        await picker.workers.wait_for_complete()
        await pilot.pause()
        assert "connection refused" in str(picker.query_one("#picker-status").render())
        await pilot.press("escape")


async def failed_first_reply(app, pilot) -> None:
    """Send a prompt whose reply fails, and wait until the chat has said so."""
    from helpers import wait_for

    await settle(pilot)
    await send(pilot, "hello")
    await wait_for(pilot, lambda: not app.state.generating, "the failed reply to end")
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_the_status_bar_leaves_generating_when_nothing_listens_at_the_server(tmp_path: Path):
    # issue 39, point 7: a first reply that failed left "generating…" in the status bar
    from openai_stub import refused_url

    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=refused_url(), model="m"))
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await failed_first_reply(app, pilot)
        assert was_notified(app, "connection refused")
        assert app.state.status == "no model" and app.status.state == "no model"
        assert "generating" not in app.status.render().plain


async def test_the_status_bar_leaves_generating_when_the_server_refuses_the_key(
    stub, tmp_path: Path
):
    stub.api_key = "sk-right-key-0123456789"
    backend = OpenAICompatibleBackend(
        OpenAIOptions(base_url=stub.url, model="stub-small", api_key="sk-wrong-key-0123456789")
    )
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await failed_first_reply(app, pilot)
        assert stub.requests and was_notified(app, "Invalid API key")
        assert app.status.state == "no model" and "generating" not in app.status.render().plain
