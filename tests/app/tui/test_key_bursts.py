"""Keys that arrive together (a paste without brackets, a fast typist, tmux's ``send-keys``, a
terminal that batches its reads) are handled in order, as keys typed one by one are. Each test
hands the app a burst of key events at once, as the terminal driver does for one read (no pause
between them), on a real Textual app (Pilot) and a real SQLite history."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from textual import events
from textual.keys import _character_to_key, _get_unicode_name_from_key

from fakes import RecordingBackend, settle
from helpers import keep_notifications, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.history_screens import SearchScreen
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationDone

SIZE = (100, 30)


def key_event(key: str) -> events.Key:
    """The event the terminal driver makes for ``key``: one character (as typed), or a key's
    name."""
    if len(key) == 1:
        return events.Key(_character_to_key(key) if not key.isalnum() else key, key)
    try:
        character: str | None = unicodedata.lookup(_get_unicode_name_from_key(key))
    except KeyError:
        character = None
    return events.Key(key, character)


def burst(app, *keys: str) -> None:
    """``keys`` arrive in one read: all queued at once, none handled before the next arrives."""
    assert app._driver is not None
    for key in keys:
        event = key_event(key)
        event.set_sender(app)
        app._driver.send_message(event)


async def landed(pilot) -> None:
    """Let the app handle what it was sent (each key, and every message it led to)."""
    for _ in range(5):
        await pilot.pause()
    await settle(pilot)


def seed(db: Path, *titles: str) -> None:
    with History(db) as history:
        for title in titles:
            chat = ChatLog(Conversation(), history, model="Fake 1B")
            chat.add_user(title)
            chat.finish_reply(chat.start_reply(), GenerationDone("ok"))


async def test_ctrl_u_then_text_in_one_burst_keeps_the_whole_text(tmp_path: Path):
    """The reported case: tmux sent Ctrl+U and a sentence in one go; the line was cleared after
    the sentence's start had been typed, so its start was lost."""
    app = create_app(RecordingBackend(reply="ok"), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("an old draft")
        app.prompt_input.move_cursor(app.prompt_input.document.end)
        burst(app, "ctrl+u", *"hello there")
        await landed(pilot)
        assert app.prompt_input.text == "hello there"


async def test_editing_keys_in_a_burst_act_where_they_were_pressed(tmp_path: Path):
    """Backspace, the arrows and Ctrl+W among typed characters act at the point in the text
    where they came, as they do typed one by one."""
    app = create_app(RecordingBackend(reply="ok"), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        burst(
            app,
            *"helo",
            "backspace",
            *"lo",
            "left",
            "left",
            "backspace",
            "l",
            "end",
            *" wor",
            "ctrl+w",
            *"world",
        )
        await landed(pilot)
        assert app.prompt_input.text == "hello world"


async def test_slash_d_and_enter_typed_as_search_opens_go_to_the_search(tmp_path: Path):
    """The reported case: Ctrl+F and "/d" Enter from tmux in one go opened the delete question
    over the search (the list's old ``/`` and ``d``). Keys that arrive while the search opens
    are the search's: typed into its field, in order; nothing else acts on them."""
    db = tmp_path / "history.db"
    seed(db, "keep me", "and me")
    app = create_app(RecordingBackend(reply="ok"), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")  # the list open and focused, as it was
        await settle(pilot)
        burst(app, "ctrl+f", "/", "d", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen), "the search")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, SearchScreen) and not isinstance(screen, ConfirmScreen)
        assert screen.query_one("#search-input").value == "/d"
        assert app.prompt_input.text == ""
        with History(db) as other:
            assert other.count() == 2


async def test_slash_d_and_enter_typed_fast_on_the_conversation_list_open_no_delete_question(
    tmp_path: Path, monkeypatch
):
    """The reported case: "/d" Enter from tmux on the conversation list. The list's old ``/`` opened
    the search once the key had bubbled up to the app, and the ``d`` that came with it, still on the
    list, opened the delete question over it. The list acts on no letter now: what is typed there
    goes to the input, in order."""
    db = tmp_path / "history.db"
    seed(db, "keep me", "and me")
    keep_notifications(monkeypatch)
    app = create_app(RecordingBackend(reply="ok"), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")  # the list open and focused
        await settle(pilot)
        burst(app, "/", "d", "enter")
        await landed(pilot)
        assert app.screen is app.default_screen  # no question, no dialog
        with History(db) as other:
            assert other.count() == 2
        # As typed one by one: "/d" in the input, and Enter there sends it (an unknown command:
        # said).
        assert app.session.chat.conversation_id is None  # the Enter opened nothing from the list
        assert app.prompt_input.has_focus and app.prompt_input.prompt_history == ["/d"]
        assert was_notified(app, "Unknown command /d")
