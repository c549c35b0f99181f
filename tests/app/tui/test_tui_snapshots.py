"""Snapshot tests of the main screen, the parameter panel and the help screen.

Deterministic: a recording backend with fixed stats, fixed terminal size, no cursor
blink, no clock. Update after an intended change with `pytest --snapshot-update`."""

from __future__ import annotations

from fakes import RecordingBackend, settle
from vibechat.app.tui import create_app

SIZE = (100, 32)
REPLY = (
    "Sure! Here is a **tiny** example:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
    "- it adds\n- it returns"
)


def make_app():
    return create_app(RecordingBackend(reply=REPLY), blink=False)


async def _chat(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    pilot.app.prompt_input.load_text("Write an add function")
    await pilot.press("enter")
    await settle(pilot)


def test_main_screen(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_chat)


def test_parameter_panel(snap_compare):
    async def run_before(pilot) -> None:
        await _chat(pilot)
        await pilot.press("f2", "right", "down")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_parameter_panel_80x24(snap_compare):
    """Six ↓ and a →: the panel has scrolled to the focused switch, marked and changed (●)."""

    async def run_before(pilot) -> None:
        await _chat(pilot)
        await pilot.press("f2", *["down"] * 6, "right")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_parameter_panel_120x40(snap_compare):
    """Each slider's line from its declaration, its default, a changed value (●), the focus."""

    async def run_before(pilot) -> None:
        await _chat(pilot)
        await pilot.press("f2", "right", "down", "down")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=run_before)


def test_help_screen(snap_compare):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_conversation_sidebar(snap_compare, tmp_path):
    """The sidebar over a saved conversation that was opened (fixed dates: no clock)."""
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.chat.history import History
    from vibechat.engine.turns.backend import GenerationDone

    path = tmp_path / "history.db"
    with History(path) as history:
        for n, (prompt, reply) in enumerate(
            [
                ("Write an add function", REPLY),
                (
                    "A very long question about the borrow checker and lifetimes "
                    "in Rust that does not fit",
                    "Short answer.",
                ),
            ]
        ):
            chat = ChatLog(Conversation(), history, model="Fake 1B")
            chat.add_user(prompt)
            chat.finish_reply(chat.start_reply(), GenerationDone(reply))
            history.conn.execute(
                "UPDATE conversations SET updated = ? WHERE id = ?",
                (f"2025-01-0{n + 1}T12:00:00Z", chat.conversation_id),
            )

    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.press("ctrl+b", "down", "enter")
        await settle(pilot)
        await pilot.press(
            "ctrl+b", "ctrl+b"
        )  # Ctrl+B toggles: the list left open is hidden, then shown focused
        await pilot.pause()

    app = create_app(RecordingBackend(reply=REPLY), blink=False, history=History(path))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _thinking_app(tmp_path):
    """A saved reply with thinking (and its token count), opened from the history."""
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.chat.history import History
    from vibechat.engine.turns.backend import GenerationDone, GenerationStats

    path = tmp_path / "history.db"
    with History(path) as history:
        chat = ChatLog(Conversation(), history, model="Fake 1B")
        chat.add_user("Is 91 prime?")
        thinking = (
            "91 is odd, so not divisible by 2.\nDigit sum 10: not divisible by 3.\n"
            "7 × 13 = 91, so it has divisors [7] and [13]."
        )
        chat.finish_reply(
            chat.start_reply(),
            GenerationDone(
                "No: **91 = 7 × 13**.",
                GenerationStats(completion_tokens=60, thinking_tokens=48),
                thinking=thinking,
            ),
        )
    return create_app(RecordingBackend(reply=REPLY), blink=False, history=History(path))


async def _open_first(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    pilot.app.chats.open_conversation(1)  # not through the sidebar: it shows the time it was saved
    await settle(pilot)


def test_thinking_folded(snap_compare, tmp_path):
    assert snap_compare(_thinking_app(tmp_path), terminal_size=SIZE, run_before=_open_first)


def test_thinking_expanded(snap_compare, tmp_path):
    async def run_before(pilot) -> None:
        await _open_first(pilot)
        await pilot.press("ctrl+t")
        await pilot.pause()

    assert snap_compare(_thinking_app(tmp_path), terminal_size=SIZE, run_before=run_before)


def _lens_app():
    """A reply whose words carry fixed candidates (``fakes.LensBackend``), the lens on."""
    from fakes import LensBackend

    return create_app(LensBackend("Paris is the capital \x1b[2J of\nFrance."), blink=False)


async def _lens_open(pilot) -> None:
    """The lens turned on (F11), a prompt, the lens opened on its reply (F12), the cursor on the
    third token and in the candidates (Tab, ↓): the bars, the cut lines, the picked candidate."""
    await pilot.app.workers.wait_for_complete()
    await pilot.press("f11")
    pilot.app.prompt_input.load_text("The capital of France?")
    await pilot.press("enter")
    await settle(pilot)
    pilot.app.clear_notifications()
    await pilot.press("f12", "right", "right", "tab", "down")
    await pilot.pause()


def test_token_lens_80x24(snap_compare):
    assert snap_compare(_lens_app(), terminal_size=(80, 24), run_before=_lens_open)


def test_token_lens_80x24_paper(snap_compare):
    """The light theme: every tint and line from the theme's variables."""

    async def run_before(pilot) -> None:
        pilot.app.theme = "vibechat-paper"
        await _lens_open(pilot)

    assert snap_compare(_lens_app(), terminal_size=(80, 24), run_before=run_before)
