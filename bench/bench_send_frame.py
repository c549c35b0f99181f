"""Where the frame that shows a sent prompt goes (issue 42 point 1): the real app, headless
(120x40), a conversation of a few exchanges, then one more prompt whose reply's first words
arrive at once. For each frame written from the Enter until the reply's first words are on
screen, it counts which widgets Textual lays out again (``get_content_height``, an
arrangement computed, a size changed in ``_size_updated``) and paints (``render_line``), per
widget class (and which are asked their box, ``_get_box_model``, cached or not), and times the
screen's layout (``Screen._refresh_layout``) and the compositor's
update (``Compositor.render_update``). A diagnosis, not a benchmark: the hooks are patched in
this script only, and they slow what they count.

    .venv/bin/python bench/bench_send_frame.py [--exchanges 4]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections import Counter
from typing import Any

from _common import use_own_dirs
from vibechat.app.tui.frame_rate import use_frame_rate

use_frame_rate()  # as `vibechat` runs the chat: before Textual is imported (frame_rate.py)
use_own_dirs()
from textual import widget as widget_module  # noqa: E402
from textual._compositor import Compositor  # noqa: E402
from textual.screen import Screen  # noqa: E402
from textual.widget import Widget  # noqa: E402

from bench_tui import INFO  # noqa: E402
from vibechat.app.tui import create_app  # noqa: E402
from vibechat.engine.turns.backend import (  # noqa: E402
    GenerationDone,
    GenerationStats,
    TextDelta,
)

REPLY = "Here is a **reply** with `code`, a list:\n\n- one\n- two\n\nand a closing line."


class Backend:
    """Replies ``REPLY`` at once; with ``hold`` set, the first words come, then it waits."""

    name = "synthetic"

    def __init__(self) -> None:
        self.hold: threading.Event | None = None

    def load(self, on_progress=None):
        return INFO

    def describe(self):
        return INFO

    def cancel(self):
        if self.hold is not None:
            self.hold.set()

    def reset(self):
        pass

    def count_tokens(self, messages, thinking="auto"):
        return 10

    def close(self):
        pass

    def stream_chat(self, messages, params):
        yield TextDelta("Here is")
        if self.hold is not None:
            self.hold.wait(30)
        yield TextDelta(REPLY[len("Here is") :])
        yield GenerationDone(REPLY, GenerationStats(completion_tokens=20))


class Counts:
    """Per-frame counters, by widget class."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.in_layout = False
        self.shown = False  # a frame was written inside the layout under way
        self.reset()

    def reset(self) -> None:
        self.now: dict[str, Any] = {
            "asked": Counter(),
            "height": Counter(),
            "arrange": Counter(),
            "resized": Counter(),
            "painted": Counter(),
            "layout_ms": 0.0,
            "update_ms": 0.0,
            "layouts": 0,
        }

    def cut(self) -> None:
        """A frame was written: its counts end here, or with the layout that wrote it."""
        if self.in_layout:
            self.shown = True
            return
        self.frames.append(self.now)
        self.reset()


def install(counts: Counts) -> None:
    """Patch the hooks (this process only)."""
    height, arrange, sized = Widget.get_content_height, widget_module.arrange, Widget._size_updated
    box_model = Widget._get_box_model
    line, layout, update = Widget.render_line, Screen._refresh_layout, Compositor.render_update

    def get_box_model(self, *args, **kwargs):
        counts.now["asked"][type(self).__name__] += 1
        return box_model(self, *args, **kwargs)

    def get_content_height(self, *args):
        counts.now["height"][type(self).__name__] += 1
        return height(self, *args)

    def arrange_counted(widget, *args, **kwargs):
        counts.now["arrange"][type(widget).__name__] += 1
        return arrange(widget, *args, **kwargs)

    def size_updated(self, size, virtual_size, container_size, layout=True):
        if (self._size, self.virtual_size, self._container_size) != (
            size,
            virtual_size,
            container_size,
        ):
            counts.now["resized"][type(self).__name__] += 1
        return sized(self, size, virtual_size, container_size, layout)

    def render_line(self, y):
        counts.now["painted"][type(self).__name__] += 1
        return line(self, y)

    def refresh_layout(self, *args, **kwargs):
        start = time.perf_counter()
        counts.in_layout = True
        try:
            return layout(self, *args, **kwargs)
        finally:
            counts.in_layout = False
            counts.now["layout_ms"] += (time.perf_counter() - start) * 1000
            counts.now["layouts"] += 1
            if counts.shown:
                counts.shown = False
                counts.cut()

    def render_update(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return update(self, *args, **kwargs)
        finally:
            counts.now["update_ms"] += (time.perf_counter() - start) * 1000

    Widget._get_box_model = get_box_model  # type: ignore[method-assign]
    Widget.get_content_height = get_content_height  # type: ignore[method-assign]
    widget_module.arrange = arrange_counted
    Widget._size_updated = size_updated  # type: ignore[method-assign]
    Widget.render_line = render_line  # type: ignore[method-assign]
    Screen._refresh_layout = refresh_layout  # type: ignore[method-assign]
    Compositor.render_update = render_update  # type: ignore[method-assign]


def subclass_hooks(counts: Counts) -> None:
    """Widgets that override ``get_content_height`` / ``render_line`` are counted too."""
    seen: set[type] = set()

    def walk(cls: type) -> None:
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            for name, key in (("get_content_height", "height"), ("render_line", "painted")):
                own = sub.__dict__.get(name)
                if own is not None:
                    setattr(sub, name, _counted(own, counts, key))
            walk(sub)

    walk(Widget)


def _counted(function, counts: Counts, key: str):
    def counted(self, *args):
        counts.now[key][type(self).__name__] += 1
        return function(self, *args)

    return counted


async def main(exchanges: int) -> None:
    backend = Backend()
    app = create_app(backend, blink=False, save=False)
    counts = Counts()
    display = type(app)._display

    def displayed(app, screen, renderable):
        display(app, screen, renderable)
        counts.cut()

    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        for n in range(exchanges):
            app.prompt_input.load_text(f"question {n}: tell me something")
            await pilot.press("enter")
            while app.generating:
                await asyncio.sleep(0.02)
            await pilot.pause(0.3)
        backend.hold = threading.Event()
        await pilot.pause(0.5)
        install(counts)
        subclass_hooks(counts)
        type(app)._display = displayed
        counts.reset()
        app.prompt_input.load_text("the last question")
        await pilot.press("enter")
        await asyncio.sleep(1.0)  # the prompt, the first words, Stop in the footer (0.25 s)
        type(app)._display = display
        backend.hold.set()
        while app.generating:
            await asyncio.sleep(0.02)
    for index, frame in enumerate(counts.frames):
        if not (frame["layouts"] or sum(frame["painted"].values())):
            continue
        print(
            f"frame {index}: {frame['layouts']} layout(s) {frame['layout_ms']:.1f} ms,"
            f" compositor update {frame['update_ms']:.1f} ms"
        )
        for key in ("asked", "height", "arrange", "resized", "painted"):
            total = sum(frame[key].values())
            if total:
                parts = ", ".join(f"{name} {n}" for name, n in frame[key].most_common())
                print(f"  {key:8} {total:4}: {parts}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=4)
    asyncio.run(main(parser.parse_args().exchanges))
