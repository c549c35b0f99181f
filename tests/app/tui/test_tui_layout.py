"""The chat's layout on small terminals: side panels that do not fit, the footer."""

from __future__ import annotations

import pytest

from fakes import RecordingBackend, settle
from helpers import wait_for
from vibechat.app.tui import create_app


def visible(app) -> dict[str, bool]:
    return {"sidebar": app.sidebar.has_class("-visible"), "params": app.panel.has_class("-visible")}


def assert_usable(app) -> None:
    """The input has room to draw its placeholder (a zero width crashed the app)."""
    assert app.prompt_input.content_size.width > 0
    assert app.chat.size.width > 0


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (40, 16)])
async def test_both_side_panels_on_a_small_terminal_keep_the_chat_usable(size):
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await pilot.pause()
        await pilot.press("ctrl+b")
        await pilot.pause()
        # No room for both: opening the list closed the parameters.
        assert visible(app) == {"sidebar": True, "params": False}
        assert_usable(app)
        await pilot.press("f2")
        await pilot.pause()
        assert visible(app) == {"sidebar": False, "params": True}
        assert app.panel.has_focus_within
        assert_usable(app)
        await pilot.press("f2")  # closing it leaves the chat alone
        await pilot.pause()
        assert visible(app) == {"sidebar": False, "params": False}
        assert app.prompt_input.has_focus


async def test_a_wide_terminal_keeps_both_panels_and_narrowing_it_closes_one():
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        await pilot.press("f2")
        await pilot.pause()
        assert visible(app) == {"sidebar": True, "params": True}
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        # The panel in use (opened last, focused) stays.
        assert visible(app) == {"sidebar": False, "params": True}
        assert app.panel.has_focus_within
        assert_usable(app)
        await pilot.resize_terminal(60, 20)
        await pilot.pause()
        assert_usable(app)
        await pilot.resize_terminal(140, 40)
        await pilot.pause()
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert visible(app) == {"sidebar": True, "params": True}
        await pilot.resize_terminal(30, 12)  # tiny: one panel, and still no crash
        await pilot.pause()
        await pilot.pause()
        assert visible(app) == {"sidebar": True, "params": False}
        assert app.prompt_input.content_size.width > 0


def test_a_crash_in_the_chat_exits_non_zero(monkeypatch):
    """Textual shows an unhandled exception and app.run() returns normally: the command
    must still exit non-zero (it exited 0 after the layout crash above)."""
    from typer.testing import CliRunner

    import vibechat.app.backends as backends
    import vibechat.app.terminal as terminal
    import vibechat.app.tui as tui
    from vibechat.app.commands.cli import cli
    from vibechat.app.tui.shell.app import VibechatApp

    class Crashing(VibechatApp):
        def on_mount(self) -> None:
            raise RuntimeError("boom")

        def run(self, *args, **kwargs):
            return super().run(headless=True, size=(80, 24))

    monkeypatch.setattr(backends, "make_backend", lambda *args, **kwargs: RecordingBackend())
    monkeypatch.setattr(tui, "freeze_startup_objects", lambda: None)
    monkeypatch.setattr(
        terminal, "require_terminal", lambda: None
    )  # CliRunner has no terminal; headless
    monkeypatch.setattr(tui, "create_app", lambda backend, **kwargs: Crashing(backend, blink=False))
    result = CliRunner().invoke(cli, ["--no-save"])
    assert result.exit_code == 1, result.output

    class Quitting(VibechatApp):
        def on_mount(self) -> None:
            self.exit()

        def run(self, *args, **kwargs):
            return super().run(headless=True, size=(80, 24))

    monkeypatch.setattr(tui, "create_app", lambda backend, **kwargs: Quitting(backend, blink=False))
    assert CliRunner().invoke(cli, ["--no-save"]).exit_code == 0


def footer_fits(app) -> list[str]:
    """The footer's keys that do not fit beside the palette key (none, on a good footer)."""
    from textual.widgets._footer import FooterKey

    keys = list(app.screen.query(FooterKey))
    palette = next(k for k in keys if k.has_class("-command-palette"))
    assert palette.region.right <= app.size.width
    return [
        f"{k.key} {k.description}"
        for k in keys
        if k is not palette and k.region.right > palette.region.x
    ]


async def test_the_footer_fits_80_columns():
    import threading

    backend = RecordingBackend(reply="Sure: see https://example.com and\n```\ncode\n```")
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert footer_fits(app) == []
        shown = {k.key for k in app.screen.query("FooterKey")}
        assert {"f1", "f2", "f3", "ctrl+b", "ctrl+n"} <= shown and "escape" not in shown
        app.prompt_input.load_text("hi")
        await pilot.press("enter")
        await settle(pilot)
        backend.gate = threading.Event()
        app.prompt_input.load_text("again")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.generating, "the reply to start")
        # the footer shows Stop a moment after the reply starts (FOOTER_DELAY_S)
        await wait_for(
            pilot,
            lambda: "escape" in {k.key for k in app.screen.query("FooterKey")},
            "Stop in the footer",
        )
        assert "escape" in {
            k.key for k in app.screen.query("FooterKey")
        }  # Stop, while a reply streams
        assert footer_fits(app) == []
        backend.gate.set()
        await settle(pilot)
        app.chat.messages()[1].focus()  # a reply: its keys show beside its label, not in the footer
        await pilot.pause()
        assert footer_fits(app) == []
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert footer_fits(app) == []
        await pilot.press("f2")
        await pilot.pause()
        assert footer_fits(app) == []
