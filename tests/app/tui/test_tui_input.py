"""The input is the user's: typing ahead while a reply streams (or the model loads) queues the
message instead of moving or merging it, a paste is one unit, and Ctrl+N during a reply stops
it and starts afresh. A real Textual app (Pilot) on a real SQLite history, with a recording
backend whose replies the test holds open piece by piece (the real model: test_tui_model.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual import events

from fakes import OnePieceAtATime, settle
from helpers import notifications, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.messages import ChatMessageWidget
from vibechat.app.tui.widgets.prompt_input import QUEUE_FULL
from vibechat.app.tui.widgets.queued_note import QueuedNote
from vibechat.engine.chat.history import History
from vibechat.engine.errors import RemoteServerError
from vibechat.engine.turns.backend import TextDelta

SIZE = (110, 36)
REPLY = "one two three four five six"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


@pytest.fixture
def fake_backend() -> OnePieceAtATime:
    """Each piece of a reply waits for the test's ``fake_backend.step.release()``."""
    return OnePieceAtATime(REPLY)


async def start_reply(pilot, text: str = "first") -> None:
    """Send ``text``; its reply is held open (no piece released yet)."""
    app = pilot.app
    await settle(pilot)
    app.prompt_input.load_text(text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.generating, "the reply to start")


def user_turns(app) -> list[str]:
    return [t.content for t in app.conversation.turns if t.role == "user"]


async def answered(pilot, *prompts: str) -> None:
    """Wait until the conversation is ``prompts``, each answered, and no reply is on its way."""
    app = pilot.app
    await wait_for(
        pilot,
        lambda: (
            user_turns(app) == list(prompts)
            and len(app.conversation.turns) == 2 * len(prompts)
            and not app.generating
        ),
        f"the replies to {prompts}",
    )
    await settle(pilot)


def note(app) -> str | None:
    """The queued message's line above the input, as shown (None: not there)."""
    notes = list(app.query(QueuedNote))
    return str(notes[0].render()) if notes else None


def saved(db: Path) -> list[tuple[str, str, str]]:
    with History(db) as history:
        return [(m.role, m.content, m.status) for m in history.get(history.latest().id).messages]


async def test_enter_while_a_reply_streams_queues_the_message_and_typing_goes_on_in_order(
    fake_backend, db
):
    """Issue 30: typing AAA, Enter, CCC while a reply streams gave "CCCAAA" (the cursor jumped to
    the start), and a garbled message was sent. Now AAA waits, shown above the input; CCC stays as
    typed, its cursor where it was, through the reply's end and the queued message's own reply."""
    app = create_app(fake_backend, blink=False, history=History(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await start_reply(pilot)
        await pilot.press("A", "A", "A", "enter")
        await wait_for(pilot, lambda: note(app) is not None, "the queued line")
        assert app.prompt_input.text == "" and app.prompt_input.queued == "AAA"
        assert "queued" in note(app) and "AAA" in note(app)
        await pilot.press("C", "C", "C", "left")
        assert app.prompt_input.text == "CCC" and app.prompt_input.cursor_location == (0, 2)
        assert not was_notified(app, "Still answering")
        assert user_turns(app) == ["first"]  # not sent yet

        fake_backend.step.release(100)  # the reply ends on its own: the queued message goes next
        await answered(pilot, "first", "AAA")
        assert user_turns(app) == ["first", "AAA"]
        assert [(w.role, w.text) for w in app.chat.messages()] == [
            ("user", "first"),
            ("assistant", REPLY),
            ("user", "AAA"),
            ("assistant", REPLY),
        ]
        assert fake_backend.requests[-1][0][-1].content == "AAA"
        assert note(app) is None and app.prompt_input.queued is None
        assert app.prompt_input.text == "CCC" and app.prompt_input.cursor_location == (0, 2)
    assert saved(db) == [
        ("user", "first", "complete"),
        ("assistant", REPLY, "complete"),
        ("user", "AAA", "complete"),
        ("assistant", REPLY, "complete"),
    ]


async def test_only_one_message_waits_a_second_enter_keeps_its_text_where_it_is(fake_backend):
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await start_reply(pilot)
        await pilot.press("A", "A", "A", "enter", "B", "B", "B", "left", "enter")
        await pilot.pause()
        assert app.prompt_input.queued == "AAA"
        assert app.prompt_input.text == "BBB" and app.prompt_input.cursor_location == (0, 2)
        assert any(n.message == QUEUE_FULL for n in notifications(app))
        fake_backend.step.release(100)
        await answered(pilot, "first", "AAA")
        assert app.prompt_input.text == "BBB"  # never sent on its own


async def test_escape_stops_the_reply_and_gives_the_queued_message_back_unsent(fake_backend, db):
    """Esc: the reply stops as always (saved as stopped), and the queued message is the user's
    again, before the draft they went on typing (whose cursor stays on its character)."""
    app = create_app(fake_backend, blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot)
        fake_backend.step.release()  # one piece of the reply
        await wait_for(
            pilot,
            lambda: fake_backend.requests and app.chat.messages()[-1].text == "one",
            "the first piece",
        )
        await pilot.press("A", "A", "A", "enter", "B", "B", "B")
        await wait_for(pilot, lambda: note(app) is not None, "the queued line")
        await pilot.press("escape")
        assert app.prompt_input.queued is None
        assert app.prompt_input.text == "AAA\nBBB" and app.prompt_input.cursor_location == (1, 3)
        fake_backend.step.release(100)
        await settle(pilot)
        await wait_for(pilot, lambda: note(app) is None, "the queued line to go")
        assert len(fake_backend.requests) == 1 and user_turns(app) == ["first"]
        stopped = app.chat.messages()[-1]
        assert (
            stopped.has_class("-stopped")
            and stopped.text.startswith("one")
            and stopped.text != REPLY
        )
        await pilot.press("Z")  # typing goes on where the cursor was
        assert app.prompt_input.text == "AAA\nBBBZ"
    assert saved(db) == [("user", "first", "complete"), ("assistant", stopped.text, "stopped")]


async def test_up_takes_the_queued_message_back_to_edit_and_enter_queues_it_again(fake_backend):
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot)
        await pilot.press("A", "A", "A", "enter")
        await wait_for(pilot, lambda: note(app) is not None, "the queued line")
        await pilot.press(
            "up"
        )  # an empty input: the queued message comes back (not an older prompt)
        await wait_for(pilot, lambda: note(app) is None, "the queued line to go")
        assert app.prompt_input.text == "AAA" and app.prompt_input.queued is None
        assert app.prompt_input.cursor_location == (0, 3)
        await pilot.press("B", "enter")
        assert app.prompt_input.queued == "AAAB" and app.prompt_input.text == ""
        fake_backend.step.release(100)
        await answered(pilot, "first", "AAAB")


async def test_a_queued_message_is_not_sent_after_a_failed_reply_but_given_back(db):
    """A reply that fails: the error is to be read first; the queued message is back in the
    input, unsent (the failed reply is saved with its error, as always)."""

    class Failing(OnePieceAtATime):
        def stream_chat(self, messages, params):
            for event in super().stream_chat(messages, params):
                if isinstance(event, TextDelta):
                    raise RemoteServerError(
                        "the server went away (HTTP 502): try again once it is back."
                    )
                yield event

    backend = Failing(REPLY)
    app = create_app(backend, blink=False, history=History(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await start_reply(pilot)
        await pilot.press("A", "A", "A", "enter")
        await wait_for(pilot, lambda: note(app) is not None, "the queued line")
        backend.step.release(100)
        await settle(pilot)
        await wait_for(pilot, lambda: note(app) is None, "the queued line to go")
        assert app.prompt_input.text == "AAA" and app.prompt_input.queued is None
        assert len(backend.requests) == 1
        assert was_notified(app, "went away")
    assert [(role, content) for role, content, _status in saved(db)] == [
        ("user", "first"),
        ("assistant", ""),
    ]


async def test_enter_while_the_model_loads_sends_the_first_message_and_queues_the_next(
    fake_backend,
):
    """While the model loads, the first message is sent (its reply waits for the model) and the
    next one waits in the queue, as while a reply streams."""
    loading = threading.Event()
    load = fake_backend.load

    def slow_load(on_progress=None):
        loading.wait(60)
        return load(on_progress)

    fake_backend.load = slow_load
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not app.model_ready
        await pilot.press("o", "n", "e", "enter")
        await wait_for(pilot, lambda: app.generating, "the reply waiting for the model")
        await pilot.press("t", "w", "o", "enter", "x")
        assert app.prompt_input.queued == "two" and app.prompt_input.text == "x"
        loading.set()
        fake_backend.step.release(100)
        await answered(pilot, "one", "two")
        assert [m[0][-1].content for m in fake_backend.requests] == ["one", "two"]
        assert app.prompt_input.text == "x"


async def test_a_paste_is_one_unit_at_the_cursor_and_enter_sends_it_once(fake_backend):
    """A paste with line breaks is inserted whole at the cursor, never sent by its own line
    breaks; on a focused message (after a Ctrl+F jump, say) it goes to the input, whole, and
    the input has the focus, so the Enter that follows sends the text once."""
    fake_backend.step.release(1000)  # replies flow
    pasted = "Zanzibar also\nlikes tuna.\n\nAnd fish."
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("Note: ")
        app.prompt_input.move_cursor((0, 6))
        app.post_message(events.Paste(pasted))
        await pilot.pause()
        assert app.prompt_input.text == "Note: " + pasted and not fake_backend.requests
        await pilot.press("enter")
        await settle(pilot)
        assert user_turns(app) == ["Note: " + pasted]

        app.chat.messages()[0].focus()  # a message has the focus, as after a Ctrl+F jump
        await pilot.pause()
        app.post_message(events.Paste(pasted))
        await wait_for(pilot, lambda: app.prompt_input.has_focus, "the input to take the paste")
        assert app.prompt_input.text == pasted and len(fake_backend.requests) == 1
        await pilot.press("enter")
        await settle(pilot)
        assert user_turns(app) == ["Note: " + pasted, pasted]
        assert app.prompt_input.text == ""


async def test_a_paste_while_a_reply_streams_is_queued_whole(fake_backend):
    pasted = "line one\nline two"
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot)
        app.post_message(events.Paste(pasted))
        await pilot.pause()
        assert app.prompt_input.text == pasted
        await pilot.press("enter")
        assert app.prompt_input.queued == pasted and app.prompt_input.text == ""
        fake_backend.step.release(100)
        await answered(pilot, "first", pasted)


async def test_ctrl_n_while_a_reply_streams_stops_it_and_starts_a_new_conversation(
    fake_backend, db
):
    """Ctrl+N during a reply: the reply stops (saved as stopped, with its text so far, as Esc
    does) and a new conversation starts; a queued message comes back into its input, unsent."""
    app = create_app(fake_backend, blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot)
        fake_backend.step.release()
        await wait_for(pilot, lambda: app.chat.messages()[-1].text == "one", "the first piece")
        await pilot.press("A", "A", "A", "enter")
        await wait_for(pilot, lambda: note(app) is not None, "the queued line")
        first_id = app.chatlog.conversation_id
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not app.generating
        assert app.chat.messages() == [] and app.conversation.turns == []
        assert app.prompt_input.text == "AAA" and app.prompt_input.queued is None
        await wait_for(pilot, lambda: note(app) is None, "the queued line to go")
        fake_backend.step.release(100)
        await settle(pilot)
        assert len(fake_backend.requests) == 1  # nothing was sent on its own
        await pilot.press("enter")  # the new conversation's first message
        await settle(pilot)
        assert [(w.role, w.text) for w in app.chat.query(ChatMessageWidget)] == [
            ("user", "AAA"),
            ("assistant", REPLY),
        ]
        assert app.chatlog.conversation_id != first_id
    with History(db) as history:
        first = history.get(first_id)
        assert [(m.role, m.content, m.status) for m in first.messages] == [
            ("user", "first", "complete"),
            ("assistant", "one", "stopped"),
        ]


async def test_ctrl_l_keeps_the_draft_in_the_input(fake_backend):
    """Ctrl+L takes the last message back without losing what was being typed: it goes on its
    own line before the draft, whose cursor stays on its character."""
    fake_backend.step.release(1000)
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("last message")
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("d", "r", "a", "f", "t", "left")
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert app.prompt_input.text == "last message\ndraft"
        assert app.prompt_input.cursor_location == (1, 4)
        assert app.conversation.turns == []


@pytest.mark.parametrize("line_break", ["\r", "\r\n", "\n"], ids=["CR", "CRLF", "LF"])
async def test_a_pastes_line_breaks_are_kept_whatever_the_terminal_sends_for_them(
    fake_backend, line_break
):
    """xterm-style terminals and tmux send a bracketed paste's line breaks as CR, Windows text
    brings CRLF: each is a line break in the input and in the prompt sent, never lost."""
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(events.Paste(line_break.join(["alpha", "beta", "gamma"]) + line_break))
        await pilot.pause()
        assert app.prompt_input.text == "alpha\nbeta\ngamma\n"
        assert app.prompt_input.document.line_count == 4
        fake_backend.step.release(100)
        await pilot.press("enter")
        await answered(pilot, "alpha\nbeta\ngamma\n")
