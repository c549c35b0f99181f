"""The floors under the chat's speed targets (issue 26): what the chat's own dependencies take
on this host, alone, measured in the same run as the chat's figure, round by round, so that each
target can be read against the least that any chat built on them reaches here.

- **First frame** (a 120x40 pseudo-terminal, until the footer is drawn): ``python -c pass`` (the
  interpreter), a bare Textual app holding a ``Static``, a ``TextArea`` and a ``Footer`` (the
  smallest screen a chat has), the same app opened by a Typer command line with a few options
  (the design card makes Typer the chat's command line: its import and parse come before any
  first frame a vibechat draws), and ``vibechat --no-save`` (``bench_chat.one_round``).
- **Model ready**: llama.cpp alone in a fresh process, timed from its start: llama-cpp-python's
  ctypes bindings (without the package's high-level half, as the engine imports them), the starter
  loaded with the library's default model parameters, and its context created as the chat
  creates it (its size, threads, batch); against the chat's own model ready, the same round.
- **A frame while a reply grows** (headless, 120x40, garbage collection frozen as the chat has
  it): Textual alone, a scrolling column that gets one more wrapped paragraph (a ``Static``) and
  scrolls to its end every 67 ms (the chat's fastest render pace, 15 Hz): its worst event-loop
  gap over 40 steps, and keypress to screen (keys posted as ``bench_tui`` posts them, 30 presses)
  while it goes on; the same with Textual's ``Log`` (plain lines appended, nothing wrapped,
  nothing mounted: the cheapest growing text Textual draws); and the chat's figures from
  ``bench_tui``: the worst gap of the 16,000-token burst, and the worst keypress while a reply
  streams at 500 tokens/s.
- **The same burst, the least a Markdown chat does with it** (issue 42 point 5): the column's
  paragraph a frame does much less than the chat's burst, whose slices are each more than a
  screen of new text, rendered as Markdown. So a second floor takes the chat's own burst of the
  same round: the same text, cut into the same slices the chat appended, one per call of its
  ``AssistantMessage.append`` (reply_stream.py cuts a burst into slices sized by what a
  character cost to render, pacing.py spaces them). Each slice is rendered once as Rich's
  ``Markdown`` (in a worker thread, as the chat renders a slice; at the column's width, the
  lines kept), its lines mounted once at the end of a scrolling column in a widget that makes
  Textual strips only for the lines painted (Textual's line API: ``render_line``; a ``Static`` of
  the lines makes strips for every line of a slice, ~100-400, and its worst gap was 54-106 ms on
  a 2-vCPU Xeon, above the chat's own, which draws only the lines in view: not a floor), and the
  column scrolled to its end; the next slice begins once the screen has refreshed (a
  slice a frame, as the chat shows one before it renders the next). Nothing is rendered twice:
  no live tail re-rendered, no segment re-laid out; what is mounted is never touched again; a
  slice cut inside a Markdown block renders as a document of its own (the floor does not even
  keep the Markdown right across a cut). Full collections wait while it grows, as the chat's
  do (gc_policy.py). Its worst event-loop gap (the same ``GapWatcher``) is a floor for the
  chat's burst: any chat on this Textual and Rich that shows these slices as Markdown, one a
  frame, parses, renders, lays out and paints at least this much. It leaves out two things the
  chat cannot: the tokens' hand-over from the generating thread (16,000 pieces in the burst's
  first ~0.1 s, which share the interpreter with the first frames), and the prompt's message.

Every Textual app here, the chat's and the bare ones, draws at the chat's frame rate
(app/tui/frame_rate.py). The table at the end gives, per figure, the target scaled to this host
(``_common.py``), the dependency's floor, the chat's figure, and both as multiples of the floor: a
target below its floor cannot be met by any chat on this Textual or this llama.cpp, on this host.

    .venv/bin/python bench/bench_floors.py [--rounds 5] [--skip-frames] [--skip-load]
[--skip-stream]"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import gc
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

from _common import calibration, print_calibration
from bench_chat import ANSI, COLS, FIRST_FRAME, ROWS, one_round
from vibechat.app.tui.frame_rate import use_frame_rate

BARE_APP = textwrap.dedent("""
    from textual.app import App
    from textual.widgets import Footer, Static, TextArea

    class Bare(App):
        BINDINGS = [("ctrl+p", "command_palette", "palette")]

        def compose(self):
            yield Static("a chat")
            yield TextArea()
            yield Footer()

    Bare().run()
""")

# The same bare app opened by a Typer command line, as `vibechat` opens the chat: the design card
# makes Typer the chat's command line, so its import and parse come before any first frame a
# vibechat can draw. A handful of options, as a chat's flags (the chat declares ~40).
BARE_CLI_APP = (
    textwrap.dedent("""
    from typing import Optional

    import typer

    cli = typer.Typer(add_completion=False)

    @cli.callback(invoke_without_command=True)
    def main(
        model: Optional[str] = typer.Option(None, "--model", "-m", help="a model"),
        temperature: Optional[float] = typer.Option(None, "--temperature", "-t", help="t"),
        top_k: Optional[int] = typer.Option(None, "--top-k", help="k"),
        no_save: bool = typer.Option(False, "--no-save", help="no history"),
    ) -> None:
""")
    + textwrap.indent(BARE_APP, "    ")
    + "\ncli()\n"
)

# llama.cpp alone: the bindings (not the package's __init__, which imports the high-level Llama,
# numpy and jinja2), the model with default parameters, the context as the chat makes it.
LOAD_ONLY = textwrap.dedent("""
    import importlib.util, sys, types
    spec = importlib.util.find_spec("llama_cpp")
    package = types.ModuleType("llama_cpp")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["llama_cpp"] = package
    import llama_cpp.llama_cpp as ll

    path, n_ctx, threads, n_batch, n_ubatch = sys.argv[1], *map(int, sys.argv[2:6])
    quiet = ll.llama_log_callback(lambda level, text, user: None)
    ll.llama_log_set(quiet, None)
    ll.llama_backend_init()
    model = ll.llama_model_load_from_file(path.encode(), ll.llama_model_default_params())
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = min(n_ctx, ll.llama_model_n_ctx_train(model) or n_ctx)
    cparams.n_batch = min(n_batch, cparams.n_ctx)
    cparams.n_ubatch = min(n_ubatch, cparams.n_batch)
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = ll.llama_init_from_model(model, cparams)
    print("ready" if ctx else "failed", flush=True)
""")


def pty_until(argv: list[str], pattern: re.Pattern[bytes], timeout: float = 30.0) -> float:
    """Seconds from starting ``argv`` in a pseudo-terminal until its output (escape codes
    removed) matches ``pattern``; the process is then killed."""
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    screen, found = b"", float("nan")
    try:
        while time.perf_counter() - start < timeout:
            if not select.select([fd], [], [], 0.05)[0]:
                continue
            try:
                screen += ANSI.sub(b"", os.read(fd, 1 << 16))
            except OSError:
                break
            if pattern.search(screen):
                found = time.perf_counter() - start
                break
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    return found


def load_only(path: Path, n_ctx: int, threads: int, n_batch: int, n_ubatch: int) -> float:
    """Seconds from starting a process to llama.cpp's context created in it (``LOAD_ONLY``)."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD_ONLY,
            str(path),
            str(n_ctx),
            str(threads),
            str(n_batch),
            str(n_ubatch),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - start
    if done.stdout.strip() != "ready":
        raise SystemExit(f"llama.cpp alone did not load the starter: {done.stderr[-500:]}")
    return elapsed


async def textual_growing(kind: str, steps: int = 40, presses: int = 30) -> dict[str, float]:
    """Textual alone: a column growing every 67 ms (``kind``: ``static``, a wrapped paragraph
    mounted and the view scrolled to its end; ``log``, a line appended to a ``Log``); its worst
    event-loop gap, then keypress to screen while it goes on (``bench_tui.KeyTimer``, as the
    chat's rounds measure it)."""
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual.widgets import Footer, Log, Static, TextArea

    from bench_tui import GapWatcher, KeyTimer

    paragraph = (
        "The quick brown fox jumps over the lazy dog, and the model goes on writing about it at "
        "length, one sentence after another, wrapped at the width of the column. "
    ) * 2

    class Growing(App):
        def compose(self) -> ComposeResult:
            yield Log(id="column") if kind == "log" else VerticalScroll(id="column")
            yield TextArea(id="input")
            yield Footer()

    app = Growing()
    try:
        with KeyTimer(app, lambda app: app.query_one("#input", TextArea).text) as keys:
            async with app.run_test(size=(COLS, ROWS)) as pilot:
                column = app.query_one("#column")

                async def step(i: int) -> None:
                    if isinstance(column, Log):
                        column.write_line(f"{i} {paragraph[: COLS - 8]}")
                    else:
                        await column.mount(Static(f"{i} {paragraph}", markup=False))
                        column.scroll_end(animate=False)

                for i in range(30):  # a screen's worth first, as a reply under way has
                    await step(i)
                await pilot.pause()
                gc.collect()
                gc.freeze()
                watcher = GapWatcher()
                watcher.start()
                for i in range(steps):
                    await step(i)
                    await asyncio.sleep(0.067)
                await watcher.stop()

                async def grow() -> None:
                    for i in range(10_000):
                        await step(i)
                        await asyncio.sleep(0.067)

                app.query_one("#input", TextArea).focus()
                await pilot.pause()
                growing = asyncio.create_task(grow())
                await keys.type(presses)
                await asyncio.sleep(0.2)
                growing.cancel()
    finally:
        gc.unfreeze()
    return {"gap_ms": watcher.worst * 1000, "keypress_ms": keys.figures()["worst_ms"]}


async def markdown_slices(slices: list[str]) -> dict[str, float]:
    """The least a Markdown chat does with the burst's ``slices`` (see the module doc): each
    rendered once as Rich Markdown in a worker thread, its lines mounted once at the end of a
    scrolling column (a widget that makes strips only for the lines painted), the column
    scrolled to its end, one a frame; its worst event-loop gap."""
    from rich.markdown import Markdown
    from rich.segment import Segment
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual.strip import Strip
    from textual.widget import Widget
    from textual.widgets import Footer, TextArea

    from bench_tui import GapWatcher

    class Lines(Widget):
        """Lines already rendered by Rich: Textual's line API, a strip made per line painted."""

        DEFAULT_CSS = "Lines { height: auto; }"

        def __init__(self, lines: list[list[Segment]], width: int) -> None:
            super().__init__()
            self.lines = lines
            self.line_width = width

        def get_content_height(self, container, viewport, width: int) -> int:
            return len(self.lines)

        def render_line(self, y: int) -> Strip:
            if y < len(self.lines):
                return Strip(self.lines[y], self.line_width)
            return Strip.blank(self.line_width)

    class Column(App):
        def compose(self) -> ComposeResult:
            yield VerticalScroll(id="column")
            yield TextArea(id="input")
            yield Footer()

    app = Column()
    thresholds = gc.get_threshold()
    try:
        async with app.run_test(size=(COLS, ROWS)) as pilot:
            column = app.query_one("#column", VerticalScroll)
            await pilot.pause()
            gc.collect()
            gc.freeze()
            # While it grows, as the chat's full collections wait while a reply streams.
            gc.set_threshold(thresholds[0], thresholds[1], 1 << 30)
            watcher = GapWatcher()
            watcher.start()
            for text in slices:
                # The column's width less its vertical scrollbar, which the chat's text leaves too.
                width = column.size.width - column.styles.scrollbar_size_vertical
                options = app.console.options.update_width(width)
                lines = await asyncio.to_thread(
                    app.console.render_lines, Markdown(text), options, pad=False
                )
                await column.mount(Lines(lines, width))
                column.scroll_end(animate=False)
                await app.screen.wait_for_refresh()
            await asyncio.sleep(0.1)
            await watcher.stop()
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    return {"gap_ms": watcher.worst * 1000, "slices": len(slices)}


def chat_burst(pieces: list[str]) -> tuple[dict[str, float], list[str]]:
    """``bench_tui.ui_run``'s burst, and the slices the chat appended to its reply in it (one
    per call of ``AssistantMessage.append``, in order)."""
    import bench_tui
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage

    slices: list[str] = []
    original = AssistantMessage.append

    async def noted(self, text: str) -> None:
        slices.append(text)
        await original(self, text)

    AssistantMessage.append = noted  # type: ignore[method-assign]
    try:
        burst = asyncio.run(bench_tui.ui_run(pieces))
    finally:
        AssistantMessage.append = original  # type: ignore[method-assign]
    return burst, slices


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-frames", action="store_true", help="no first-frame rounds")
    parser.add_argument("--skip-load", action="store_true", help="no model-ready rounds")
    parser.add_argument("--skip-stream", action="store_true", help="no rounds of a growing reply")
    args = parser.parse_args()
    use_frame_rate()  # the chat's, and so the bare apps' too: before anything imports Textual
    targets = print_calibration(calibration(), ["first_frame", "model_ready", "gap", "keypress"])

    import bench_tui
    from vibechat.app.tui import freeze_startup_objects
    from vibechat.engine.llama.loading import DEFAULT_MAX_CONTEXT
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.system import default_threads

    exe = Path(sys.executable).with_name("vibechat")
    starter = starter_model_path()
    defaults = LlamaCppOptions(model_path=str(starter))
    load_args = (
        starter,
        DEFAULT_MAX_CONTEXT,
        defaults.threads or default_threads(),
        defaults.n_batch,
        defaults.n_ubatch,
    )
    fig: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        fig.setdefault(key, []).append(value)

    if not (args.skip_frames and args.skip_load):
        one_round(exe)  # page cache and bytecode warm, as bench_chat's own warm-up round
        pty_until([sys.executable, "-c", BARE_APP], FIRST_FRAME)
        pty_until([sys.executable, "-c", BARE_CLI_APP], FIRST_FRAME)
        load_only(*load_args)
        for r in range(args.rounds):
            line = f"  round {r + 1}:"
            if not args.skip_frames:
                note("python", pty_until([sys.executable, "-c", "print('up')"], re.compile(rb"up")))
                note("bare_frame", pty_until([sys.executable, "-c", BARE_APP], FIRST_FRAME))
                note("cli_frame", pty_until([sys.executable, "-c", BARE_CLI_APP], FIRST_FRAME))
                line += (
                    f" python -c {fig['python'][-1]:.3f} s | bare Textual first frame "
                    f"{fig['bare_frame'][-1]:.3f} s, behind Typer {fig['cli_frame'][-1]:.3f} s |"
                )
            if not args.skip_load:
                note("load_only", load_only(*load_args))
                line += f" llama.cpp alone, start to context {fig['load_only'][-1]:.3f} s |"
            chat = one_round(exe)
            note("chat_frame", chat["first_frame_s"])
            note("chat_ready", chat["model_ready_s"])
            line += (
                f" the chat: first frame {chat['first_frame_s']:.3f} s, model ready "
                f"{chat['model_ready_s']:.3f} s"
            )
            print(line + f" | load {os.getloadavg()[0]:.1f}", flush=True)

    if not args.skip_stream:
        bench_tui.logging.getLogger("vibechat").propagate = False
        freeze_startup_objects()  # as `vibechat` does, and bench_tui
        pieces = bench_tui.markdown_tokens(16000)
        keys = bench_tui.markdown_tokens(int(500 * (30 * 0.25 + 2)))
        for r in range(args.rounds):
            static = asyncio.run(textual_growing("static"))
            log = asyncio.run(textual_growing("log"))
            burst, slices = chat_burst(pieces)
            floor = asyncio.run(markdown_slices(slices))
            presses = asyncio.run(bench_tui.keypress_run(keys, 500, 30))
            note("static_gap", static["gap_ms"])
            note("static_key", static["keypress_ms"])
            note("log_gap", log["gap_ms"])
            note("log_key", log["keypress_ms"])
            note("chat_gap", burst["worst_gap_ms"])
            note("slices_gap", floor["gap_ms"])
            note("chat_key", presses["worst_ms"])
            print(
                f"  round {r + 1}: Textual, a paragraph mounted and scrolled every 67 ms: "
                "worst gap "
                f"{static['gap_ms']:.1f} ms, worst keypress {static['keypress_ms']:.1f} ms "
                "| Textual's Log: "
                f"{log['gap_ms']:.1f} ms, {log['keypress_ms']:.1f} ms | the burst's "
                f"{floor['slices']:.0f} slices as Markdown, one a frame: "
                f"{floor['gap_ms']:.1f} ms | the chat: burst's "
                "worst gap "
                f"{burst['worst_gap_ms']:.1f} ms, worst keypress at 500 tok/s "
                f"{presses['worst_ms']:.1f} ms "
                f"| load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

    print("\nMedians of the rounds (×: a multiple of the floor)")
    print(
        "| figure | target here | floor: the dependency alone | the chat | chat × floor | "
        "target × floor |"
    )
    print("|---|---|---|---|---|---|")
    rows = [
        ("first frame, s", "first_frame", "bare_frame", "a bare Textual app", "chat_frame", 3),
        (
            "first frame, s",
            "first_frame",
            "cli_frame",
            "the bare app behind a Typer command line",
            "chat_frame",
            3,
        ),
        ("model ready, s", "model_ready", "load_only", "llama.cpp alone", "chat_ready", 3),
        (
            "worst event-loop gap, ms",
            "gap",
            "static_gap",
            "Textual, a paragraph a frame",
            "chat_gap",
            1,
        ),
        ("worst event-loop gap, ms", "gap", "log_gap", "Textual's Log", "chat_gap", 1),
        (
            "worst event-loop gap, ms",
            "gap",
            "slices_gap",
            "the burst's slices as Markdown, a slice a frame",
            "chat_gap",
            1,
        ),
        (
            "worst keypress to screen, ms",
            "keypress",
            "static_key",
            "Textual, a paragraph a frame",
            "chat_key",
            1,
        ),
        ("worst keypress to screen, ms", "keypress", "log_key", "Textual's Log", "chat_key", 1),
    ]
    for label, target_key, floor_key, floor_name, chat_key, digits in rows:
        if floor_key not in fig:
            continue
        target, floor, chat = (
            targets[target_key].value,
            median(fig[floor_key]),
            median(fig[chat_key]),
        )
        print(
            f"| {label} | ≤ {target:.{digits}f} | {floor_name}: {floor:.{digits}f} | "
            f"{chat:.{digits}f} | "
            f"{chat / floor:.2f} | "
            f"{target / floor:.2f}{' (below the floor)' if target < floor else ''} |"
        )
    if "python" in fig:
        print(
            "(The interpreter alone, `python -c`, to its first output: "
            f"{median(fig['python']):.3f} s.)"
        )


if __name__ == "__main__":
    main()
