"""Outside text in the TUI (issue 13): model names, server errors, other tools' folder
names, Hub file names, conversation titles are shown sanitised and never parsed as
markup. Real Textual apps (Pilot); what the terminal would receive is rendered from the
screen's compositor and checked: no escape sequence from the text, no link, the brackets
shown as they are, and no crash (a ``MarkupError`` in a render ends the app, and
``run_test`` raises it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from rich.segment import Segment

from fakes import INFO, RecordingBackend, settle
from ggufgen import gguf_bytes
from helpers import answer, notifications, wait_for, was_notified
from openai_stub import StubServer
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.downloader import DownloadScreen
from vibechat.app.tui.screens.history_screens import RenameScreen
from vibechat.app.tui.screens.model_picker import ModelPicker
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
from vibechat.engine.remote.options import OpenAIOptions
from vibechat.engine.turns.backend import GenerationDone

SIZE = (160, 40)
C1 = {chr(c) for c in range(0x80, 0xA0)}


class Rendered:
    """The current screen as the terminal would get it: ``lines`` (the text),
    ``raw`` (the bytes written, Textual's own escape sequences included) and ``segments``."""

    def __init__(self, app) -> None:
        screen = app.screen
        update = screen._compositor.render_update(full=True, screen_stack=app._background_screens)
        self.raw: str = update.render_segments(app.console)
        self.segments: list[Segment] = [
            seg for row in update.strips for strip in row for seg in strip
        ]
        self.lines: list[str] = [
            "".join(seg.text for strip in row for seg in strip) for row in update.strips
        ]
        self.text = "\n".join(self.lines)

    def check(self, *shown: str) -> None:
        """Nothing from outside text reached the terminal as control: no C1 character, no
        OSC (clipboard writes, links, titles), no link or click action on any text; and
        each of ``shown`` appears as it is on one line."""
        assert not C1 & set(self.raw), "a C1 control character reached the terminal"
        assert "\x1b]" not in self.raw, (
            "an OSC sequence (clipboard, link, title) reached the terminal"
        )
        for seg in self.segments:
            if seg.control:
                continue
            assert "\x1b" not in seg.text and not C1 & set(seg.text), repr(seg.text)
            style = seg.style
            if style is not None:
                assert not style.link, f"{seg.text!r} links to {style.link!r}"
                assert "@click" not in (style.meta or {}), (
                    f"{seg.text!r} runs {style.meta['@click']!r}"
                )
        for text in shown:
            assert any(text in line for line in self.lines), f"{text!r} not shown:\n{self.text}"


async def shown(pilot, app, *texts: str) -> None:
    """Wait until each of ``texts`` is on the screen (a worker's result drawn, a palette's
    list gathered: later on a busy CPU), then ``Rendered.check`` the screen."""
    await wait_for(
        pilot,
        lambda: all(any(t in line for line in Rendered(app).lines) for t in texts),
        f"{texts!r} on the screen",
    )
    Rendered(app).check(*texts)


async def pause(pilot, times: int = 3) -> None:
    for _ in range(times):
        await pilot.pause()


async def search_in_downloader(pilot, text: str) -> DownloadScreen:
    """Open the downloader (d) and search the Hub for ``text``; returns the screen."""
    app = pilot.app
    await app.run_action("download")
    await pause(pilot)
    downloader = app.screen
    assert isinstance(downloader, DownloadScreen), downloader
    field = downloader.query_one("Input")
    field.value = text
    field.focus()
    await pilot.press("enter")
    await downloader.workers.wait_for_complete()
    await pause(pilot)
    return downloader


# ------------------------------------------------------------------ model names

EVIL_NAME = (
    "\x1b]52;c;ZXZpbA==\x07Evil [link='https://evil.example/x']click[/link] [bold]b[reverse]r"
)
EVIL_SHOWN = "Evil [link='https://evil.example/x']click[/link] [bold]b[reverse]r"


async def test_a_gguf_model_name_is_shown_sanitised_and_never_as_markup():
    """``general.name`` with an OSC 52 clipboard write and link markup: the status bar and
    the welcome line show it as text."""
    app = create_app(RecordingBackend(info=replace(INFO, name=EVIL_NAME)), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = Rendered(app)
        screen.check(EVIL_SHOWN)
        welcome = next(
            line for line in screen.lines if "Evil" in line and "·" in line and "ctx" not in line
        )
        status = screen.lines[-2]  # above the footer
        assert EVIL_SHOWN in welcome and EVIL_SHOWN in status


async def test_a_servers_model_id_is_shown_sanitised_and_never_as_markup():
    """The same name as a server's ``/v1/models`` id (a real HTTP stub). An id with control
    characters is left out by the engine (not printable); one with markup is shown as text."""
    with StubServer() as stub:
        stub.models = [EVIL_NAME, EVIL_SHOWN, "stub-small"]
        backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model=EVIL_SHOWN))
        app = create_app(backend, blink=False, save=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.status.model is not None and app.status.model.name == EVIL_SHOWN
            Rendered(app).check(EVIL_SHOWN)
            await pilot.press("f3")  # the server's models
            await app.screen.workers.wait_for_complete()
            await pause(pilot)
            Rendered(app).check(EVIL_SHOWN, "stub-small")


# ---------------------------------------------------------------- server errors

BAD = "bad [link=https://x]y"


async def test_a_servers_error_is_shown_as_text_live_and_when_the_conversation_is_reopened(
    tmp_path: Path,
):
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
            assert BAD in reply.status_shown.plain
            assert was_notified(app, BAD)
            Rendered(app).check(BAD)
            cid = app.chatlog.conversation_id
            assert cid is not None
            await pilot.press("ctrl+n")
            app.clear_notifications()
            await settle(pilot)
            await open_and_check_failed_reply(pilot, cid)


async def open_and_check_failed_reply(pilot, cid: int) -> None:
    """Open saved conversation ``cid``: its failed reply's status line shows BAD as text."""
    app = pilot.app
    app.chats.open_conversation(cid)
    await settle(pilot)
    await pause(pilot)
    assert BAD in app.chat.messages()[-1].status_shown.plain
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
        await open_and_check_failed_reply(pilot, cid)


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


async def test_a_hub_file_path_with_markup_is_not_offered_and_does_not_crash_the_downloader(
    fake_hub,
):
    """A repo's file ``odd[/crash]/odd-Q4_K_M.gguf``: brackets are unsafe in a file name on disk, so
    the engine does not offer it (engine/settings/refs.py); the safe file beside it is listed."""
    fake_hub.add_repo(
        "acme/Odd-GGUF",
        {"odd[/crash]/odd-Q4_K_M.gguf": gguf_bytes(), "plain/odd-Q8_0.gguf": gguf_bytes()},
    )
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await search_in_downloader(pilot, "acme/Odd-GGUF")
        Rendered(app).check("plain/odd-Q8_0.gguf")
        assert "[/crash]" not in Rendered(app).text


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
        await pilot.press("delete")
        await pause(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        Rendered(app).check(TITLE)
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        await pause(pilot)
        assert was_notified(app, TITLE)
        Rendered(app).check("[/crash]")
        with History(db) as other:
            assert other.count() == 0


async def test_renaming_a_conversation_titled_with_markup(tmp_path: Path):
    db = tmp_path / "history.db"
    cid = seed(db, TITLE)
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "ctrl+e")
        await pause(pilot)
        assert isinstance(app.screen, RenameScreen)
        assert app.screen.query_one("#rename-input").value == TITLE
        Rendered(app).check(TITLE)
        app.screen.query_one("#rename-input").value = "[/crash] renamed [link=https://x]t"
        await pilot.press("enter")
        await settle(pilot)
        await pause(pilot)
        assert was_notified(app, "[/crash] renamed")
        Rendered(app).check("[/crash] renamed")
    with History(db) as other:
        assert other.get(cid).title == "[/crash] renamed [link=https://x]t"


# ------------------------------------------------------ every surface, one string

# Escape sequences (CSI, OSC 8 link, OSC 52 clipboard write), a C1 CSI, and markup that
# would link, crash, style and run an action.
HOSTILE = (
    "\x1b[31m\x1b]8;;https://evil.example\x07\x9b2J[link=https://evil.example]x[/link] [/crash] "
    "[bold]b [@click=app.quit]q[/]\x1b]52;c;ZXZpbA==\x07"
)
SHOWN = "[link=https://evil.example]x[/link] [/crash] [bold]b [@click=app.quit]q[/]"
PIECES = ("[link=https://evil.example]x[/link]", "[/crash]", "[bold]b", "[@click=app.quit]q[/]")
# A path part (no "/"): for the current directory and the config file's folder.
HOSTILE_DIR = "\x1b]52;c;ZXZpbA==\x07a[bold]b[@click=app.quit]q"
DIR_SHOWN = "a[bold]b[@click=app.quit]q"
# (Hub file names with control characters or brackets are refused by the engine:
# engine/settings/refs.py)
HOSTILE_FILE = "evil/evil-Q4_K_M.gguf"


class HostileBackend(RecordingBackend):
    """Fails the next reply with ``fail`` when set."""

    fail: str | None = None

    def stream_chat(self, messages, params):
        if self.fail:
            from vibechat.engine.errors import VibechatError

            raise VibechatError(self.fail)
        yield from super().stream_chat(messages, params)


def check_notifications(app) -> None:
    """Every notification so far: plain text (never markup), sanitised."""
    assert notifications(app)
    for n in notifications(app):
        assert not n.markup, n.message
        for text in (n.message, n.title):
            assert "\x1b" not in text and not C1 & set(text), repr(text)


async def screen_is(pilot, kind):
    await pause(pilot)
    assert isinstance(pilot.app.screen, kind), pilot.app.screen
    return pilot.app.screen


async def test_every_surface_shows_hostile_outside_text_as_text(tmp_path: Path, monkeypatch):
    """One hostile string through every place the chat shows outside text: nothing
    crashes, the brackets show as they are, no escape sequence or C1 character reaches
    the terminal, no text links anywhere or runs an action."""
    from textual.command import CommandPalette

    from vibechat.app.tui.screens.history_screens import ExportScreen, SearchScreen
    from vibechat.app.tui.widgets.prompt_input import PromptInput
    from vibechat.engine.errors import VibechatError
    from vibechat.engine.models import download, hub
    from vibechat.engine.models import resolve as models
    from vibechat.engine.models.hub import HubModel, RepoListing
    from vibechat.engine.models.local_model import LocalModel
    from vibechat.engine.settings.config import LoadedConfig
    from vibechat.engine.settings.refs import RepoFile
    from vibechat.engine.settings.table import Config

    cwd = tmp_path / HOSTILE_DIR
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    db = tmp_path / "history.db"
    with History(
        db
    ) as history:  # a conversation had with another model, titled and named from outside
        chat = ChatLog(
            Conversation(), history, model="old " + HOSTILE, model_path="/elsewhere/other.gguf"
        )
        chat.add_user(HOSTILE)
        chat.finish_reply(chat.start_reply(), GenerationDone(HOSTILE))
        seeded = chat.conversation_id

    class FakeHub:  # the Hub's names, and its errors
        def search(self, query, limit=30):
            return [HubModel(id=HOSTILE, downloads=1)]

        def listing(self, repo):
            return RepoListing(repo=HOSTILE, revision="0" * 40, files=(RepoFile(HOSTILE_FILE, 1),))

    class FailingDownloader:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def download(self, *args, **kwargs):
            raise VibechatError(HOSTILE)

    monkeypatch.setattr(hub, "Hub", FakeHub)
    monkeypatch.setattr(download, "Downloader", FailingDownloader)
    monkeypatch.setattr(
        models,
        "all_models",
        lambda **kw: [
            LocalModel(
                name=HOSTILE,
                path=tmp_path / HOSTILE_DIR / "missing.gguf",
                size=1,
                quant=HOSTILE,
                source=HOSTILE,
            )
        ],
    )

    info = replace(INFO, name=HOSTILE, quantization="Q4", notices=(HOSTILE,))
    reply = f"See [site](https://evil.example/a[/crash]b) and [js](javascript:alert(1)) {HOSTILE}"
    backend = HostileBackend(reply=reply, info=info)
    # model_titles off: the rename dialog below shows the first prompt as the title.
    config = LoadedConfig(
        Config(model_titles=False), tmp_path / HOSTILE_DIR / "config.toml", file_problem=HOSTILE
    )
    app = create_app(
        backend,
        blink=False,
        history=History(db),
        config=config,
        backend_factory=lambda path, **changes: RecordingBackend(),
    )
    async with app.run_test(size=(240, 60), notifications=True) as pilot:
        await settle(pilot)
        # The status bar, the welcome line, the load notice and the config's problem.
        Rendered(app).check(SHOWN)
        check_notifications(app)
        app.clear_notifications()

        # A message, a reply (Markdown) and notes (/stats names the model's device, /system).
        # Submitted as they are (the input would sanitise them first).
        app.prompt_input.post_message(PromptInput.Submitted(HOSTILE))
        await settle(pilot)
        await pause(pilot)
        for text in ("/stats", f"/system {HOSTILE}", "/system"):
            app.prompt_input.post_message(PromptInput.Submitted(text))
            await pause(pilot)
        Rendered(app).check(*PIECES, "javascript:alert(1)", f"System prompt: {SHOWN}")
        assert [w.role for w in app.chat.messages()] == ["user", "assistant", "note", "note"]
        # Commands typed with markup in them are quoted back as text.
        for text in ("/nope[/crash]", "/set top_k [/crash]"):
            app.prompt_input.post_message(PromptInput.Submitted(text))
            await pause(pilot)
        assert was_notified(app, "/nope[/crash]")
        assert any("[/crash]" in n.message and "top_k" in n.message for n in notifications(app))
        Rendered(app).check("[/crash]")

        # The reply's links: an http one asks first (the URL shown as text), others are refused.
        app.chat.query("AssistantMessage").last().focus()
        await pilot.press("enter")
        confirm = await screen_is(pilot, ConfirmScreen)
        assert "https://evil.example/a[/crash]b" in confirm.question
        Rendered(app).check("https://evil.example/a[/crash]b")
        await answer(pilot, "escape")
        for _ in range(3):
            await pilot.press("enter")
            await pause(pilot)
            if isinstance(app.screen, ConfirmScreen):
                Rendered(app).check()
                await answer(pilot, "escape")
        assert was_notified(app, "javascript")

        # A failed reply: its status line and the notification quote the error.
        backend.fail = HOSTILE
        app.prompt_input.focus()
        app.prompt_input.load_text("again")
        await pilot.press("enter")
        await settle(pilot)
        await pause(pilot)
        assert SHOWN in app.chat.messages()[-1].status_shown.plain
        Rendered(app).check(SHOWN)
        check_notifications(app)
        app.clear_notifications()
        backend.fail = None

        # The sidebar (titles and model names), then rename, delete and export dialogs.
        await pilot.press("ctrl+b")
        await pause(pilot)
        Rendered(app).check("[link=https://evil.example]x[/")
        await pilot.press("ctrl+e")
        rename = await screen_is(pilot, RenameScreen)
        title = rename.query_one("#rename-input").value  # the first prompt, shortened
        assert (
            title.startswith("[link=https://evil") and "\x1b" not in title and not C1 & set(title)
        )
        Rendered(app).check(title)
        await pilot.press("escape")
        await pause(pilot)
        await pilot.press("delete")
        confirm = await screen_is(pilot, ConfirmScreen)
        assert f"“{title}”" in confirm.question
        Rendered(app).check(f"Delete the conversation “{title[:20]}")  # a long title wraps
        await answer(pilot, "escape")
        await pause(pilot)
        for _ in range(2):  # the second time the file exists: asked before replacing it
            await pilot.press("ctrl+s")
            export = await screen_is(pilot, ExportScreen)
            assert DIR_SHOWN in export.query_one("#export-path").value
            Rendered(app).check("[@click=app.quit]q/vibechat-")  # the input shows the path's end
            export.query_one("#export-path").focus()
            await pilot.press("enter")
            await pause(pilot)
        await screen_is(pilot, ConfirmScreen)
        Rendered(app).check(DIR_SHOWN)
        await answer(pilot, "escape")
        await pause(pilot)
        assert was_notified(app, "Exported to")
        check_notifications(app)
        app.clear_notifications()

        # Search: the titles and the snippets, with the matched word highlighted.
        await pilot.press("escape", "ctrl+f")
        search = await screen_is(pilot, SearchScreen)
        search.query_one("#search-input").value = "crash"
        await search.workers.wait_for_complete()
        await pause(pilot)
        assert search.hits
        Rendered(app).check(*PIECES)
        first = search.query_one("#search-results").get_option_at_index(0).prompt
        assert any(
            span.style == "bold reverse" for span in first.spans
        )  # the markers survive sanitising
        await pilot.press("down")
        search.query_one("#search-results").highlighted = next(
            i for i, hit in enumerate(search.hits) if hit.conversation_id == seeded
        )
        await pilot.press("enter")
        await settle(pilot)
        await pause(pilot)
        # The conversation opened was had with another model: said in a notification.
        assert was_notified(app, f"This conversation was with old {SHOWN};")
        Rendered(app).check(*PIECES)
        check_notifications(app)
        app.clear_notifications()

        # The model picker: cells, the loaded model's device, a running download's title;
        # choosing the model fails to load it (the state line, then the notification).
        app.models.download_title = HOSTILE
        await pilot.press("f3")
        picker = await screen_is(pilot, ModelPicker)
        await picker.workers.wait_for_complete()
        await pause(pilot)
        Rendered(app).check(*PIECES, "(downloading [link=https://evil.example]x[/link] [/crash]")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pause(pilot)
        assert was_notified(app, "Could not load")
        Rendered(app).check()
        check_notifications(app)
        app.clear_notifications()
        app.models.download_title = None

        # The downloader: repo ids and file names in the table, the title of the download,
        # and the error it ends with (status line and notification).
        downloader = await search_in_downloader(pilot, "evil")
        Rendered(app).check("[link=https://evil.example]x[/link] [/crash]")
        await pilot.press("enter")  # the repo's files
        await downloader.workers.wait_for_complete()
        await shown(pilot, app, "evil/evil-Q4_K_M.gguf", "[@click=app.quit]q[/]")
        await pilot.press("enter")  # download it: it fails
        await app.workers.wait_for_complete()
        await pause(pilot)
        assert SHOWN in downloader.query_one("#download-status").render().plain
        Rendered(app).check(SHOWN)
        check_notifications(app)
        await pilot.press("escape")
        await pause(pilot)

        # The command palette's help lines name the config file (its folder from outside).
        await pilot.press("ctrl+p")
        palette = await screen_is(pilot, CommandPalette)
        palette.query_one("Input").value = "Save parameters"
        await shown(pilot, app, DIR_SHOWN)
        await pilot.press("escape")
        await pause(pilot)


async def test_a_remote_servers_names_and_errors_in_its_picker():
    """The remote picker's title (the server), its model ids and its error line."""
    from vibechat.app.tui.screens.model_picker import RemoteModelPicker
    from vibechat.engine.errors import VibechatError

    def refuse() -> list[str]:
        raise VibechatError(HOSTILE)

    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        for listing in (lambda: [HOSTILE, "plain"], refuse):
            app.push_screen(RemoteModelPicker(HOSTILE, HOSTILE, listing))
            await pause(pilot)
            await app.screen.workers.wait_for_complete()
            await pause(pilot)
            Rendered(app).check(
                f"Models on {SHOWN}", SHOWN if listing is not refuse else f"⚠ {SHOWN}"
            )
            await pilot.press("escape")
            await pause(pilot)


async def test_a_model_that_fails_to_load_says_why_as_text():
    """The load error in the welcome line and the notification."""
    from vibechat.engine.errors import ModelLoadError

    class Failing(RecordingBackend):
        def load(self, on_progress=None):
            raise ModelLoadError(HOSTILE)

    app = create_app(Failing(), blink=False, save=False)
    async with app.run_test(size=(200, 40), notifications=True) as pilot:
        await settle(pilot)
        await pause(pilot)
        assert app.status.state == "no model"
        Rendered(app).check(f"The model could not be loaded: {SHOWN}")
        check_notifications(app)


async def test_pasted_and_taken_back_text_is_sanitised_in_the_inputs(tmp_path: Path):
    """A paste (the clipboard is outside text) into the prompt and into a dialog's input,
    and a saved prompt taken back with Ctrl+L: the inputs show it sanitised (a TextArea
    and an Input show control characters as they are)."""
    from textual import events

    from vibechat.app.tui.screens.history_screens import SearchScreen

    db = tmp_path / "history.db"
    cid = seed(db, HOSTILE)  # e.g. saved by ``vibechat run`` from a pipe
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        app.prompt_input.focus()
        app.post_message(events.Paste(HOSTILE))
        await pause(pilot)
        assert app.prompt_input.text == SHOWN
        Rendered(app).check(SHOWN)

        await pilot.press("ctrl+f")
        search = await screen_is(pilot, SearchScreen)
        app.post_message(events.Paste(HOSTILE))
        await pause(pilot)
        assert search.query_one("#search-input").value == SHOWN
        Rendered(app).check(SHOWN)
        await pilot.press("escape")
        await pause(pilot)

        app.chats.open_conversation(cid)
        await settle(pilot)
        app.prompt_input.clear()  # (a draft would stay, after the prompt taken back)
        await pilot.press("ctrl+l")  # the last prompt, back in the input
        await pause(pilot)
        assert app.prompt_input.text == SHOWN
        Rendered(app).check(SHOWN)


def test_the_helpers_sanitise_bound_and_never_read_markup():
    from vibechat.app.tui import outside

    assert outside.plain("a\x1b[2Jb\x9b1mc\x1b]52;c;ZQ==\x07d\n\te") == "abcd\n\te"
    assert (
        outside.plain("x" * 10, limit=5) == "xxxx…"
        and outside.plain("x" * 10, limit=None) == "x" * 10
    )
    assert outside.one_line(" a\n b\t\tc ") == "a b c"
    markup = "[bold]b[/bold] [link='https://x']y[/link] [/crash] [@click=app.quit]q[/]"
    line = outside.line(markup, style="italic")
    assert line.plain == markup and [span.style for span in line.spans] == ["italic"]
    assert outside.line("x" * 1000).plain == "x" * (outside.LINE - 1) + "…"
    assert (
        outside.block("a\nb").plain == "a\nb"
        and len(outside.block("y" * 10_000).plain) == outside.BLOCK
    )
    cell = outside.cell(markup)
    assert cell.plain == markup and not cell.spans


@pytest.mark.parametrize("pad", range(0, 40, 3))
def test_a_palette_help_line_cut_inside_a_hostile_tag_is_shown_as_text(pad):
    """The palette reads its help lines as markup. A config path holding brackets, cut to one
    line mid-tag (``[@click=app.…``), once made the palette's worker raise a MarkupError:
    ``textual.markup.escape`` leaves an unclosed tag as it is, which the parser then rejects."""
    from textual.content import Content

    from vibechat.app.tui import outside
    from vibechat.app.tui.shell.palette import action_commands

    config = Path("/x" * pad) / HOSTILE_DIR / ("[@click=app.quit]q[bold]" * 20) / "config.toml"
    helps = [command.help for command in action_commands([], str, config, lambda action: None)]
    assert helps
    for help_markup in helps:
        content = Content.from_markup(help_markup)  # raised MarkupError before
        assert not content.spans
        assert content.plain == help_markup.replace("\\[", "[")
    shown = [Content.from_markup(h).plain for h in helps]
    assert any(outside.ELLIPSIS in line and "[@click=app." in line for line in shown)
