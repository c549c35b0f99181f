"""Every message the chat shows is true and for people (issue 24, point 5): notices never
cover the input or the status bar, copying says where the text went, keys that have nothing
to act on say why, and the welcome tells a newcomer what the starter is."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from fakes import INFO, RecordingBackend, send, settle
from helpers import notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.clipboard import TMUX_FIX, copied_notice, tmux_set_clipboard
from vibechat.app.tui.widgets.welcome import welcome_text
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
    assert (
        "Sent the reply (1,234 characters)" in plain and "OSC 52" in plain and "Copied" not in plain
    )
    inside = {"TMUX": "/tmp/tmux-0/default,1,0"}
    for setting in ("external", "off", None):  # None: tmux did not say
        tmux = copied_notice("reply", 5, inside, setting)
        assert TMUX_FIX in tmux and "~/.tmux.conf" in tmux, setting
    passed_on = copied_notice("reply", 5, inside, "on")
    assert (
        passed_on.startswith("Sent the reply")
        and TMUX_FIX not in passed_on
        and "~/.tmux.conf" not in passed_on
    )
    assert "screen" in copied_notice("code", 5, {"STY": "1.pts-0.host"})
    assert "nothing was copied" in copied_notice("reply", 5, {"TERM_PROGRAM": "Apple_Terminal"})
    assert "nothing was copied" in copied_notice("reply", 5, {"VTE_VERSION": "7600"})


def fake_tmux(folder: Path, script: str) -> Path:
    """A ``tmux`` command in ``folder`` that runs ``script`` (sh) and notes its arguments in
    ``folder/asked``: a controlled tmux for the copy notice to ask."""
    folder.mkdir(exist_ok=True)
    tmux = folder / "tmux"
    tmux.write_text(f'#!/bin/sh\necho "$@" >> "{folder}/asked"\n{script}\n')
    tmux.chmod(0o755)
    return folder


def test_tmux_is_asked_for_its_set_clipboard_and_a_bad_answer_is_unknown(tmp_path):
    inside = {"TMUX": "/tmp/tmux-test/default,1,0", "PATH": str(tmp_path / "bin")}
    for script, setting in (
        ("echo on", "on"),
        ("echo external", "external"),
        ("echo off", "off"),
        ("echo 'no server running' >&2; exit 1", None),
        ("echo maybe", None),
        ("exec sleep 30", None),
    ):
        fake_tmux(tmp_path / "bin", script)
        assert tmux_set_clipboard(inside, timeout=0.5) == setting, script
    assert (tmp_path / "bin" / "asked").read_text().splitlines()[0] == "show -gv set-clipboard"
    assert (
        tmux_set_clipboard({"TMUX": "x,1,0", "PATH": str(tmp_path / "none")}) is None
    )  # no tmux command
    (tmp_path / "bin" / "asked").unlink()
    assert (
        tmux_set_clipboard({"PATH": str(tmp_path / "bin")}) is None
    )  # not inside tmux: nothing asked
    assert not (tmp_path / "bin" / "asked").exists()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_real_tmux_server_is_asked_for_its_setting(tmp_path):
    """A tmux server of the test's own (its socket under tmp_path, no config read): the
    answer follows ``set -g set-clipboard``."""
    socket = tmp_path / "tmux.sock"
    tmux = ["tmux", "-S", str(socket), "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "t", "sleep 60"], check=True, timeout=30)
    try:
        inside = dict(os.environ) | {"TMUX": f"{socket},1,0"}
        for setting in ("on", "external", "off"):
            subprocess.run([*tmux, "set", "-g", "set-clipboard", setting], check=True, timeout=30)
            assert tmux_set_clipboard(inside, timeout=30) == setting
    finally:
        subprocess.run([*tmux, "kill-server"], timeout=30, check=False)


@pytest.mark.parametrize(
    ("script", "hint"), [("echo external", True), ("echo on", False), ("exit 1", True)]
)
async def test_ctrl_o_under_tmux_names_the_fix_only_when_the_copy_may_not_land(
    monkeypatch, tmp_path, script, hint
):
    """Inside tmux, Ctrl+O's notice names ``set-clipboard on`` when tmux has it otherwise
    (``external``, tmux's default) or did not say; under ``on`` the copy reached the terminal
    and no fix is named. tmux is a controlled one on PATH."""
    bin_dir = fake_tmux(tmp_path / "bin", script)
    monkeypatch.setenv("TMUX", "/tmp/tmux-test/default,1,0")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    backend = RecordingBackend()
    app = create_app(backend, blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await send(pilot, "hello")
        await pilot.press("ctrl+o")
        await wait_for(
            pilot,
            lambda: any(m.startswith("Sent the reply") for m in messages(app)),
            "the copy notice",
        )
        [said] = [m for m in messages(app) if m.startswith("Sent the reply")]
        assert (TMUX_FIX in said) is hint, said
        assert (bin_dir / "asked").read_text() == "show -gv set-clipboard\n"
        assert app.clipboard == backend.reply


async def test_regenerate_edit_and_copy_in_an_empty_conversation_say_why_nothing_happened():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await settle(pilot)
        for key, why in (
            ("ctrl+r", "Nothing to regenerate yet"),
            ("ctrl+l", "Nothing to edit yet"),
            ("ctrl+o", "No reply to copy yet"),
        ):
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
    starter = replace(
        INFO, name="Gemma 3 270m", path=str(starter_installed), chat_format="completion"
    )
    text = welcome_text(starter)
    assert "starter" in text and "base model" in text and "never trained to chat" in text
    assert "vibechat models pull" in text and "F3 then d" in text
    assert all(rec.ref in text for rec in RECOMMENDED) and len(RECOMMENDED) >= 2
    other_base = replace(starter, path="/models/base-7b.gguf")
    assert "base (completion) model" in welcome_text(other_base) and "starter" not in welcome_text(
        other_base
    )
    instruct = welcome_text(INFO)  # a model with its own template: no advice
    assert "pull" not in instruct and "chat template" not in instruct


async def test_the_chat_on_the_starter_shows_the_starters_welcome(starter_installed):
    starter = replace(
        INFO, name="Gemma 3 270m", path=str(starter_installed), chat_format="completion"
    )
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
