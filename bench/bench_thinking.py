"""What a reasoning model's live thinking block costs the chat, against the same stream shown
as answer text, in the same run.

A synthetic backend streams the same pieces (bench_tui's Markdown-like words) at a fixed
rate, once as thinking (``ThinkingDelta``: the folded block's live line) and once as the
answer (``TextDelta``: the Markdown segments), in alternating rounds. For each it reports
the chat process's CPU per second of streaming (the generating thread sleeps between
pieces, so this is the UI's work: what it takes from the model's cores) and, for the
thinking, how many times the block's line was redrawn against the pieces it received.

Run ``.venv/bin/python bench/bench_thinking.py [--rounds 3] [--pieces 2000] [--rate 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from _common import describe_machine, self_cpu_s
from bench_tui import SIZE, SyntheticBackend, markdown_tokens, until_settled
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.thinking_block import ThinkingBlock
from vibechat.engine.turns.backend import GenerationDone, GenerationStats, TextDelta, ThinkingDelta


class Streaming(SyntheticBackend):
    """Streams the pieces at ``rate`` a second, as thinking (then a short answer) or as the
    answer."""

    def __init__(self, pieces: list[str], rate: float, thinking: bool) -> None:
        super().__init__(pieces)
        self.rate, self.thinking = rate, thinking

    def stream_chat(self, messages, params):
        start = time.perf_counter()
        for sent, piece in enumerate(self.pieces, 1):
            delay = start + sent / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            yield ThinkingDelta(piece, sent) if self.thinking else TextDelta(piece)
        answer = "Done." if self.thinking else "".join(self.pieces)
        if self.thinking:
            yield TextDelta(answer)
        yield GenerationDone(
            answer,
            GenerationStats(
                completion_tokens=len(self.pieces) + self.thinking,
                thinking_tokens=len(self.pieces) if self.thinking else 0,
            ),
            thinking="".join(self.pieces) if self.thinking else "",
        )


async def sample(pieces: list[str], rate: float, thinking: bool) -> dict[str, float]:
    redraws = [0]
    tick = ThinkingBlock._tick

    def counted(self: ThinkingBlock) -> None:
        redraws[0] += 1
        tick(self)

    ThinkingBlock._tick = counted  # type: ignore[method-assign]
    try:
        app = create_app(Streaming(pieces, rate, thinking), blink=False, save=False)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.prompt_input.load_text("Go")
            cpu0, t0 = self_cpu_s(), time.perf_counter()
            await pilot.press("enter")
            await asyncio.sleep(0.05)
            await until_settled(app, 10 + 3 * len(pieces) / rate)
            cpu, wall = self_cpu_s() - cpu0, time.perf_counter() - t0
            await pilot.pause()
    finally:
        ThinkingBlock._tick = tick  # type: ignore[method-assign]
    return {"cpu_per_s": cpu / wall, "redraws": redraws[0], "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pieces", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="pieces a second")
    args = parser.parse_args()
    pieces = markdown_tokens(args.pieces)
    runs: dict[str, list[dict[str, float]]] = {"thinking": [], "answer": []}
    for _ in range(args.rounds):
        for kind in ("thinking", "answer"):  # interleaved: A, B, A, B ...
            runs[kind].append(asyncio.run(sample(pieces, args.rate, kind == "thinking")))
    print(f"{describe_machine()}; {args.pieces} pieces at {args.rate:g}/s, {args.rounds} rounds\n")
    print("| shown as | chat CPU per second streamed (median, range) | line redraws |")
    print("| --- | --- | --- |")
    for kind, samples in runs.items():
        cpu = [s["cpu_per_s"] for s in samples]
        redraws = (
            f"{statistics.median(s['redraws'] for s in samples):.0f}" if kind == "thinking" else "–"
        )
        print(
            f"| {kind} | {statistics.median(cpu):.3f} ({min(cpu):.3f}–{max(cpu):.3f}) | {redraws} |"
        )
    ratios = [
        t["cpu_per_s"] / a["cpu_per_s"]
        for t, a in zip(runs["thinking"], runs["answer"], strict=True)
    ]
    print(
        f"\nthinking / answer CPU: median {statistics.median(ratios):.2f} "
        f"(range {min(ratios):.2f}–{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
