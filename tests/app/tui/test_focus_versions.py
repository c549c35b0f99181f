"""Focus and versions (issue 46, point 3): Tab from the input reaches the newest message first;
a message's ‹ k/n › hint names the directions that exist; a message taken back with Ctrl+L says
it is being edited, and Esc puts the conversation back as it was. A real Textual app (Pilot) on a
real SQLite history, with the recording backend."""

from __future__ import annotations

from pathlib import Path

from fakes import RecordingBackend, send, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.engine.chat.history import History

SIZE = (80, 24)


def shown(app) -> list[str]:
    return [w.text for w in app.chat.messages()]


def visible_label(widget) -> str:
    """The part of a message's label line that fits in its width (what the user sees)."""
    return str(widget.label_shown)[: widget.content_size.width]


async def test_ctrl_l_says_editing_and_esc_puts_the_conversation_back_as_it_was(tmp_path: Path):
    app = create_app(
        RecordingBackend(reply="ok"), blink=False, history=History(tmp_path / "history.db")
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "one")
        await send(pilot, "two")
        app.prompt_input.load_text("a draft")
        await pilot.press("ctrl+l")
        await settle(pilot)
        assert shown(app) == ["one", "ok"] and app.prompt_input.text == "two\na draft"
        notes = list(app.query("#editing"))
        assert len(notes) == 1 and "editing · Esc cancels" in str(notes[0].render())
        await pilot.press(*"er")  # edited a little, then thought better of it
        await pilot.press("escape")
        await wait_for(
            pilot, lambda: shown(app) == ["one", "ok", "two", "ok"], "the conversation back"
        )
        await settle(pilot)
        assert app.prompt_input.text == "a draft" and not app.query("#editing")
        assert [t.content for t in app.session.conversation.turns] == ["one", "ok", "two", "ok"]
        # The next prompt follows the reply that came back.
        await send(pilot, "three")
        assert [m.content for m in app.backend.requests[-1][0]] == [
            "one",
            "ok",
            "two",
            "ok",
            "three",
        ]


async def test_an_edited_prompt_once_sent_leaves_no_editing_line(tmp_path: Path):
    app = create_app(
        RecordingBackend(reply="ok"), blink=False, history=History(tmp_path / "history.db")
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "one")
        await pilot.press("ctrl+l")
        await settle(pilot)
        assert app.query("#editing")
        await pilot.press("enter")
        await settle(pilot)
        assert not app.query("#editing") and shown(app) == ["one", "ok"]
        await pilot.press("escape")  # nothing to cancel now: nothing changes
        await settle(pilot)
        assert shown(app) == ["one", "ok"]


async def test_a_versions_hint_names_the_directions_that_exist_and_fits_at_80_columns(
    tmp_path: Path,
):
    """At ‹ 1/3 › the hint said ← previous (there is none) and → next was cut off at 80 columns."""
    backend = RecordingBackend(reply="first")
    app = create_app(backend, blink=False, history=History(tmp_path / "history.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "question")
        for reply in ("second", "third"):
            backend.reply = reply
            await pilot.press("ctrl+r")
            await settle(pilot)
        app.chat.messages()[-1].focus()
        await settle(pilot)
        seen = {}
        for expected in ("third", "second", "first"):
            reply = app.chat.messages()[-1]
            assert reply.text == expected and app.focused is reply
            seen[reply.branch] = visible_label(reply)
            await pilot.press("left")
            await settle(pilot)
        assert app.chat.messages()[-1].text == "first"  # ← at the first version: nothing to go to
        assert "← previous version" in seen[(3, 3)] and "→ next" not in seen[(3, 3)]
        assert "← previous version" in seen[(2, 3)] and "→ next version" in seen[(2, 3)]
        assert "→ next version" in seen[(1, 3)] and "← previous" not in seen[(1, 3)]


async def test_tab_from_the_input_reaches_the_newest_message_first(tmp_path: Path):
    """Tab from the input went to the oldest message (out of view); only Shift+Tab reached the
    last reply. Now the newest first, in view; Shift+Tab goes up, Tab back down to the input."""
    app = create_app(
        RecordingBackend(reply="a reply\n\nof a few\n\nlines"),
        blink=False,
        history=History(tmp_path / "history.db"),
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for prompt in ("one", "two", "three", "four"):
            await send(pilot, prompt)
        messages = app.chat.messages()
        assert app.prompt_input.has_focus
        await pilot.press("tab")
        await settle(pilot)
        assert app.focused is messages[-1]
        view = app.chat.region
        assert view.y <= messages[-1].region.y < view.bottom  # in view
        await pilot.press("shift+tab")
        assert app.focused is messages[-2]  # up the conversation
        await pilot.press("tab")
        assert app.focused is messages[-1]
        await pilot.press("tab")  # from the newest message: on to the input
        assert app.prompt_input.has_focus


async def test_tab_from_an_empty_chats_input_moves_on_as_ever(tmp_path: Path):
    app = create_app(
        RecordingBackend(reply="ok"), blink=False, history=History(tmp_path / "history.db")
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("tab")
        assert not app.prompt_input.has_focus
