"""TUI streaming benchmark.

Part 1 (synthetic): the real app, headless, with a backend that emits a
16,000-token Markdown reply (prose, lists, code blocks) as fast as it can. Reports
the tokens/s the UI absorbed, the worst event-loop gap, and whether time per token
grows with reply length; the same stream consumed headless (no UI) is the baseline
measured in the same run.

Keypresses: while the app streams a reply at 500 tokens/s, printable keys are
posted to it as the terminal driver posts them; the latency is the time until the
app writes a frame in which the prompt input holds the character (median, worst).

Part 2 (real model): decode tokens/s of the starter model while the chat renders a
long reply, the model in its worker process as `vibechat` runs it, against
``vibechat run`` on the same prompt and settings, in alternating rounds; and the time
to first token of each.

    .venv/bin/python bench/bench_tui.py [--tokens 16000] [--rounds 3] [--skip-model]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Target, calibration, print_calibration, use_own_dirs
from vibechat.app.tui.frame_rate import use_frame_rate

use_frame_rate()  # as `vibechat` runs the chat: before Textual is imported (frame_rate.py)
use_own_dirs()  # its history and config, not the user's
from vibechat.app.tui import create_app, freeze_startup_objects  # noqa: E402
from vibechat.app.tui.conversation import pacing  # noqa: E402
from vibechat.app.tui.conversation.assistant_message import AssistantMessage  # noqa: E402
from vibechat.engine.sanitize import Sanitizer  # noqa: E402
from vibechat.engine.settings.params import SamplingParams  # noqa: E402
from vibechat.engine.turns.backend import (  # noqa: E402
    GenerationDone,
    GenerationStats,
    ModelInfo,
    TextDelta,
)

SIZE = (120, 40)
# As `vibechat` runs the chat (create_app(freeze_gc=True)); --no-late-freeze: off.
LATE_FREEZE = [True]
INFO = ModelInfo(
    name="synthetic",
    path="-",
    architecture="none",
    quantization="-",
    trained_context=32768,
    context_size=32768,
    n_layers=1,
    gpu_layers=0,
    gpu_offload_supported=False,
    chat_format="gguf",
    file_size=0,
)


def markdown_tokens(n: int) -> list[str]:
    """~n pieces of realistic Markdown: prose, lists, code blocks, headings."""
    blocks = [
        "## Section {i}\n\n",
        "Here is some prose about the topic, with *emphasis*, **bold** words and `inline code` "
        "that keeps going for a while so paragraphs wrap across several lines of the terminal.\n\n",
        "- first item of a list\n- second item with `code`\n- third item, a bit longer "
        "than the others\n\n",
        "```python\ndef function_{i}(x, y):\n    total = x + y\n    for k in range(10):\n"
        "        total += k * x\n    return total\n```\n\n",
        "1. numbered step one\n2. numbered step two\n3. numbered step three\n\n",
    ]
    pieces: list[str] = []
    i = 0
    while len(pieces) < n:
        text = blocks[i % len(blocks)].format(i=i)
        # Split like a tokenizer would: words with their leading space, newlines apart.
        word = ""
        for ch in text:
            if ch in " \n" and word:
                pieces.append(word)
                word = ""
            word += ch
        if word:
            pieces.append(word)
        i += 1
    return pieces[:n]


class SyntheticBackend:
    name = "synthetic"

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def load(self, on_progress=None):
        return INFO

    def describe(self):
        return INFO

    def cancel(self):
        pass

    def reset(self):
        pass

    def count_tokens(self, messages, thinking="auto"):
        return 10

    def close(self):
        pass

    def stream_chat(self, messages, params):
        for piece in self.pieces:
            yield TextDelta(piece)
        yield GenerationDone(
            "".join(self.pieces), GenerationStats(completion_tokens=len(self.pieces))
        )


class GapWatcher:
    """Measures the worst event-loop gap: a task that asks to wake every 1 ms and records
    how late it wakes. ``mark`` (a callable) is sampled when the worst gap so far happens."""

    def __init__(self, mark=lambda: 0) -> None:
        self.worst = 0.0
        self.worst_at = 0
        self._mark = mark
        self._task: asyncio.Task | None = None
        self._running = False

    async def _watch(self) -> None:
        while self._running:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            gap = time.perf_counter() - t - 0.001
            if gap > self.worst:
                self.worst, self.worst_at = gap, self._mark()

    def start(self) -> None:
        self._running = True
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        self._running = False
        if self._task is not None:
            await self._task


async def until_settled(app, limit_s: float, poll: float = 0.05) -> None:
    """Wait until the reply has settled; a bench that hangs says so instead."""
    deadline = time.perf_counter() + limit_s
    while app.generating:
        if time.perf_counter() > deadline:
            raise SystemExit(f"the reply did not settle within {limit_s:.0f} s")
        await asyncio.sleep(poll)


class PacedBackend(SyntheticBackend):
    """Emits the pieces at ``rate`` tokens/s (a fast local or remote model)."""

    def __init__(self, pieces: list[str], rate: float) -> None:
        super().__init__(pieces)
        self.rate = rate
        self.stop = False

    def cancel(self):
        self.stop = True

    def stream_chat(self, messages, params):
        start, sent = time.perf_counter(), 0
        for piece in self.pieces:
            if self.stop:
                break
            sent += 1
            delay = start + sent / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            yield TextDelta(piece)
        yield GenerationDone("".join(self.pieces[:sent]), GenerationStats(completion_tokens=sent))


class KeyTimer:
    """Keypress to screen, as the chat's rounds and bench_floors' bare apps measure it alike:
    a key event is posted to the app as the terminal driver posts it (a printable character,
    which goes to the focused input, empty at the start), and the latency is the time until the
    app hands the terminal a frame in which the input holds that character (``App._display``,
    which writes the frame, is the hook: the frame is on its way to the terminal). ``text``
    reads the input's text from the app. A context manager: the hook is in place inside it."""

    def __init__(self, app: Any, text: Callable[[Any], str]) -> None:
        self.app, self._text = app, text
        self.latencies: list[float] = []
        self._waiting: list[tuple[float, int]] = []  # (posted at, input length to reach)
        self.typed = 0
        self._original = type(app)._display

    def __enter__(self) -> KeyTimer:
        original, waiting, latencies, text = (
            self._original,
            self._waiting,
            self.latencies,
            self._text,
        )

        def display(app, screen, renderable):
            original(app, screen, renderable)
            if waiting and len(text(app)) >= waiting[0][1]:
                latencies.append(time.perf_counter() - waiting.pop(0)[0])

        type(self.app)._display = display
        return self

    def __exit__(self, *exc: object) -> None:
        type(self.app)._display = self._original

    async def type(self, presses: int, going: Callable[[], bool] = lambda: True) -> None:
        """Press ``presses`` keys at a typist's pace, while ``going()``."""
        from textual import events

        for i in range(presses):
            if not going():
                break
            self.typed += 1
            self._waiting.append((time.perf_counter(), self.typed))
            self.app.post_message(events.Key("x", "x"))
            await asyncio.sleep(0.15 + 0.05 * (i % 3))  # typing speed, off the render rhythm

    def figures(self) -> dict[str, float]:
        lat = sorted(self.latencies)
        return {
            "presses": len(lat),
            "median_ms": statistics.median(lat) * 1000 if lat else float("nan"),
            "worst_ms": lat[-1] * 1000 if lat else float("nan"),
            "lost": self.typed - len(lat),
        }


async def keypress_run(pieces: list[str], rate: float, presses: int) -> dict[str, float]:
    """Keypress-to-screen latency (``KeyTimer``) while a reply streams at ``rate`` tokens/s."""
    app = create_app(PacedBackend(pieces, rate), blink=False, freeze_gc=LATE_FREEZE[0])
    with KeyTimer(app, lambda app: app.prompt_input.text) as keys:
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.prompt_input.load_text("go")
            await pilot.press("enter")
            await asyncio.sleep(0.5)  # the reply is streaming
            await keys.type(presses, going=lambda: app.generating)
            await asyncio.sleep(0.2)
            await until_settled(app, 120)
    return keys.figures()


def headless_baseline(pieces: list[str]) -> float:
    backend = SyntheticBackend(pieces)
    start = time.perf_counter()
    parts = []
    sanitizer = Sanitizer()
    for event in backend.stream_chat([], SamplingParams()):
        if isinstance(event, TextDelta):
            parts.append(sanitizer.feed(event.text))
    elapsed = time.perf_counter() - start
    return len(pieces) / elapsed


async def ui_run(pieces: list[str]) -> dict[str, float]:
    stamps: list[tuple[float, int]] = []
    original = AssistantMessage.append

    async def timed(self, text):
        await original(self, text)
        stamps.append((time.perf_counter(), len(self.text)))

    AssistantMessage.append = timed  # type: ignore[method-assign]
    watcher = GapWatcher(mark=lambda: len(stamps))
    app = create_app(SyntheticBackend(pieces), blink=False, freeze_gc=LATE_FREEZE[0])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            watcher.start()
            app.prompt_input.load_text("go")
            start, cpu_start = time.perf_counter(), time.process_time()
            await pilot.press("enter")
            await until_settled(app, 300, poll=0.01)
            end, cpu = time.perf_counter(), time.process_time() - cpu_start
            await watcher.stop()
    finally:
        AssistantMessage.append = original  # type: ignore[method-assign]
    # stamps: (time, characters rendered so far); convert characters to tokens.
    total_chars = sum(len(p) for p in pieces)
    n = len(pieces)
    half = total_chars / 2
    t0 = start
    t_half = next((t for t, c in stamps if c >= half), stamps[-1][0] if stamps else start)
    t_end = stamps[-1][0] if stamps else end
    first_q = (t_half - t0) / (n / 2)
    last_q = (t_end - t_half) / (n / 2)
    return {
        "tokens": n,
        "tokens_per_s": n / (t_end - t0),
        "wall_s": end - start,
        # CPU time, not wall time: the figure to compare where other processes share the cores
        "cpu_us_per_token": cpu / n * 1e6,
        "worst_gap_ms": watcher.worst * 1000,
        "worst_gap_after_appends": watcher.worst_at,
        "first_half_us_per_token": first_q * 1e6,
        "second_half_us_per_token": last_q * 1e6,
    }


async def get_stream_run(pieces: list[str]) -> dict[str, float]:
    """Reference: the same stream through Textual's ``Markdown.get_stream()`` into one
    ``Markdown`` widget, alone in an app (no chat around it), then one full render."""
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual.widgets import Markdown

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            with VerticalScroll():
                yield Markdown()

    watcher = GapWatcher()
    app = Bare()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        view, markdown = app.query_one(VerticalScroll), app.query_one(Markdown)
        view.anchor()
        watcher.start()
        start = time.perf_counter()
        stream = Markdown.get_stream(markdown)
        for piece in pieces:
            await stream.write(piece)
        await stream.stop()
        streamed = time.perf_counter()
        await markdown.update("".join(pieces))
        end = time.perf_counter()
        await watcher.stop()
    return {
        "tokens_per_s": len(pieces) / (streamed - start),
        "worst_gap_ms": watcher.worst * 1000,
        "final_render_ms": (end - streamed) * 1000,
    }


# ------------------------------------------------------------------ real model
PROMPT = "Write a long story about a lighthouse keeper and the sea, in many chapters."
# The starter prompted in Gemma's turn format, where it writes on to the token limit: in the
# completion frame (its default, "auto") it answers this prompt in ~20 tokens, which measures the
# reply's start, not its decode speed. Both sides use the same format.
FORMAT = "gemma"


def cli_run(tokens: int) -> tuple[float, float]:
    """``vibechat run``: (decode tokens/s, time to first token in ms), as it reports them."""
    exe = Path(sys.executable).with_name("vibechat")
    out = subprocess.run(
        [
            str(exe),
            "run",
            "-p",
            PROMPT,
            "-t",
            "0",
            "-n",
            str(tokens),
            "--prompt-format",
            FORMAT,
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    stats = json.loads(out.stdout)["stats"]
    return stats["decode_tokens_per_s"], stats["ttft_ms"]


async def tui_decode(tokens: int) -> dict[str, float]:
    """The chat as `vibechat` runs it (the model in its worker process): decode tokens/s
    while the reply renders, the engine's time to first token, and the time from Enter
    to the first text handed to the reply widget."""
    from vibechat.app.backends import make_backend
    from vibechat.engine.settings.knobs import EngineSettings

    backend = make_backend(EngineSettings(prompt_format=FORMAT), worker=True)
    app = create_app(
        backend,
        params=SamplingParams(temperature=0, max_tokens=tokens),
        blink=False,
        freeze_gc=LATE_FREEZE[0],
    )
    first: list[float] = []
    original = AssistantMessage.append

    async def timed(self, text):
        if not first:
            first.append(time.perf_counter())
        await original(self, text)

    AssistantMessage.append = timed  # type: ignore[method-assign]
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            while not app.model_ready:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # the Markdown warm-up after the load
            app.prompt_input.load_text(PROMPT)
            start, cpu_start = time.perf_counter(), time.process_time()
            await pilot.press("enter")
            await until_settled(app, 600)
            cpu_share = (time.process_time() - cpu_start) / (time.perf_counter() - start)
            stats = app.status.stats
            stream = app.replies.last_stream
            renders = stream.renders if stream is not None else 0
    finally:
        AssistantMessage.append = original  # type: ignore[method-assign]
        backend.close()
    decode_s = (
        stats.completion_tokens / stats.decode_tokens_per_s
        if stats.decode_tokens_per_s
        else float("nan")
    )
    return {
        "tok_s": stats.decode_tokens_per_s,
        "tokens": stats.completion_tokens,
        "ttft_ms": stats.ttft_ms,
        "enter_to_text_ms": (first[0] - start) * 1000 if first else float("nan"),
        "renders_per_s": renders / decode_s,
        "cpu_pct": cpu_share * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=16000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model-tokens", type=int, default=1000)
    parser.add_argument(
        "--rate", type=float, default=500, help="tokens/s of the stream while keys are pressed"
    )
    parser.add_argument("--presses", type=int, default=30, help="key presses per keypress round")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--skip-keys", action="store_true")
    parser.add_argument(
        "--no-reference", action="store_true", help="skip Textual's Markdown.get_stream() reference"
    )
    parser.add_argument(
        "--budgets",
        default="",
        help="comma-separated UI budgets to compare in the model rounds, e.g. 0.02,0.03 "
        "(default: the chat's, pacing.BUSY_BUDGET)",
    )
    parser.add_argument(
        "--rooms",
        default="",
        help="comma-separated blank lines kept below a streaming reply to compare in the model "
        "rounds, e.g. 3,5 (default: the chat's, AssistantMessage.ROOM)",
    )
    parser.add_argument(
        "--no-late-freeze",
        action="store_true",
        help="no second gc.freeze() once the model is ready (the chat does one: "
        "app/tui/gc_policy.py)",
    )
    args = parser.parse_args()
    LATE_FREEZE[0] = not args.no_late_freeze
    logging.getLogger("vibechat").addHandler(logging.NullHandler())
    logging.getLogger("vibechat").propagate = False

    targets = print_calibration(calibration(), ["absorb", "gap", "keypress", "ttft_over_run"])
    freeze_startup_objects()  # as `vibechat` does before it opens the chat
    pieces = markdown_tokens(args.tokens)
    print(f"Synthetic stream: {len(pieces)} Markdown tokens ({sum(map(len, pieces)):,} characters)")
    absorbed, gaps = [], []
    for r in range(0 if args.skip_synthetic else args.rounds):
        base = headless_baseline(pieces)
        ui = asyncio.run(ui_run(pieces))
        absorbed.append(ui["tokens_per_s"])
        gaps.append(ui["worst_gap_ms"])
        growth = ui["second_half_us_per_token"] / max(ui["first_half_us_per_token"], 1e-9)
        print(
            f"  round {r + 1}: headless {base:,.0f} tok/s | UI absorbed "
            f"{ui['tokens_per_s']:,.0f} tok/s "
            f"| worst loop gap {ui['worst_gap_ms']:.1f} ms after {ui['worst_gap_after_appends']} "
            f"renders | per token first/second half {ui['first_half_us_per_token']:.0f}/"
            f"{ui['second_half_us_per_token']:.0f} µs (×{growth:.2f}) | CPU "
            f"{ui['cpu_us_per_token']:.0f} µs/token | "
            f"UI/headless {ui['tokens_per_s'] / base:.4f}",
            flush=True,
        )
    if absorbed:
        print(verdict_line("UI absorbed", absorbed, targets["absorb"]))
        print(verdict_line("worst loop gap", gaps, targets["gap"]))

    if not args.skip_synthetic and not args.no_reference:
        ref = asyncio.run(get_stream_run(pieces))
        print(
            "  reference, Textual Markdown.get_stream() alone in an app: "
            f"{ref['tokens_per_s']:,.0f} tok/s | "
            f"worst loop gap {ref['worst_gap_ms']:.0f} ms | final full render "
            f"{ref['final_render_ms']:.0f} ms"
        )

    if not args.skip_keys:
        print(f"\nKeypress to screen while a reply streams at {args.rate:.0f} tokens/s")
        long_reply = markdown_tokens(int(args.rate * (args.presses * 0.25 + 2)))
        worst = []
        for r in range(args.rounds):
            k = asyncio.run(keypress_run(long_reply, args.rate, args.presses))
            worst.append(k["worst_ms"])
            print(
                f"  round {r + 1}: {k['presses']} presses | median {k['median_ms']:.1f} ms | worst "
                f"{k['worst_ms']:.1f} ms | not shown {k['lost']}",
                flush=True,
            )
        print(verdict_line("worst keypress to screen", worst, targets["keypress"]))

    if args.skip_model:
        return
    budgets = [float(b) for b in args.budgets.split(",")] if args.budgets else [pacing.BUSY_BUDGET]
    rooms = [int(n) for n in args.rooms.split(",")] if args.rooms else [AssistantMessage.ROOM]
    variants = [(b, n) for b in budgets for n in rooms]
    print(
        f"\nStarter model, {args.model_tokens}-token reply, greedy: the chat (model in its "
        "worker process, "
        "as `vibechat` runs it) vs `vibechat run`, alternating; UI budget(s) while the "
        "model has every core, "
        "blank lines below a streaming reply: " + ", ".join(label(v) for v in variants)
    )
    cli_rates, cli_ttft = [], []
    chat: dict[tuple[float, int], dict[str, list[float]]] = {
        v: {
            "tok_s": [],
            "ttft_ms": [],
            "enter_to_text_ms": [],
            "ratio": [],
            "renders_per_s": [],
            "cpu_pct": [],
        }
        for v in variants
    }
    default_budget, default_room = pacing.BUSY_BUDGET, AssistantMessage.ROOM
    for r in range(args.rounds):
        rate, ttft = cli_run(args.model_tokens)
        cli_rates.append(rate)
        cli_ttft.append(ttft)
        line = f"  round {r + 1}: vibechat run {rate:.1f} tok/s, TTFT {ttft:.0f} ms"
        for variant in variants:
            pacing.BUSY_BUDGET, AssistantMessage.ROOM = variant  # read when a reply starts
            try:
                t = asyncio.run(tui_decode(args.model_tokens))
            finally:
                pacing.BUSY_BUDGET, AssistantMessage.ROOM = default_budget, default_room
            t["ratio"] = t["tok_s"] / rate
            for key, values in chat[variant].items():
                values.append(t[key])
            line += (
                f" | chat at {label(variant)}: {t['tok_s']:.1f} tok/s ({t['tokens']} tokens, "
                f"{t['renders_per_s']:.1f} renders/s, chat process {t['cpu_pct']:.2f} % of "
                "a core), "
                f"ratio {t['ratio']:.3f}, TTFT {t['ttft_ms']:.0f} ms (engine), Enter to first text "
                f"{t['enter_to_text_ms']:.0f} ms"
            )
        print(line, flush=True)
    cli_m = statistics.median(cli_rates)
    print(f"  median: vibechat run {cli_m:.1f} tok/s, TTFT {statistics.median(cli_ttft):.0f} ms")
    for variant, got in chat.items():
        m = {key: statistics.median(values) for key, values in got.items()}
        print(
            f"  chat at {label(variant)}: {m['tok_s']:.1f} tok/s, {m['renders_per_s']:.1f} "
            "renders/s, chat process "
            f"{m['cpu_pct']:.2f} % of a core | decode ratio: median of the rounds "
            f"{m['ratio']:.3f} (range "
            f"{min(got['ratio']):.3f}–{max(got['ratio']):.3f}), of the medians "
            f"{m['tok_s'] / cli_m:.3f} (target ≥ "
            f"0.97) | TTFT {m['ttft_ms']:.0f} ms (engine), Enter to first text "
            f"{m['enter_to_text_ms']:.0f} ms"
        )
        over = [
            chat_ttft - run_ttft
            for chat_ttft, run_ttft in zip(got["ttft_ms"], cli_ttft, strict=False)
        ]
        print(
            verdict_line(
                f"TTFT of the chat at {label(variant)} minus run's (per round)",
                over,
                targets["ttft_over_run"],
            )
        )


def verdict_line(what: str, figures: list[float], target: Target) -> str:
    """The median of the rounds against its target as it applies on this host."""
    median = statistics.median(figures)
    return (
        f"  median {what}: {median:,.1f} {target.unit} (range "
        f"{min(figures):,.1f}–{max(figures):,.1f}) | "
        f"{target.verdict(median)}"
    )


def label(variant: tuple[float, int]) -> str:
    budget, room = variant
    return f"{budget:.0%} room {room}"


if __name__ == "__main__":
    main()
