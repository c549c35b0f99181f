"""Outside text in the TUI (issue 13): model names, server errors, other tools' folder
names, Hub file names, conversation titles are shown sanitised and never parsed as
markup. Real Textual apps (Pilot); what the terminal would receive is rendered from the
screen's compositor and checked: no escape sequence from the text, no link, the brackets
shown as they are, and no crash (a ``MarkupError`` in a render ends the app, and
``run_test`` raises it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.segment import Segment

from fakes import INFO, RecordingBackend, settle
from ggufgen import gguf_bytes
from openai_stub import StubServer
from vibechat.app.tui import create_app
from vibechat.app.tui.confirm import ConfirmScreen
from vibechat.app.tui.downloader import DownloadScreen
from vibechat.app.tui.history_screens import RenameScreen
from vibechat.app.tui.model_picker import ModelPicker
from vibechat.engine.backend import GenerationDone
from vibechat.engine.chatlog import ChatLog
from vibechat.engine.conversation import Conversation
from vibechat.engine.history import History
from vibechat.engine.openai_backend import OpenAICompatibleBackend, OpenAIOptions

SIZE = (160, 40)
C1 = {chr(c) for c in range(0x80, 0xA0)}


class Rendered:
    """The current screen as the terminal would get it: ``lines`` (the text),
    ``raw`` (the bytes written, Textual's own escape sequences included) and ``segments``."""

    def __init__(self, app) -> None:
        screen = app.screen
        update = screen._compositor.render_update(full=True, screen_stack=app._background_screens)
        self.raw: str = update.render_segments(app.console)
        self.segments: list[Segment] = [seg for row in update.strips for strip in row for seg in strip]
        self.lines: list[str] = ["".join(seg.text for strip in row for seg in strip) for row in update.strips]
        self.text = "\n".join(self.lines)

    def check(self, *shown: str) -> None:
        """Nothing from outside text reached the terminal as control: no C1 character, no
        OSC (clipboard writes, links, titles), no link or click action on any text; and
        each of ``shown`` appears as it is on one line."""
        assert not C1 & set(self.raw), "a C1 control character reached the terminal"
        assert "\x1b]" not in self.raw, "an OSC sequence (clipboard, link, title) reached the terminal"
        for seg in self.segments:
            if seg.control:
                continue
            assert "\x1b" not in seg.text and not C1 & set(seg.text), repr(seg.text)
            style = seg.style
            if style is not None:
                assert not style.link, f"{seg.text!r} links to {style.link!r}"
                assert "@click" not in (style.meta or {}) or "evil" not in seg.text
        for text in shown:
            assert any(text in line for line in self.lines), f"{text!r} not shown:\n{self.text}"


async def pause(pilot, times: int = 3) -> None:
    for _ in range(times):
        await pilot.pause()


# ------------------------------------------------------------------ model names

EVIL_NAME = "\x1b]52;c;ZXZpbA==\x07Evil [link='https://evil.example/x']click[/link] [bold]b[reverse]r"
EVIL_SHOWN = "Evil [link='https://evil.example/x']click[/link] [bold]b[reverse]r"


async def test_a_gguf_model_name_is_shown_sanitised_and_never_as_markup():
    """``general.name`` with an OSC 52 clipboard write and link markup: the status bar and
    the welcome line show it as text."""
    app = create_app(RecordingBackend(info=replace(INFO, name=EVIL_NAME)), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = Rendered(app)
        screen.check(EVIL_SHOWN)
        welcome = next(line for line in screen.lines if "Evil" in line and "·" in line and "ctx" not in line)
        status = screen.lines[-2]  # above the footer
        assert EVIL_SHOWN in welcome and EVIL_SHOWN in status


async def test_a_servers_model_id_is_shown_sanitised_and_never_as_markup():
    """The same name as a server's ``/v1/models`` id (a real HTTP stub)."""
    with StubServer() as stub:
        stub.models = [EVIL_NAME, "stub-small"]
        backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model=EVIL_NAME))
        app = create_app(backend, blink=False, save=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.status.model is not None and app.status.model.name == EVIL_NAME
            Rendered(app).check(EVIL_SHOWN)
            await pilot.press("f3")  # the server's models
            await app.screen.workers.wait_for_complete()
            await pause(pilot)
            Rendered(app).check(EVIL_SHOWN, "stub-small")


# ---------------------------------------------------------------- server errors

BAD = "bad [link=https://x]y"


async def test_a_servers_error_is_shown_as_text_live_and_when_the_conversation_is_reopened(tmp_path: Path):
    """An HTTP 500 whose message holds markup: the failed reply's status line and the
    notification show it as text; saved, the conversation opens again without a crash."""
    with StubServer() as stub:
        stub.mode, stub.error_body = "status", {"error": {"message": BAD, "type": "server_error"}}
        backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model="stub-small"))
        app = create_app(backend, blink=False, history=History(tmp_path / "history.db"))
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await settle(pilot)
            app.prompt_input.load_text("hello")
            await pilot.press("enter")
            await settle(pilot)
            await pause(pilot)
            reply = app.chat.messages()[-1]
            assert BAD in reply.query_one(".message--status").render().plain
            assert any(BAD in n.message for n in app._notifications)
            Rendered(app).check(BAD)
            cid = app.chatlog.conversation_id
            assert cid is not None
            await pilot.press("ctrl+n")
            app.clear_notifications()
            await settle(pilot)
            app.open_conversation(cid)
            await settle(pilot)
            await pause(pilot)
            assert BAD in app.chat.messages()[-1].query_one(".message--status").render().plain
            Rendered(app).check(BAD)


async def test_a_failed_reply_saved_by_run_opens_without_a_crash(tmp_path: Path):
    """The same error saved by another process (``vibechat run``), then opened in the chat."""
    db = tmp_path / "history.db"
    with History(db) as history:
        chat = ChatLog(Conversation(), history, model="Fake 1B", model_path=INFO.path)
        chat.add_user("hello")
        chat.fail_reply(chat.start_reply(), BAD)
        cid = chat.conversation_id
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_conversation(cid)
        await settle(pilot)
        await pause(pilot)
        assert BAD in app.chat.messages()[-1].query_one(".message--status").render().plain
        Rendered(app).check(BAD)


# --------------------------------------------------- other tools' and Hub names

async def test_an_lm_studio_folder_named_with_markup_is_listed_in_the_picker(user_dirs):
    """LM Studio's ``publisher/repo`` folders: ``pub[`` / ``crash]`` make the name
    ``lmstudio:pub[/crash]:Q4_K_M``; the picker lists it as it is."""
    folder = user_dirs["home"] / ".lmstudio" / "models" / "pub[" / "crash]"
    folder.mkdir(parents=True)
    (folder / "model-Q4_K_M.gguf").write_bytes(gguf_bytes())
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f3")
        picker = app.screen
        assert isinstance(picker, ModelPicker)
        await picker.workers.wait_for_complete()
        await pause(pilot)
        assert "lmstudio:pub[/crash]:Q4_K_M" in [m.name for m in picker.models]
        Rendered(app).check("lmstudio:pub[/crash]:Q4_K_M")


async def test_a_hub_file_path_with_markup_is_listed_in_the_downloader(fake_hub):
    """A repo's file ``odd[/crash]/odd-Q4_K_M.gguf`` (a plain relative path, accepted)."""
    fake_hub.add_repo("acme/Odd-GGUF", {"odd[/crash]/odd-Q4_K_M.gguf": gguf_bytes()})
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app.run_action("download")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DownloadScreen)
        field = screen.query_one("Input")
        field.value = "acme/Odd-GGUF"
        field.focus()
        await pilot.press("enter")
        await screen.workers.wait_for_complete()
        await pause(pilot)
        Rendered(app).check("odd[/crash]/odd-Q4_K_M.gguf")


# ----------------------------------------------------------- conversation titles

TITLE = "[/crash] [link=https://x]t"


def seed(db: Path, title: str) -> int:
    with History(db) as history:
        chat = ChatLog(Conversation(), history, model="Fake 1B", model_path=INFO.path)
        chat.add_user(title)
        chat.finish_reply(chat.start_reply(), GenerationDone("answer"))
        assert chat.conversation_id is not None
        return chat.conversation_id


async def test_deleting_a_conversation_titled_with_markup(tmp_path: Path):
    db = tmp_path / "history.db"
    seed(db, TITLE)
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")
        await pause(pilot)
        Rendered(app).check("[/crash] [link=https://x]t")  # the sidebar
        await pilot.press("d")
        await pause(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        Rendered(app).check(TITLE)
        await pilot.press("y")
        await settle(pilot)
        await pause(pilot)
        assert any(TITLE in n.message for n in app._notifications)
        Rendered(app).check("[/crash]")
        with History(db) as other:
            assert other.count() == 0


async def test_renaming_a_conversation_titled_with_markup(tmp_path: Path):
    db = tmp_path / "history.db"
    cid = seed(db, TITLE)
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "r")
        await pause(pilot)
        assert isinstance(app.screen, RenameScreen)
        assert app.screen.query_one("#rename-input").value == TITLE
        Rendered(app).check(TITLE)
        app.screen.query_one("#rename-input").value = "[/crash] renamed [link=https://x]t"
        await pilot.press("enter")
        await settle(pilot)
        await pause(pilot)
        assert any("[/crash] renamed" in n.message for n in app._notifications)
        Rendered(app).check("[/crash] renamed")
    with History(db) as other:
        assert other.get(cid).title == "[/crash] renamed [link=https://x]t"
