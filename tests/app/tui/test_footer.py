"""The footer rebuilds its keys only when the keys it shows change (issue 42, point 2).

Textual's own ``Footer`` removes and mounts every key on each bindings refresh, and the
screen refreshes its bindings on every focus move and whenever an action's availability may
have changed; most refreshes show the same keys."""

from __future__ import annotations

import threading

from fakes import RecordingBackend, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.footer import KeysFooter


def shown(app) -> list[str]:
    return [key.key for key in app.screen.query("FooterKey")]


async def test_a_refresh_that_changes_no_key_keeps_the_footer_as_it_is():
    app = create_app(RecordingBackend(reply="fine"), blink=False, save=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        footer = app.query_one(KeysFooter)
        keys = list(app.screen.query("FooterKey"))
        built = footer.rebuilds
        assert built >= 1 and keys
        for _ in range(5):
            app.refresh_bindings()
            await pilot.pause()
        app.prompt_input.load_text("typing changes no key")
        await pilot.press("left", "right", "end")
        await settle(pilot)
        assert footer.rebuilds == built
        assert list(app.screen.query("FooterKey")) == keys  # the same widgets, never remounted


def gated_app():
    """The chat on a backend whose reply waits at its gate: the app and the backend."""
    backend = RecordingBackend(reply="a reply")
    backend.gate = threading.Event()
    return create_app(backend, blink=False, save=False), backend


async def send_until_stop_shows(pilot) -> None:
    """A prompt sent to a gated backend, until Stop (Esc) is in the footer while it streams."""
    pilot.app.prompt_input.load_text("hello")
    await pilot.press("enter")
    await wait_for(
        pilot, lambda: "escape" in shown(pilot.app), "Stop in the footer while the reply streams"
    )


async def test_a_key_that_appears_rebuilds_the_footer():
    app, backend = gated_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        footer = app.query_one(KeysFooter)
        built = footer.rebuilds
        assert "escape" not in shown(app)
        await send_until_stop_shows(pilot)
        assert footer.rebuilds > built
        backend.gate.set()
        await wait_for(pilot, lambda: "escape" not in shown(app), "Stop gone once the reply ended")


async def test_stop_appearing_mounts_only_its_key_and_keeps_the_others():
    """Stop appearing 0.25 s into a reply mounts one key, in its place, and removes none: the
    keys shown before are the same widgets after, so the frame lays out only the new one."""
    app, backend = gated_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        footer = app.query_one(KeysFooter)
        before = list(footer.children)
        await send_until_stop_shows(pilot)
        during = list(footer.children)
        mounted = [key for key in during if not any(key is old for old in before)]
        kept = [old for old in before if any(old is key for key in during)]
        assert [key.key for key in mounted] == ["escape"]
        assert kept == before  # none removed, none remounted, in the order they were
        assert [key for key in during if key not in mounted] == before
        backend.gate.set()
        await wait_for(pilot, lambda: "escape" not in shown(app), "Stop gone once the reply ended")
        after = list(footer.children)
        assert [key for key in after if not any(key is old for old in during)] == []
        assert after == before  # Stop's key removed, the others untouched


async def test_the_footer_says_once_when_its_first_keys_are_drawn(monkeypatch):
    """Its first keys come a few refreshes after the screen's first frame; once a frame has
    drawn them the footer posts ``KeysShown``, once (the app mounts what it hid at start then,
    not in the frames before)."""
    from vibechat.app.tui.shell.app import VibechatApp

    frames: list[bool] = []  # each frame: whether the footer had its keys
    told: list[int] = []  # how many frames were drawn when KeysShown was posted
    display, post = VibechatApp._display, KeysFooter.post_message

    def counted(app, screen, renderable):
        frames.append(bool(app.screen.query("FooterKey")))
        display(app, screen, renderable)

    def posted(footer, message):
        if isinstance(message, KeysFooter.KeysShown):
            told.append(len(frames))
        return post(footer, message)

    monkeypatch.setattr(VibechatApp, "_display", counted)
    monkeypatch.setattr(KeysFooter, "post_message", posted)
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: told, "KeysShown")
        await settle(pilot)
        app.refresh_bindings()
        await settle(pilot)
        assert app.panel.is_mounted
    assert len(told) == 1, told
    assert not frames[0] and True in frames[: told[0]], frames
