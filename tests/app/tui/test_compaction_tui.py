"""Compaction and pins in the chat (issue 45): /compact shows the model's summary in a dialog to
accept (edited) or cancel, and the conversation goes on from a new branch that starts with it
(the original kept, ← on the summary); a summary that is empty replaces nothing, in one line;
Ctrl+U pins a message; a prompt trimmed to fit the context gets a marker where the left-out
messages end, and the meter says how many. A real Textual app (Pilot) on a real SQLite file,
with the recording backend: the model's words do not matter here (the real starter's runs are in
tests/engine/llama/test_context_policy.py and tests/app/test_context_policy_cli.py)."""

from __future__ import annotations

import dataclasses

import pytest
from textual.widgets import TextArea

from fakes import INFO, RecordingBackend, send, settle
from helpers import notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.summary import SummaryScreen
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import ContextTrimmed

SIZE = (110, 36)
LONG = "The launch code is 7-4-1 and the meeting moved to Tuesday at the harbour office. " * 3


@pytest.fixture
def saved_app(history: History):
    """An app (not running yet) whose chat is saved in ``history`` (a real SQLite file, conftest's
    fixture), on ``backend`` (a recording one replying "Noted." when none is given): returns the
    app and its backend."""

    def make(backend: RecordingBackend | None = None):
        backend = backend or RecordingBackend(reply="Noted.")
        return create_app(backend, blink=False, history=history), backend

    return make


def label(widget) -> str:
    return str(widget.label_shown)


async def chatted(pilot, backend: RecordingBackend) -> None:
    await settle(pilot)
    for prompt in (f"First: {LONG}", f"Second: {LONG}"):
        await send(pilot, prompt)
    backend.reply = "Code 7-4-1, meeting Tuesday."


async def summary_dialog(pilot) -> SummaryScreen:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen), "the summary dialog")
    screen = app.screen
    assert isinstance(screen, SummaryScreen)
    # Ctrl+Y counts once the dialog has been seen.
    await wait_for(pilot, lambda: screen.ready, "the dialog to take keys")
    return screen


async def test_compact_accepts_an_edited_summary_and_keeps_the_original(
    saved_app, history: History
):
    app, backend = saved_app()
    async with app.run_test(size=SIZE) as pilot:
        await chatted(pilot, backend)
        original = history.get(history.latest().id).messages
        await send(pilot, "/compact keep the numbers", wait=False)
        screen = await summary_dialog(pilot)
        # The model was asked with the instructions; the dialog shows its summary, editable.
        assert backend.requests[-1][0][-1].content.endswith("keep the numbers")
        area = screen.query_one(TextArea)
        assert area.text == "Code 7-4-1, meeting Tuesday." and area.has_focus
        area.move_cursor(area.document.end)
        await pilot.press(*" Room 4.")
        await pilot.press("ctrl+y")
        await wait_for(
            pilot,
            lambda: (
                [w.text for w in app.chat.messages()] == ["Code 7-4-1, meeting Tuesday. Room 4."]
            ),
            "the conversation on its new branch",
        )
        summary = app.chat.messages()[0]
        assert "Summary (compacted)" in label(summary) and "‹ 2/2 ›" in label(summary)
        stored = history.get(history.latest().id)
        assert stored.messages[0].is_summary and stored.messages[0].summary_of == original[-1].id
        # The original branch is untouched.
        assert history.get(stored.id, leaf=original[-1].id).messages == original
        # The next reply reads the summary in place of the old turns.
        backend.reply = "Tuesday."
        await send(pilot, "When?")
        sent = backend.requests[-1][0]
        assert "Room 4." in sent[0].content and [m.content for m in sent[1:]] == ["When?"]
        # ← on the summary shows the original branch.
        app.chat.messages()[0].focus()
        await pilot.press("left")
        await wait_for(
            pilot,
            lambda: (
                len(app.chat.messages()) == 4 and app.chat.messages()[0].text.startswith("First:")
            ),
            "the original branch",
        )


async def test_cancel_replaces_nothing(saved_app, history: History):
    app, backend = saved_app()
    async with app.run_test(size=SIZE) as pilot:
        await chatted(pilot, backend)
        before = history.get(history.latest().id).tree
        await send(pilot, "/compact", wait=False)
        await summary_dialog(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SummaryScreen), "the dialog gone")
        await settle(pilot)
        assert history.get(history.latest().id).tree == before
        assert "Compaction cancelled: nothing was replaced." in notices(app)
        assert len(app.chat.messages()) == 4


async def test_an_empty_summary_is_one_line_and_replaces_nothing(saved_app, history: History):
    app, backend = saved_app()
    async with app.run_test(size=SIZE) as pilot:
        await chatted(pilot, backend)
        before = history.get(history.latest().id).tree
        backend.reply = ""
        await send(pilot, "/compact", wait=False)
        await wait_for(
            pilot,
            lambda: any("empty summary" in n for n in notices(app)),
            "the one-line refusal",
        )
        line = next(n for n in notices(app) if "empty summary" in n)
        assert "\n" not in line and "nothing was replaced" in line
        assert not isinstance(app.screen, SummaryScreen)
        assert history.get(history.latest().id).tree == before


async def test_ctrl_u_pins_and_unpins_a_message(saved_app, history: History):
    app, backend = saved_app()
    async with app.run_test(size=SIZE) as pilot:
        await chatted(pilot, backend)
        first = app.chat.messages()[0]
        first.focus()
        await pilot.press("ctrl+u")
        await wait_for(pilot, lambda: "pinned" in label(first), "the pin beside the label")
        assert history.get(history.latest().id).messages[0].pinned
        assert app.session.conversation.turns[0].pinned
        # The model is sent it pinned (never left out).
        backend.reply = "ok"
        app.prompt_input.focus()
        await send(pilot, "more")
        assert backend.requests[-1][0][0].pinned
        first.focus()
        await pilot.press("ctrl+u")
        await wait_for(pilot, lambda: "pinned" not in label(first), "the pin gone")
        assert not history.get(history.latest().id).messages[0].pinned
        # The palette's "Pin or unpin a message" acts on the focused message.
        app.action_pin_message()
        await wait_for(pilot, lambda: "pinned" in label(first), "pinned from the palette")


class Trimming(RecordingBackend):
    """Leaves out the first exchange of anything longer than one exchange, and says so, as the
    local engine does when the prompt does not fit."""

    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        if len(messages) > 2:
            yield ContextTrimmed(
                dropped_messages=2, prompt_tokens=100, context_size=256, left_out=(0, 1)
            )
        yield from super().stream_chat(messages[2:] if len(messages) > 2 else messages, params)


async def test_a_trimmed_prompt_gets_a_marker_and_the_meter_says_so(saved_app):
    app, backend = saved_app(Trimming(reply="Noted."))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "one")
        await send(pilot, "two")
        texts = [w.text for w in app.chat.messages()]
        # The marker stands right after the left-out messages, before the prompt that was sent.
        assert texts[:2] == ["one", "Noted."] and texts[3:] == ["two", "Noted."]
        marker = app.chat.messages()[2]
        assert "Left out" in label(marker) and "2 oldest messages above" in marker.text
        assert app.state.left_out == 2
        assert "2 left out" in str(app.query_one("StatusBar").render())


async def test_the_compact_policy_shows_the_summary_above_the_reply(saved_app, history: History):
    app, backend = saved_app(
        RecordingBackend("Noted.", info=dataclasses.replace(INFO, context_size=128))
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.session.context_policy = "compact"
        await send(pilot, f"First: {LONG}")
        original = history.get(history.latest().id).messages
        await send(pilot, f"Second: {LONG}")
        await wait_for(
            pilot, lambda: any("Compacted 2 messages" in n for n in notices(app)), "the notice"
        )
        widgets = app.chat.messages()
        summary = widgets[-2]
        assert "Summary (compacted to fit the context)" in label(summary)
        assert summary.text == "Noted." and widgets[-1].text == "Noted."
        # Saved on the new branch; the prompt on screen is its copy there.
        stored = history.get(history.latest().id)
        assert stored.messages[0].summary_of == original[-1].id
        assert widgets[-3].message_id == stored.messages[1].id
        assert [m.content[:7] for m in stored.messages[1:]] == ["Second:", "Noted."]


async def test_an_unsaved_chat_shows_the_accepted_summary_below_its_messages():
    backend = RecordingBackend(reply="Noted.")
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await chatted(pilot, backend)
        await send(pilot, "/compact", wait=False)
        await summary_dialog(pilot)
        await pilot.press("ctrl+y")
        await wait_for(
            pilot,
            lambda: "Summary (compacted)" in label(app.chat.messages()[-1]),
            "the summary below the messages",
        )
        # The messages stay on screen; the model reads the summary in their place.
        assert len(app.chat.messages()) == 5
        assert app.session.conversation.turns == []
        assert app.session.conversation.summary == "Code 7-4-1, meeting Tuesday."
