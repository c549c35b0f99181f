"""Every message the chat shows is true and for people (issue 24, point 5): notices never
cover the input or the status bar, copying says where the text went, keys that have nothing
to act on say why, and the welcome tells a newcomer what the starter is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fakes import INFO, RecordingBackend, send, settle
from helpers import notices
from vibechat.app.tui import create_app
from vibechat.app.tui.clipboard import TMUX_FIX, copied_notice
from vibechat.app.tui.welcome import welcome_text
from vibechat.engine.models.starter import RECOMMENDED


def shown(app) -> list[str]:
    """The notices on screen now, as their text."""
    return [str(toast.render()) for toast in app.screen.query("Toast")]


def messages(app) -> list[str]:
    return notices(app)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_notices_never_cover_the_input_or_the_status_bar(size):
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=size, notifications=True) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("a draft\nover\nfour lines\nof input")  # a taller input
        await pilot.pause()
        for i in range(6):  # more notices than fit above the input
            app.notify(f"Notice number {i}: " + "words " * 12, timeout=30)
        await pilot.pause()
        await pilot.pause()
        toasts = list(app.screen.query("Toast"))
        assert toasts
        keep_clear = [app.prompt_input.region, app.status.region, app.query_one("Footer").region]
        rack = app.screen.query_one("ToastRack").region
        for toast in toasts:
            visible = toast.region.intersection(rack)  # what the rack lets show
            for region in keep_clear:
                assert not visible.overlaps(region), (toast, region)
        first = toasts[0].region
        assert first.right >= size[0] - 2 and first.y <= 2  # top right, over the conversation


def test_copying_says_the_text_was_sent_through_the_terminal_and_how_tmux_passes_it_on():
    plain = copied_notice("reply", 1234, {})
    assert "Sent the reply (1,234 characters)" in plain and "OSC 52" in plain and "Copied" not in plain
    tmux = copied_notice("reply", 5, {"TMUX": "/tmp/tmux-0/default,1,0"})
    assert TMUX_FIX in tmux and "~/.tmux.conf" in tmux
    assert "screen" in copied_notice("code", 5, {"STY": "1.pts-0.host"})
    assert "nothing was copied" in copied_notice("reply", 5, {"TERM_PROGRAM": "Apple_Terminal"})
    assert "nothing was copied" in copied_notice("reply", 5, {"VTE_VERSION": "7600"})


async def test_ctrl_o_under_tmux_names_the_setting_that_makes_the_copy_land(monkeypatch):
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    backend = RecordingBackend()
    app = create_app(backend, blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await send(pilot, "hello")
        await pilot.press("ctrl+o")
        await pilot.pause()
        said = messages(app)[-1]
        assert said.startswith("Sent the reply") and TMUX_FIX in said
        assert app.clipboard == backend.reply


async def test_regenerate_edit_and_copy_in_an_empty_conversation_say_why_nothing_happened():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await settle(pilot)
        for key, why in (("ctrl+r", "Nothing to regenerate yet"), ("ctrl+l", "Nothing to edit yet"),
                         ("ctrl+o", "No reply to copy yet")):
            await pilot.press(key)
            await pilot.pause()
            assert messages(app)[-1].startswith(why), key
        assert not app.conversation.turns and app.prompt_input.text == ""


async def test_ctrl_r_while_a_reply_streams_says_to_stop_it_first():
    import threading

    gate = threading.Event()
    backend = RecordingBackend()
    backend.gate = gate
    app = create_app(backend, blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "hi", wait=False)
        backend.started.wait(5)
        await pilot.pause()
        assert app.generating
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "press Esc to stop the reply" in messages(app)[-1]
        gate.set()
        await settle(pilot)
        assert len(backend.requests) == 1  # nothing was regenerated


def test_the_welcome_says_what_the_starter_is_and_how_to_get_a_chat_model(starter_installed):
    starter = replace(INFO, name="Gemma 3 270m", path=str(starter_installed), chat_format="completion")
    text = welcome_text(starter)
    assert "starter" in text and "base model" in text and "never trained to chat" in text
    assert "vibechat models pull" in text and "F3 then d" in text
    assert all(rec.ref in text for rec in RECOMMENDED) and len(RECOMMENDED) >= 2
    other_base = replace(starter, path="/models/base-7b.gguf")
    assert "base (completion) model" in welcome_text(other_base) and "starter" not in welcome_text(other_base)
    instruct = welcome_text(INFO)  # a model with its own template: no advice
    assert "pull" not in instruct and "chat template" not in instruct


async def test_the_chat_on_the_starter_shows_the_starters_welcome(starter_installed):
    starter = replace(INFO, name="Gemma 3 270m", path=str(starter_installed), chat_format="completion")
    app = create_app(RecordingBackend(info=starter), blink=False)
    async with app.run_test(size=(100, 36)) as pilot:
        await settle(pilot)
        welcome = str(app.chat.query_one(".chat--empty").render())
        assert "This is the starter" in welcome and RECOMMENDED[0].ref in welcome


async def test_stats_while_a_reply_streams_shows_the_last_finished_reply():
    """The status bar shows the streaming reply's own figures; /stats, the last reply's."""
    import threading

    backend = RecordingBackend()
    app = create_app(backend, blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await send(pilot, "first")
        backend.gate = threading.Event()
        backend.started.clear()
        await send(pilot, "second", wait=False)
        backend.started.wait(5)
        await pilot.pause()
        await send(pilot, "/stats", wait=False)
        await pilot.pause()
        notes = [m.text for m in app.chat.messages() if m.role == "note"]
        assert notes and "tokens/s" in notes[-1] and "No reply yet" not in notes[-1]
        backend.gate.set()
        await settle(pilot)
