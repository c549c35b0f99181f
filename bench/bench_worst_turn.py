"""Which turn of the event loop is the worst one while a reply grows (issue 42, round four).

The burst ``bench_floors.py`` and ``bench_tui.py`` measure for the chat (``bench_tui.ui_run``:
the real app, headless, in this process, 120x40, a 16,000-token Markdown reply emitted as fast
as it comes, ``GapWatcher``'s worst gap) is run again with hooks in this process only:

- every turn of the event loop (an iteration of asyncio's ``_run_once``: the ready callbacks it
  runs one after the other) is timed, wall and the main thread's CPU, and the turns longer
  than ``--slow`` ms are kept with what ran in them: the callbacks (a task's coroutine, a
  timer's function), the Textual messages dispatched, the time in the named sections below,
  the garbage collections, how long a worker thread rendered Markdown meanwhile, and the CPU
  time the reply's generating thread (``Replies._generate``: the burst's 16,000 pieces, handed
  over as fast as they come) took meanwhile (the interpreter's lock is then shared: a turn's wall
  time above its CPU time);
- the sections: the screen's update (``Screen._on_timer_update``: layout, compositor, the
  frame written), its layout (``Screen._refresh_layout``, the compositor's ``reflow``), the
  compositor's paint (``Compositor.render_update``), the reply's ``append`` and the Markdown
  rendered on the loop (``CachedMarkdown.rendered``);
- counts that do not depend on the host's load: widgets asked their height, arranged,
  resized, lines painted (per widget class), layouts, frames written.

Whatever their length, two frames are also reported by name, with the same counts: the send
frame (the first that paints the reply) and the turns of the footer's keys (Stop appearing 0.25 s
into the reply and going at its end: the keys mounted and removed, then laid out and painted).

With ``--profile`` every turn also runs under cProfile, and the slowest turns' profiles are
printed (the top functions by their own and cumulative time): slower, but it names the code.

A diagnosis, not a benchmark: the hooks slow what they time (compare turns with each other,
not with ``bench_floors.py``'s figures).

    .venv/bin/python bench/bench_worst_turn.py [--tokens 16000] [--slow 15] [--show 6] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import selectors
import sys
import threading
import time
from collections import Counter
from typing import Any

from _common import use_own_dirs
from vibechat.app.tui.frame_rate import use_frame_rate

use_frame_rate()  # as `vibechat` runs the chat: before Textual is imported (frame_rate.py)
use_own_dirs()  # its history and config, not the user's
from textual import widget as widget_module  # noqa: E402
from textual._compositor import Compositor  # noqa: E402
from textual.app import App  # noqa: E402
from textual.message_pump import MessagePump  # noqa: E402
from textual.screen import Screen  # noqa: E402
from textual.widget import Widget  # noqa: E402

import bench_tui  # noqa: E402
from bench_tui import (  # noqa: E402
    SIZE,
    GapWatcher,
    SyntheticBackend,
    markdown_tokens,
    until_settled,
)
from vibechat.app.tui import create_app, freeze_startup_objects  # noqa: E402
from vibechat.app.tui.controllers.replies import Replies  # noqa: E402
from vibechat.app.tui.conversation import assistant_message, markdown_segment  # noqa: E402
from vibechat.app.tui.conversation.assistant_message import AssistantMessage  # noqa: E402

MAIN = threading.get_ident()


class Turn:
    """What one turn of the event loop did."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.wall = 0.0
        self.cpu = 0.0
        self.callbacks: list[str] = []
        self.messages: Counter[str] = Counter()
        self.sections: Counter[str] = Counter()
        self.counts: dict[str, Counter[str]] = {
            key: Counter() for key in ("height", "arrange", "resized", "repaint all", "painted")
        }
        self.tally: Counter[str] = Counter()
        self.worker_ms = 0.0
        # CPU the reply's generating thread took during the turn.
        self.generating_ms = 0.0
        self.reply_chars = 0
        self.profile: str = ""


class Recorder:
    """Times each turn and keeps the slow ones (``slow`` seconds or more)."""

    def __init__(self, slow: float, profile: bool) -> None:
        self.slow = slow
        self.profile = profile
        self.turn = Turn(0)
        self.kept: list[Turn] = []
        self.turns = 0
        self.active = False
        # Worker threads' Markdown renders: (start, end) wall times.
        self.worker_spans: list[tuple[float, float]] = []
        self.open_sections: set[str] = set()
        # A worker thread's render under way since (None: none).
        self.worker_since: float | None = None
        # The CPU clock of the reply's generating thread (None: not started yet).
        self.generating_clock: int | None = None
        self.app: Any = None
        # The screen's updates of 1 ms or more: how many, how many of them while a worker
        # thread rendered Markdown, and their CPU (ms) then.
        self.frames = 0
        self.shared_frames = 0
        self.shared_cpu_ms = 0.0
        # Named turns, whatever their length: the send frame (the first that paints the
        # reply) and the turns that mount, remove or paint the footer's keys (Stop appearing).
        self.named: list[tuple[str, Turn]] = []

    def note_frame(self, turn: Turn, shared: float) -> None:
        """A turn that updated the screen (``shared``: seconds a worker rendered meanwhile)."""
        self.frames += 1
        if shared > 0:
            self.shared_frames += 1
            self.shared_cpu_ms += turn.cpu * 1000

    def reply_chars(self) -> int:
        """The characters of the reply shown so far."""
        if self.app is None:
            return 0
        return sum(len(reply.text) for reply in self.app.query(AssistantMessage))

    def section(self, name: str):
        """A decorator factory: time ``function`` under ``name`` (outermost call only, on the
        event loop's thread)."""

        def wrap(function):
            def timed(*args, **kwargs):
                if threading.get_ident() != MAIN or name in self.open_sections:
                    return function(*args, **kwargs)
                self.open_sections.add(name)
                start = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    self.turn.sections[name] += time.perf_counter() - start
                    self.open_sections.discard(name)

            return timed

        return wrap

    def run_once(self, original):
        """asyncio's loop iteration, timed: the ready callbacks run after the selector."""
        recorder = self

        def _run_once(loop):
            if not recorder.active:
                return original(loop)
            recorder.turns += 1
            turn = recorder.turn = Turn(recorder.turns)
            profiler = cProfile.Profile() if recorder.profile else None
            generating = recorder.generating_cpu()
            start, cpu = time.perf_counter(), time.thread_time()
            if profiler is not None:
                profiler.enable()
            try:
                return original(loop)
            finally:
                if profiler is not None:
                    profiler.disable()
                turn.wall = time.perf_counter() - start - turn.sections.pop("select", 0.0)
                turn.cpu = time.thread_time() - cpu
                if generating is not None:
                    turn.generating_ms = (recorder.generating_cpu() or generating) - generating
                    turn.generating_ms *= 1000
                if turn.sections.get("screen update", 0.0) >= 0.001:
                    recorder.note_frame(turn, recorder.overlap(start, start + turn.wall))
                recorder.name(turn)
                if turn.wall >= recorder.slow:
                    turn.worker_ms = recorder.overlap(start, start + turn.wall) * 1000
                    turn.reply_chars = recorder.reply_chars()
                    if profiler is not None:
                        turn.profile = profile_text(profiler)
                    recorder.kept.append(turn)

        return _run_once

    def name(self, turn: Turn) -> None:
        """Keep ``turn`` if it is the send frame (the first frame that paints the reply), or
        one that mounts or removes the footer's keys or lays them out (counts on only)."""
        painted, messages = turn.counts["painted"], turn.messages
        named = None
        if not any(name == "send frame" for name, _turn in self.named):
            if turn.tally["frames"] and painted["AssistantMessage"]:
                named = "send frame"
        if named is None and (
            messages["FooterKey<-Mount"]
            or messages["FooterKey<-Unmount"]
            or (turn.tally["frames"] and painted["FooterKey"])
        ):
            named = "footer's keys"
        if named is not None:
            turn.reply_chars = self.reply_chars()
            self.named.append((named, turn))

    def generating_cpu(self) -> float | None:
        """CPU seconds the reply's generating thread has used (None: none runs)."""
        if self.generating_clock is None:
            return None
        try:
            return time.clock_gettime(self.generating_clock)
        except OSError:  # the thread ended
            self.generating_clock = None
            return None

    def overlap(self, start: float, end: float) -> float:
        """Seconds of ``start``-``end`` in which a worker thread rendered Markdown."""
        since = self.worker_since
        spans = self.worker_spans + ([(since, end)] if since is not None else [])
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans)


def profile_text(profiler: cProfile.Profile, top: int = 30) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    lines = [
        line
        for line in out.getvalue().splitlines()
        if line.strip() and not line.lstrip().startswith(("Ordered by", "List reduced"))
    ]
    return "\n".join("      " + line[:150] for line in lines)


def describe(handle: asyncio.Handle) -> str:
    """A ready callback, in words: a task's coroutine, or a function's name."""
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", repr(coro))
        frame = getattr(coro, "cr_frame", None)
        where = f" @{frame.f_code.co_name}" if frame is not None else ""
        return f"task {name}{where}"
    return getattr(callback, "__qualname__", repr(callback))


def install(recorder: Recorder, light: bool = False) -> None:
    """The hooks, in this process only (``light``: the turns' times, the screen's updates and
    the worker's renders only; what the counting hooks cost is left out)."""
    loop = asyncio.new_event_loop()
    loop_class = type(loop)
    loop.close()
    loop_class._run_once = recorder.run_once(loop_class._run_once)  # type: ignore[attr-defined]
    Screen._on_timer_update = recorder.section("screen update")(Screen._on_timer_update)
    install_select(recorder)
    install_worker_spans(recorder)
    install_generating(recorder)
    if not light:
        install_counts(recorder)


def install_select(recorder: Recorder) -> None:
    """The selector's wait is not the turn's work: timed apart."""
    selector_class = selectors.DefaultSelector
    selector_select = selector_class.select

    def select(self, timeout=None):
        start = time.perf_counter()
        try:
            return selector_select(self, timeout)
        finally:
            recorder.turn.sections["select"] += time.perf_counter() - start

    selector_class.select = select  # type: ignore[method-assign]


def install_worker_spans(recorder: Recorder) -> None:
    """When a worker thread renders a slice's Markdown (``prepare``)."""
    prepare = markdown_segment.prepare

    def prepared(*args, **kwargs):
        start = recorder.worker_since = time.perf_counter()
        try:
            return prepare(*args, **kwargs)
        finally:
            recorder.worker_since = None
            recorder.worker_spans.append((start, time.perf_counter()))

    markdown_segment.prepare = prepared
    assistant_message.prepare = prepared


def install_generating(recorder: Recorder) -> None:
    """The reply's generating thread, whose CPU clock each turn reads."""
    generate = Replies._generate

    def noted(self, *args, **kwargs):
        recorder.generating_clock = time.pthread_getcpuclockid(threading.get_ident())
        try:
            return generate(self, *args, **kwargs)
        finally:
            recorder.generating_clock = None

    Replies._generate = noted  # type: ignore[method-assign]


def install_counts(recorder: Recorder) -> None:
    """What each turn ran, laid out and painted."""
    handle_run = asyncio.Handle._run

    def run(handle):
        if recorder.active:
            start = time.perf_counter()
            try:
                return handle_run(handle)
            finally:
                spent = (time.perf_counter() - start) * 1000
                if spent >= 1:
                    recorder.turn.callbacks.append(f"{describe(handle)} {spent:.1f} ms")
        return handle_run(handle)

    asyncio.Handle._run = run  # type: ignore[method-assign]

    dispatch = MessagePump._dispatch_message

    async def dispatched(self, message):
        recorder.turn.messages[f"{type(self).__name__}<-{type(message).__name__}"] += 1
        return await dispatch(self, message)

    MessagePump._dispatch_message = dispatched  # type: ignore[method-assign]

    section = recorder.section
    Screen._refresh_layout = section("layout")(Screen._refresh_layout)
    Compositor.reflow = section("reflow")(Compositor.reflow)
    Compositor.reflow_visible = section("reflow")(Compositor.reflow_visible)
    Compositor.render_update = section("paint")(Compositor.render_update)
    App._display = section("frame written")(App._display)
    markdown_segment.CachedMarkdown.rendered = section("markdown on the loop")(
        markdown_segment.CachedMarkdown.rendered
    )

    original_display = App._display

    def display(self, screen, renderable):
        recorder.turn.tally["frames"] += 1
        return original_display(self, screen, renderable)

    App._display = display  # type: ignore[method-assign]

    layout = Screen._refresh_layout

    def refresh_layout(self, *args, **kwargs):
        recorder.turn.tally["layouts"] += 1
        return layout(self, *args, **kwargs)

    Screen._refresh_layout = refresh_layout  # type: ignore[method-assign]

    height, arrange, sized = Widget.get_content_height, widget_module.arrange, Widget._size_updated
    line = Widget.render_line

    def get_content_height(self, *args):
        recorder.turn.counts["height"][type(self).__name__] += 1
        return height(self, *args)

    def arrange_counted(widget, *args, **kwargs):
        recorder.turn.counts["arrange"][type(widget).__name__] += 1
        return arrange(widget, *args, **kwargs)

    def size_updated(self, size, virtual_size, container_size, layout=True):
        if (self._size, self.virtual_size, self._container_size) != (
            size,
            virtual_size,
            container_size,
        ):
            recorder.turn.counts["resized"][type(self).__name__] += 1
        return sized(self, size, virtual_size, container_size, layout)

    def render_line(self, y):
        recorder.turn.counts["painted"][type(self).__name__] += 1
        return line(self, y)

    set_dirty = Widget._set_dirty

    def set_dirty_counted(self, *regions):
        if not regions:
            recorder.turn.counts["repaint all"][type(self).__name__] += 1
        return set_dirty(self, *regions)

    Widget._set_dirty = set_dirty_counted  # type: ignore[method-assign]
    Widget.get_content_height = get_content_height  # type: ignore[method-assign]
    widget_module.arrange = arrange_counted
    Widget._size_updated = size_updated  # type: ignore[method-assign]
    Widget.render_line = render_line  # type: ignore[method-assign]
    subclass_hooks(recorder)

    def collected(phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != MAIN:
            return
        if phase == "start":
            recorder.gc_started = time.perf_counter()  # type: ignore[attr-defined]
        else:
            spent = time.perf_counter() - recorder.gc_started  # type: ignore[attr-defined]
            recorder.turn.sections[f"gc gen {info['generation']}"] += spent

    gc.callbacks.append(collected)


def subclass_hooks(recorder: Recorder) -> None:
    """Widgets that override ``get_content_height`` / ``render_line`` are counted too."""
    seen: set[type] = set()

    def counted(function, key: str):
        def wrapper(self, *args):
            recorder.turn.counts[key][type(self).__name__] += 1
            return function(self, *args)

        return wrapper

    def timed(function):
        def wrapper(self, crop):
            name = f"lines of {type(self).__name__}"
            if name in recorder.open_sections:
                return function(self, crop)
            recorder.open_sections.add(name)
            start = time.perf_counter()
            try:
                return function(self, crop)
            finally:
                recorder.turn.sections[name] += time.perf_counter() - start
                recorder.open_sections.discard(name)

        return wrapper

    def walk(cls: type) -> None:
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            for name, key in (("get_content_height", "height"), ("render_line", "painted")):
                own = sub.__dict__.get(name)
                if own is not None:
                    setattr(sub, name, counted(own, key))
            own = sub.__dict__.get("render_lines")
            if own is not None:
                sub.render_lines = timed(own)
            walk(sub)

    Widget.render_lines = timed(Widget.render_lines)  # type: ignore[method-assign]
    walk(Widget)


async def burst(pieces: list[str], recorder: Recorder) -> dict[str, float]:
    """``bench_tui.ui_run``'s burst, recorded."""
    watcher = GapWatcher()
    app = create_app(SyntheticBackend(pieces), blink=False, freeze_gc=True)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        watcher.start()
        recorder.active = True
        app.prompt_input.load_text("go")
        recorder.app = app
        await pilot.press("enter")
        await until_settled(app, 300, poll=0.01)
        await pilot.pause(0.3)
        recorder.active = False
        await watcher.stop()
    return {"worst_gap_ms": watcher.worst * 1000}


def summary(turn: Turn) -> str:
    """One line: a slow turn's times, what took them, what it painted."""
    sections = ", ".join(
        f"{name} {t * 1000:.1f}" for name, t in turn.sections.most_common(6) if t >= 0.001
    )
    painted = turn.counts["painted"]
    top = ", ".join(f"{name} {n}" for name, n in painted.most_common(4))
    return (
        f"  turn {turn.index:5}: {turn.wall * 1000:5.1f} ms wall, {turn.cpu * 1000:5.1f} ms CPU "
        f"(a worker rendering {turn.worker_ms:4.1f} ms of it; the generating thread's CPU "
        f"{turn.generating_ms:4.1f} ms) | {sections} "
        f"| lines painted {sum(painted.values())} ({top}) "
        f"| reply {turn.reply_chars} chars"
    )


def report(turn: Turn) -> list[str]:
    ms = 1000
    lines = [
        f"turn {turn.index}: {turn.wall * ms:.1f} ms wall, {turn.cpu * ms:.1f} ms CPU of the "
        f"loop's thread; a worker thread rendered Markdown {turn.worker_ms:.1f} ms of it; "
        f"the reply's generating thread used {turn.generating_ms:.1f} ms of CPU meanwhile; "
        f"reply at {turn.reply_chars} characters"
    ]
    if turn.sections:
        parts = ", ".join(f"{name} {t * ms:.1f}" for name, t in turn.sections.most_common())
        lines.append(f"  sections (ms, nested): {parts}")
    if turn.tally:
        lines.append("  " + ", ".join(f"{name} {n}" for name, n in sorted(turn.tally.items())))
    for key, counter in turn.counts.items():
        total = sum(counter.values())
        if total:
            parts = ", ".join(f"{name} {n}" for name, n in counter.most_common(6))
            lines.append(f"  {key:8} {total:4}: {parts}")
    if turn.callbacks:
        lines.append("  callbacks of 1 ms or more: " + "; ".join(turn.callbacks[:8]))
    if turn.messages:
        parts = ", ".join(f"{name} {n}" for name, n in turn.messages.most_common(8))
        lines.append(f"  messages: {parts}")
    if turn.profile:
        lines.append("  profile:\n" + turn.profile)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16000)
    parser.add_argument("--slow", type=float, default=15.0, help="ms: a turn this long is kept")
    parser.add_argument("--show", type=int, default=6, help="the slowest turns printed")
    parser.add_argument("--profile", action="store_true", help="cProfile each turn (slower)")
    parser.add_argument("--light", action="store_true", help="time the turns only: no counts")
    args = parser.parse_args()
    bench_tui.logging.getLogger("vibechat").propagate = False
    freeze_startup_objects()
    recorder = Recorder(args.slow / 1000, args.profile)
    install(recorder, light=args.light)
    figures = asyncio.run(burst(markdown_tokens(args.tokens), recorder))
    kept = sorted(recorder.kept, key=lambda turn: turn.wall, reverse=True)
    print(
        f"{recorder.turns} turns of the event loop in the burst; {len(kept)} of "
        f"{args.slow:.0f} ms or more; the gap watcher's worst gap {figures['worst_gap_ms']:.1f} "
        f"ms (hooks on{', light' if args.light else ''}: slower than bench_floors.py's); "
        "Markdown rendered in worker threads "
        f"{len(recorder.worker_spans)} times, "
        f"{sum(b - a for a, b in recorder.worker_spans) * 1000:.0f} ms in all"
    )
    print(
        f"{recorder.frames} screen updates of 1 ms or more; {recorder.shared_frames} of them "
        f"while a worker thread rendered Markdown ({recorder.shared_cpu_ms:.0f} ms of the loop's "
        "CPU in all)"
    )
    for turn in kept:
        print(summary(turn))
    for turn in kept[: args.show]:
        print("\n".join(report(turn)))
    if recorder.named:
        print("\nThe send frame and the footer's turns (Stop appearing 0.25 s in), whatever long:")
    for name, turn in recorder.named:
        mounted = turn.messages["FooterKey<-Mount"]
        removed = turn.messages["FooterKey<-Unmount"]
        keys = f"; footer keys mounted {mounted}, removed {removed}" if mounted or removed else ""
        print(f"{name}{keys}:")
        print("\n".join(report(turn)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
