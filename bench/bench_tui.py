"""TUI streaming benchmark.

Part 1 (synthetic): the real app, headless, with a backend that emits a
2,000-token Markdown reply (prose, lists, code blocks) as fast as it can. Reports
the tokens/s the UI absorbed, the worst event-loop gap, and whether time per token
grows with reply length; the same stream consumed headless (no UI) is the baseline
measured in the same run.

Part 2 (real model): decode tokens/s of the starter model while the TUI renders a
long reply, against ``vibechat run`` on the same prompt and settings, in
alternating rounds.

    .venv/bin/python bench/bench_tui.py [--tokens 2000] [--rounds 2] [--skip-model]
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
from pathlib import Path

from vibechat.app.tui import create_app, freeze_startup_objects
from vibechat.app.tui.chat_view import AssistantMessage
from vibechat.engine.backend import GenerationDone, GenerationStats, ModelInfo, TextDelta
from vibechat.engine.params import SamplingParams
from vibechat.engine.sanitize import Sanitizer

SIZE = (120, 40)
INFO = ModelInfo(name="synthetic", path="-", architecture="none", quantization="-", trained_context=32768,
                 context_size=32768, n_layers=1, gpu_layers=0, gpu_offload_supported=False,
                 chat_format="gguf", file_size=0)


def markdown_tokens(n: int) -> list[str]:
    """~n pieces of realistic Markdown: prose, lists, code blocks, headings."""
    blocks = [
        "## Section {i}\n\n",
        "Here is some prose about the topic, with *emphasis*, **bold** words and `inline code` "
        "that keeps going for a while so paragraphs wrap across several lines of the terminal.\n\n",
        "- first item of a list\n- second item with `code`\n- third item, a bit longer than the others\n\n",
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

    def count_tokens(self, messages):
        return 10

    def close(self):
        pass

    def stream_chat(self, messages, params):
        for piece in self.pieces:
            yield TextDelta(piece)
        yield GenerationDone("".join(self.pieces), GenerationStats(completion_tokens=len(self.pieces)))


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
    app = create_app(SyntheticBackend(pieces), blink=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            watcher.start()
            app.prompt_input.load_text("go")
            start = time.perf_counter()
            await pilot.press("enter")
            while app.generating:
                await asyncio.sleep(0.01)
            end = time.perf_counter()
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
    return {"tokens_per_s": len(pieces) / (streamed - start), "worst_gap_ms": watcher.worst * 1000,
            "final_render_ms": (end - streamed) * 1000}


# ------------------------------------------------------------------ real model
PROMPT = "Write a long story about a lighthouse keeper and the sea, in many chapters."


def cli_decode_rate(tokens: int) -> float:
    exe = Path(sys.executable).with_name("vibechat")
    out = subprocess.run([str(exe), "run", "-p", PROMPT, "-t", "0", "-n", str(tokens), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["stats"]["decode_tokens_per_s"]


async def tui_decode_rate(tokens: int) -> tuple[float, int]:
    from vibechat.engine.llamacpp import LlamaCppBackend, LlamaCppOptions
    from vibechat.engine.starter import starter_model_path

    backend = LlamaCppBackend(LlamaCppOptions(model_path=starter_model_path()))
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=tokens), blink=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            app.prompt_input.load_text(PROMPT)
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            while app.generating:
                await asyncio.sleep(0.05)
            stats = app.last_stats
    finally:
        backend.close()
    return stats.decode_tokens_per_s, stats.completion_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model-tokens", type=int, default=1000)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--no-reference", action="store_true", help="skip Textual's Markdown.get_stream() reference")
    args = parser.parse_args()
    logging.getLogger("vibechat").addHandler(logging.NullHandler())
    logging.getLogger("vibechat").propagate = False

    freeze_startup_objects()  # as `vibechat` does before it opens the chat
    pieces = markdown_tokens(args.tokens)
    print(f"Synthetic stream: {len(pieces)} Markdown tokens")
    for r in range(0 if args.skip_synthetic else args.rounds):
        base = headless_baseline(pieces)
        ui = asyncio.run(ui_run(pieces))
        growth = ui["second_half_us_per_token"] / max(ui["first_half_us_per_token"], 1e-9)
        print(f"  round {r + 1}: headless {base:,.0f} tok/s | UI absorbed {ui['tokens_per_s']:,.0f} tok/s "
              f"(target ≥ 2,000) | worst loop gap {ui['worst_gap_ms']:.1f} ms after {ui['worst_gap_after_appends']} renders (target ≤ 100) | "
              f"per token first/second half {ui['first_half_us_per_token']:.0f}/"
              f"{ui['second_half_us_per_token']:.0f} µs (×{growth:.2f}) | UI/headless {ui['tokens_per_s'] / base:.4f}")

    if not args.skip_synthetic and not args.no_reference:
        ref = asyncio.run(get_stream_run(pieces))
        print(f"  reference, Textual Markdown.get_stream() alone in an app: {ref['tokens_per_s']:,.0f} tok/s | "
              f"worst loop gap {ref['worst_gap_ms']:.0f} ms | final full render {ref['final_render_ms']:.0f} ms")

    if args.skip_model:
        return
    print(f"\nStarter model, {args.model_tokens}-token reply, greedy: TUI vs `vibechat run` (alternating)")
    cli_rates, tui_rates = [], []
    for r in range(args.rounds):
        cli_rates.append(cli_decode_rate(args.model_tokens))
        rate, n = asyncio.run(tui_decode_rate(args.model_tokens))
        tui_rates.append(rate)
        print(f"  round {r + 1}: vibechat run {cli_rates[-1]:.1f} tok/s | TUI {rate:.1f} tok/s ({n} tokens)")
    cli_m, tui_m = statistics.median(cli_rates), statistics.median(tui_rates)
    print(f"  median: vibechat run {cli_m:.1f} tok/s, TUI {tui_m:.1f} tok/s, ratio {tui_m / cli_m:.3f} (target ≥ 0.9)")


if __name__ == "__main__":
    main()
