"""The chat's start: what the command line costs before the first frame (issue 26.6,
docs/PERFORMANCE.md, "Speed on slow CPUs"). Real subprocesses; one test starts the engine
process on the starter model."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vibechat.app.tui as tui
from conftest import worker_threads

# The console script's own entry point, with the chat's options (every setting's flag, all
# unset but one) parsed by the top-level callback; `config show` then prints what they give,
# instead of opening the screen. The last line says which modules the process imported.
PROBE = textwrap.dedent("""
    import sys
    sys.argv = ["vibechat", "--no-save", *sys.argv[1:]]
    from vibechat.app.commands.cli import main
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    print("pydantic imported:", "pydantic" in sys.modules)
    print("exit:", code)
""")


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_unset_options_are_not_handed_to_pydantic():
    """Typer builds a pydantic TypeAdapter for each parameter it processes, even one the command
    line leaves unset; the chat's ~30 unset flags cost ~0.4 s of a slow CPU's first frame that
    way (pydantic's import included). Unset, they skip it; a given value is still coerced."""
    done = probe("config", "show")
    assert done.returncode == 0, done.stderr
    assert "pydantic imported: False" in done.stdout
    assert "exit: 0" in done.stdout
    done = probe("--temperature", "0.25", "config", "show")
    assert "exit: 0" in done.stdout, done.stderr
    assert any(
        line.startswith("params.temperature") and "0.25" in line and "--temperature" in line
        for line in done.stdout.splitlines()
    ), done.stdout


def test_a_given_value_is_still_checked():
    """The same parse with a bad value: Typer's own message and status, as before."""
    done = probe("--threads", "abc", "config", "path")
    assert "exit: 2" in done.stdout
    assert "--threads must be a whole number (got 'abc')" in done.stderr
    done = probe("run", "--conversation", "0", "-p", "hi")
    assert "exit: 2" in done.stdout
    assert "--conversation must be at least 1 (got 0)" in done.stderr


def test_the_freeze_before_the_screen_opens_runs_no_full_collection(monkeypatch):
    """What the imports built is frozen before the first frame (gc_policy), without the full
    collection that found nothing there and cost 20-33 ms of the first frame."""
    collections: list[tuple] = []
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or 0)
    before = gc.get_freeze_count()
    try:
        tui.freeze_startup_objects()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()  # the test process keeps collecting what it makes
    assert collections == []


async def test_routing_a_message_does_not_walk_the_layout(monkeypatch):
    """Every message a controller answers asks the app whether it is closing; the ~240 progress
    messages of a model's load arrive at once, ahead of its ModelReady, and a long conversation
    has a widget per message: the answer comes from the screen's own children (the status bar),
    not a walk of the whole layout. It is still right: no status bar, closing."""
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers.events import ModelProgress
    from vibechat.app.tui.widgets.status_bar import StatusBar

    app = create_app(RecordingBackend(), save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.model_ready, "the model is ready")
        screen = app.default_screen
        walks: list[tuple] = []
        real_walk = screen.walk_children
        monkeypatch.setattr(
            screen,
            "walk_children",
            lambda *args, **kwargs: walks.append(args) or real_walk(*args, **kwargs),
        )
        assert app.closing is False
        assert walks == []
        app.post_message(ModelProgress(0.5))
        await wait_for(pilot, lambda: app.state.status == "loading 50%", "the progress is shown")
        await app.query_one(StatusBar).remove()
        assert app.closing is True


@pytest.mark.model
def test_the_engine_process_starts_on_the_bindings_alone_and_sends_fewer_progress_messages(
    starter_path, monkeypatch
):
    """The engine process imports llama-cpp-python's ctypes bindings, not its high-level half
    (``Llama``: numpy, jinja2, the chat formats; 0.14 s of every start), and sends a load's
    progress at most once a percent: llama.cpp called back 237 times for the starter, each a
    message the chat handled before ``ready``; nor the ~1,300 DEBUG lines of llama.cpp's log
    that the chat drops (INFO and above still come: a crash report's tail). It still loads and
    answers, and a grammar (which samples with numpy) still works: numpy is imported when one
    is first used."""
    import logging

    import vibechat.engine.llama.worker_pipes as worker
    from conftest import collect
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.settings.structured import OutputFormat
    from vibechat.engine.turns.backend import ChatMessage

    levels: list[int] = []  # of the log records that came from the engine process
    read_frame = worker.read_frame

    def spy(stream):
        frame = read_frame(stream)
        if frame is not None and frame[0] == "log":
            levels.append(frame[2])
        return frame

    monkeypatch.setattr(worker, "read_frame", spy)
    monkeypatch.setattr(
        logging.getLogger("vibechat"), "level", logging.WARNING
    )  # the chat's, without --verbose
    for name in [n for n in list(logging.Logger.manager.loggerDict) if n.startswith("vibechat.")]:
        monkeypatch.setattr(
            logging.getLogger(name), "level", logging.NOTSET
        )  # (another test may have set one)
    backend = WorkerBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, context_size=2048, repack="off"
        )
    )
    try:
        progress: list[float] = []
        assert backend.load(on_progress=progress.append).architecture == "gemma3"
        assert progress[-1] == pytest.approx(1.0) and progress == sorted(progress)
        assert len(progress) <= 101, len(progress)  # 237 before
        assert levels and min(levels) >= logging.INFO, levels.count(
            logging.DEBUG
        )  # 1,318 DEBUG before
        maps = Path(f"/proc/{backend.pid}/maps")
        if maps.exists():  # Linux: the shared libraries the process has loaded
            assert "numpy" not in maps.read_text()
        hello = [ChatMessage("user", "List three colours.")]
        _, done = collect(backend, hello, SamplingParams(temperature=0, max_tokens=12))
        assert done.text.strip()
        digits = SamplingParams(
            temperature=0,
            max_tokens=8,
            output_format=OutputFormat("grammar", "root ::= [0-9] [0-9] [0-9]", "digits.gbnf"),
        )
        _, done = collect(backend, hello, digits)
        assert done.text.isdigit() and len(done.text) == 3, done.text
        if maps.exists():
            assert "numpy" in maps.read_text()  # imported for the grammar, on first use
    finally:
        backend.close()


# The chat in a fresh process (the test process has imported every screen already): what it has
# imported once its first frame is drawn and the model is ready, then each dialog opened.
SCREENS_PROBE = textwrap.dedent("""
    import asyncio
    import sys

    sys.path.insert(0, sys.argv[1])
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app

    LAZY = ("downloader", "model_picker", "history_screens", "help_screen")

    def imported():
        return [name for name in LAZY if f"vibechat.app.tui.screens.{name}" in sys.modules]

    async def main():
        app = create_app(RecordingBackend(), save=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.model_ready, "the model is ready")
            print("at start:", imported())
            hub = ("vibechat.engine.models.download", "vibechat.engine.models.hub")
            print("hub at start:", [name for name in hub if name in sys.modules])
            dialogs = (
                (app.models.open_downloads, "DownloadScreen"),
                (app.models.open_picker, "ModelPicker"),
                (app.action_help, "HelpScreen"),
                (lambda: app.chats.act("rename", 1, "a title"), "RenameScreen"),
            )
            for open_it, screen in dialogs:
                open_it()
                shown = lambda: type(app.screen).__name__ == screen and app.screen.is_mounted
                await wait_for(pilot, shown, screen)
                app.screen.dismiss(None)
                await wait_for(pilot, lambda: app.screen is app.default_screen, "the dialog closed")
            print("opened:", imported())
            from vibechat.app.tui.screens.downloader import DownloadScreen
            print("routed:", app.routes[DownloadScreen.Start] == app.models.start_download,
                  DownloadScreen.Cancel in app.routes)

    asyncio.run(main())
""")


def test_the_dialogs_are_imported_when_first_opened_not_before_the_first_frame():
    """The download and model-picker screens (their data tables, progress bar, path completion),
    the history dialogs and the help are imported when first opened, not before the chat's
    first frame, nor the downloader's engine module and the Hub client; their controllers still
    answer the messages they send (the downloader's
    ``Start`` and ``Cancel``, defined apart in screen_messages.py)."""
    tests = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", SCREENS_PROBE, tests],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "at start: []" in done.stdout, done.stdout
    assert "hub at start: []" in done.stdout, done.stdout  # nor the downloader's engine module
    assert "opened: ['downloader', 'model_picker', 'history_screens', 'help_screen']" in done.stdout
    assert "routed: True True" in done.stdout


# The chat in a fresh process, its model's load held until the first frame is drawn: whether
# Rich's Markdown (markdown-it, Pygments) was imported by then, and once the model is ready.
MARKDOWN_PROBE = textwrap.dedent("""
    import asyncio
    import sys
    import threading

    sys.path.insert(0, sys.argv[1])
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app

    MODULES = ("rich.markdown", "markdown_it", "vibechat.app.tui.conversation.chat_markdown")
    drawn = threading.Event()

    class HeldLoad(RecordingBackend):
        def load(self, on_progress=None):
            drawn.wait(30)  # the first frame is on its way to the terminal
            return super().load(on_progress)

    async def main():
        app = create_app(HeldLoad(), save=False)
        display = type(app)._display

        def first_display(self, screen, renderable):
            display(self, screen, renderable)
            if not drawn.is_set():
                print("at the first frame:", [name for name in MODULES if name in sys.modules])
                drawn.set()

        type(app)._display = first_display
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.model_ready, "the model is ready")
            warm = lambda: all(name in sys.modules for name in MODULES)
            await wait_for(pilot, warm, "the warm-up's import")
            print("after the warm-up:", [name for name in MODULES if name in sys.modules])
            app.prompt_input.load_text("hi")
            await pilot.press("enter")
            replied = lambda: not app.generating and app.chat.messages()[-1].text
            await wait_for(pilot, replied, "the reply")
            print("reply:", repr(app.chat.messages()[-1].text))

    asyncio.run(main())
""")


def test_rich_markdown_is_imported_after_the_first_frame_by_the_warm_up():
    """Rich's Markdown, with markdown-it and Pygments (~27 ms of the first frame on a 355 µs host),
    is not imported before the chat's first frame: the model's load worker imports it with its
    warm-up render once the model is ready, and a reply then renders as Markdown."""
    tests = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", MARKDOWN_PROBE, tests],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "at the first frame: []" in done.stdout, done.stdout
    assert (
        "after the warm-up: ['rich.markdown', 'markdown_it', "
        "'vibechat.app.tui.conversation.chat_markdown']" in done.stdout
    ), done.stdout
    assert "reply: " in done.stdout and "reply: ''" not in done.stdout, done.stdout


# `vibechat` as the console script runs it, stopped at run_tui's terminal check (the probe's
# stdin is no terminal): what Textual's frame rate is set to by then, and whether Textual had
# been imported before it was set (it reads TEXTUAL_FPS once, at import).
FPS_PROBE = textwrap.dedent("""
    import os
    import sys

    sys.argv = ["vibechat", "--no-save", "--base-url", "http://127.0.0.1:9/v1"]
    import vibechat.app.terminal as terminal

    def stop_here():
        fps = os.environ.get("TEXTUAL_FPS")
        print("TEXTUAL_FPS:", fps, "| textual imported:", "textual" in sys.modules)
        import textual.constants
        print("Textual's frame rate:", textual.constants.MAX_FPS)
        raise SystemExit(0)

    terminal.require_terminal = stop_here
    from vibechat.app.commands.cli import main
    main()
""")


@pytest.mark.parametrize(("given", "expected"), [(None, "120"), ("30", "30")])
def test_the_chat_sets_textuals_frame_rate_before_textual_is_imported(given, expected):
    """Textual draws a change on a grid of frames (60 a second by default); the chat asks for
    120, so a key waits at most 8.3 ms for its frame (app/tui/frame_rate.py). Set before Textual
    is imported, which reads it once; a TEXTUAL_FPS the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    if given is not None:
        env["TEXTUAL_FPS"] = given
    done = subprocess.run(
        [sys.executable, "-c", FPS_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"TEXTUAL_FPS: {expected} | textual imported: False" in done.stdout, done.stdout
    assert f"Textual's frame rate: {expected}" in done.stdout, done.stdout


# The end of a probe: `vibechat --no-save --model MODEL` as the console script runs it.
RUN_ENTRY = """
    sys.argv = ["vibechat", "--no-save", "--model", model]
    from vibechat.app.commands.cli import main
    main()
"""

# The end of a probe whose ``create_app`` wraps the app and draws through ``first_display``.
WRAPPED_ENTRY = (
    """
        type(app)._display = first_display
        return app

    tui.create_app = create_app
"""
    + RUN_ENTRY
)

# `vibechat` as the console script runs it, on a terminal, on a model file whose header is valid:
# where the engine process is started (its Popen, seen by an audit hook), whether Textual had
# been imported by then. The probe ends there: nothing is loaded.
ENGINE_START_PROBE = textwrap.dedent("""
    import os
    import sys

    report, model = sys.argv[1], sys.argv[2]

    def hook(event, args):
        child = "vibechat.engine.llama.worker_child"
        if event == "subprocess.Popen" and child in list(args[1] or ()):
            with open(report, "w") as out:
                out.write(f"textual imported: {'textual' in sys.modules}\\n")
                out.write(f"config module imported: {'vibechat.app.appconfig' in sys.modules}\\n")
                out.write(f"rich imported: {'rich' in sys.modules}\\n")
            os._exit(0)

    sys.addaudithook(hook)
    sys.argv = ["vibechat", "--no-save", "--model", model]
    from vibechat.app.commands.cli import main
    main()
""")


def probe_in_pty(
    probe: str, tmp_path: Path, *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``probe`` (a script that starts the real entry on a tiny GGUF) in a new interpreter
    on a pseudo-terminal, with its report file, the model and ``args`` as its arguments: what
    it did, and the report file it wrote."""
    import pty

    from ggufgen import write_gguf

    model = write_gguf(tmp_path / "tiny.gguf")
    report = tmp_path / "report.txt"
    parent, child = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe, str(report), str(model), *args],
            stdin=child,
            stdout=child,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    finally:
        os.close(child)
        os.close(parent)
    return done, report


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_the_engine_process_starts_before_textual_is_imported(tmp_path):
    """The chat starts its engine process first (engine/llama/worker_ahead.py), before it reads
    its config, picks the model or imports Textual (or Rich, for the help pages' escapes): the
    process's own start and then the model's load run on another core while the chat imports
    Textual and draws its first frame. It was started by a thread once the model was picked, as
    Textual's import began."""
    done, report = probe_in_pty(ENGINE_START_PROBE, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report.read_text().splitlines() == [
        "textual imported: False",
        "config module imported: False",
        "rich imported: False",  # help pages' markup escapes, only where one is drawn
    ]


def test_an_engine_process_started_ahead_and_not_taken_is_ended(tmp_path):
    """One the chat started ahead and did not use (its backend was never made: a bad config, a
    remote server) is ended by ``end()``, and one a backend holds untaken by its ``close()``."""
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.llama.worker_ahead import EngineAhead
    from vibechat.engine.settings.knobs import LlamaCppOptions

    for end in ("ahead", "backend"):
        ahead = EngineAhead()
        pid = ahead.pid
        assert pid is not None
        if end == "ahead":
            ahead.end()
        else:
            options = LlamaCppOptions(model_path=tmp_path / "none.gguf", threads=worker_threads())
            WorkerBackend(options, ahead).close()
        assert ahead.pid is None and ahead.take() is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # ended and reaped


async def test_the_history_and_the_tools_are_read_after_the_first_frame(monkeypatch):
    """The first frame draws neither the conversation list (the sidebar is hidden) nor the tools:
    the history's database is opened, repaired and listed, and the tool servers started, once
    it is drawn, in threads that would otherwise share the interpreter with its layout and
    render. A real history file (under tmp_path); the list still comes."""
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers.tool_rounds import ToolRounds
    from vibechat.app.tui.shell.app import VibechatApp
    from vibechat.engine.chat.history import History

    frames: list[int] = []
    seen: dict[str, int] = {}
    display, open_history, list_tools = VibechatApp._display, History.open, ToolRounds.list_tools

    def counted(app, screen, renderable):
        frames.append(1)
        display(app, screen, renderable)

    def opened(history, *args, **kwargs):
        seen.setdefault("history opened", len(frames))
        return open_history(history, *args, **kwargs)

    def tools_listed(rounds):
        seen.setdefault("tools listed", len(frames))
        return list_tools(rounds)

    monkeypatch.setattr(VibechatApp, "_display", counted)
    monkeypatch.setattr(History, "open", opened)
    monkeypatch.setattr(ToolRounds, "list_tools", tools_listed)
    app = create_app(RecordingBackend())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.model_ready, "the model is ready")
        await wait_for(pilot, lambda: "history opened" in seen, "the history's list")
        await wait_for(pilot, lambda: app.history.conversations() == [], "the history, open")
    assert seen["history opened"] >= 1 and seen["tools listed"] >= 1, seen


async def test_the_markdown_warm_up_waits_for_the_frame_that_says_ready(monkeypatch):
    """Once the model is ready, the Markdown's first render (its imports and caches) is warmed
    up in a worker, after the frame that shows ``ready`` is drawn: begun in the load's worker
    as soon as the load ended, it shared the interpreter with the UI thread's handling and
    drawing of ``ready``."""
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers import model_loads
    from vibechat.app.tui.shell.app import VibechatApp

    ready_frames: list[int] = []
    warmed: list[int] = []
    display, warm_up = VibechatApp._display, model_loads.warm_up_markdown

    def counted(app, screen, renderable):
        display(app, screen, renderable)
        if app.state.status == "ready":
            ready_frames.append(1)

    def warming(*args):
        warmed.append(len(ready_frames))
        warm_up(*args)

    monkeypatch.setattr(VibechatApp, "_display", counted)
    monkeypatch.setattr(model_loads, "warm_up_markdown", warming)
    app = create_app(RecordingBackend(), save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: warmed, "the warm-up")
    assert warmed[0] >= 1, warmed


# `vibechat` as the console script runs it, on a terminal: the garbage collections Python ran
# from Textual's import to the chat's first frame, then whether the collector is on again once
# the first frame is drawn.
GC_PROBE = textwrap.dedent(
    """
    import gc
    import sys

    report, model = sys.argv[1], sys.argv[2]
    counted = {"on": False, "collections": 0}

    def hook(event, args):
        if event == "import" and args[0] == "textual":
            counted["on"] = True

    def collected(phase, info):
        if phase == "stop" and counted["on"]:
            counted["collections"] += 1

    sys.addaudithook(hook)
    gc.callbacks.append(collected)
    import vibechat.app.tui as tui

    make_app = tui.create_app

    def create_app(*args, **kwargs):
        app = make_app(*args, **kwargs)
        display = type(app)._display

        def first_display(self, screen, renderable):
            display(self, screen, renderable)
            if counted["on"]:
                counted["on"] = False
                with open(report, "w") as out:
                    out.write(f"collections before the first frame: {counted['collections']}\\n")
                self.call_after_refresh(after)

        def after():
            with open(report, "a") as out:
                out.write(f"collector on after it: {gc.isenabled()}\\n")
            app.exit()

"""
    + WRAPPED_ENTRY
)


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_no_garbage_collection_runs_between_textuals_import_and_the_first_frame(tmp_path):
    """Textual's and the chat's imports and the first layout build tens of thousands of objects
    that live as long as the chat; Python scanned them in ~150 collections (one of them full)
    before the first frame, ~10 % of its CPU. The collector waits for the first frame (run_tui),
    and is on again once it is drawn."""
    done, report = probe_in_pty(GC_PROBE, tmp_path)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert report.read_text().splitlines() == [
        "collections before the first frame: 0",
        "collector on after it: True",
    ]


# What the first frame does not draw, imported after it: /compare's controller and its parts
# (built once the first frame is drawn), the slash commands' table (by the first slash command),
# the palette's lists and the compare dialog (when first opened).
AFTER_FIRST_FRAME = (
    "vibechat.app.tui.controllers.comparisons",
    "vibechat.app.tui.controllers.compare_work",
    "vibechat.app.tui.controllers.compare_tools",
    "vibechat.app.compare_plan",
    "vibechat.engine.chat.pairs",
)
ON_FIRST_USE = (
    "vibechat.app.tui.controllers.slash_commands",
    "vibechat.app.tui.shell.palette",
    "vibechat.app.tui.screens.compare_setup",
)

# `vibechat` as the console script runs it, on a terminal: which of those modules it has
# imported when its first frame is written, how many modules in all (for the record), then once
# the frame is drawn; then a slash command, the palette and the compare dialog used.
DEFERRED_PROBE = textwrap.dedent(
    """
    import sys

    report, model, after, used = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
    import vibechat.app.tui as tui

    make_app = tui.create_app

    def write(line):
        with open(report, "a") as out:
            out.write(line + "\\n")

    def present(names):
        return [name for name in names if name in sys.modules]

    def create_app(*args, **kwargs):
        app = make_app(*args, **kwargs)
        display = type(app)._display
        seen = {"first": True}

        def first_display(self, screen, renderable):
            display(self, screen, renderable)
            if seen["first"]:
                seen["first"] = False
                write(f"at the first frame: {present(after + used)}")
                vibechat = [name for name in sys.modules if name.startswith("vibechat")]
                write(f"(modules: {len(sys.modules)}, vibechat: {len(vibechat)})")
                self.set_timer(0.2, drawn)

        def drawn():
            write(f"after it: {present(after + used)}")
            from vibechat.app.tui.widgets.prompt_input import PromptInput

            app.prompt_input.post_message(PromptInput.Submitted("/compare off"))
            app.action_command_palette()
            app.action_compare_setup()
            app.set_timer(0.2, closing)

        def closing():
            write(f"used: {present(used)}")
            app.exit()

"""
    + WRAPPED_ENTRY
)


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_what_the_first_frame_does_not_draw_is_imported_after_it(tmp_path):
    """The chat's first frame imports none of /compare's controller and its parts, the slash
    commands' table, the palette's lists or the compare dialog; the controller is built once the
    frame is drawn, the rest when first used (a slash command, the palette, the dialog)."""
    done, report = probe_in_pty(
        DEFERRED_PROBE, tmp_path, " ".join(AFTER_FIRST_FRAME), " ".join(ON_FIRST_USE)
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    lines = report.read_text().splitlines()
    assert lines[0] == "at the first frame: []", lines
    assert lines[2] == f"after it: {list(AFTER_FIRST_FRAME)}", lines
    assert lines[3] == f"used: {list(ON_FIRST_USE)}", lines


async def test_a_compare_asked_for_before_the_first_frame_is_armed_not_lost(monkeypatch):
    """/compare's controller is built once the first frame is drawn; a /compare that comes
    before (typed ahead: here, as the screen mounts) builds it then and arms the next prompt,
    and the frame-after work keeps that controller, armed, rather than making another."""
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers.comparisons import Comparisons
    from vibechat.app.tui.shell.app import VibechatApp
    from vibechat.app.tui.widgets.prompt_input import PromptInput

    built: list[str] = []
    frames: list[int] = []
    typed: list[str] = []
    mount, after, make = VibechatApp.on_mount, VibechatApp._after_first_frame, Comparisons.__init__

    async def mounted(app):
        mount(app)
        typed.append("/compare")
        await app._on_submit(PromptInput.Submitted("/compare temperature=1.5"))

    def first_frame_done(app):
        frames.append(1)
        return after(app)

    def made(controller, host):
        if not typed:
            built.append("with the app")
        else:
            built.append("by the /compare" if not frames else "after the first frame")
        make(controller, host)

    monkeypatch.setattr(VibechatApp, "on_mount", mounted)
    monkeypatch.setattr(VibechatApp, "_after_first_frame", first_frame_done)
    monkeypatch.setattr(Comparisons, "__init__", made)
    app = create_app(RecordingBackend(), save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: frames, "the first frame")
        await wait_for(pilot, lambda: app.model_ready, "the model is ready")
        assert built == ["by the /compare"]
        assert app.comparisons.armed is not None
        assert "1.5" in app.state.compare, app.state.compare


async def test_the_hidden_panels_are_mounted_after_the_first_frame_with_what_came_before(
    monkeypatch,
):
    """The conversation list, the token lens and the parameter panel are hidden at start: the
    first frame is drawn without them, up to the frame that draws the footer's keys, and they
    are mounted right after it, in their places. What came before (here, as the screen mounts:
    a /set, then F2, h and i typed ahead, the model's load) is not lost: the keys wait for the
    panel and come in their order once it is there: the panel opens, "hi" is in the input, and
    the panel shows the new temperature and the loaded model's GPU layers."""
    from textual import events
    from textual.widgets import Static

    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.shell.app import VibechatApp
    from vibechat.app.tui.widgets.footer import KeysFooter
    from vibechat.app.tui.widgets.param_panel import ParamPanel
    from vibechat.app.tui.widgets.prompt_input import PromptInput
    from vibechat.app.tui.widgets.slider import Slider

    hidden = "#sidebar, #lens, #params"
    typed: list[float] = []
    # Each frame's hidden widgets, up to the first that draws the footer's keys.
    at_first_frame: list[list[str]] = []
    display, mount = VibechatApp._display, VibechatApp.on_mount

    def first_display(app, screen, renderable):
        if not at_first_frame or app.query_one(KeysFooter).rebuilds == 0:
            at_first_frame.append([str(w.id) for w in app.query(hidden)])
        display(app, screen, renderable)

    async def mounted(app):
        mount(app)
        await app._on_submit(PromptInput.Submitted("/set temperature 1.5"))
        typed.append(app.conversation.params.temperature)
        for key, character in (("f2", None), ("h", "h"), ("i", "i")):
            app.post_message(events.Key(key, character))

    monkeypatch.setattr(VibechatApp, "_display", first_display)
    monkeypatch.setattr(VibechatApp, "on_mount", mounted)
    app = create_app(RecordingBackend(), save=False)
    async with app.run_test(size=(140, 40)) as pilot:
        panel = lambda: app.query(ParamPanel)  # noqa: E731
        await wait_for(pilot, lambda: panel() and panel().first().is_mounted, "the panel")
        await wait_for(pilot, lambda: app.model_ready, "the model is ready")
        await pilot.pause()
        assert at_first_frame and all(shown == [] for shown in at_first_frame), at_first_frame
        assert [w.id for w in app.query_one("#body").children] == ["sidebar", "main", "params"]
        assert [w.id for w in app.query_one("#main").children] == ["chat", "lens", "tray", "input"]
        await wait_for(pilot, lambda: app.prompt_input.text == "hi", "the keys typed ahead")
        assert app.panel.has_class("-visible")
        assert typed == [1.5]
        assert app.query_one("#slider-temperature", Slider).value == 1.5
        hint = app.query_one("#gpu-hint", Static)
        assert str(hint.content) and str(hint.content) != "Waiting for the model.", hint.content
