"""The time to the first answer token with a thinking budget against without one (issue 45), on
the starter model under a forced ``<think>`` frame: a chat template whose generation prompt opens
the thinking block (tests/engine/llama/test_think_budget.py's), so every reply starts thinking.

In alternating rounds (budget, none, none, budget, ...: ``swap_odd_rounds``), in one process,
the same prompt is answered greedily from an empty KV cache, once with ``--think-budget N`` and
once without, both with the same token limit, each stopped at its first answer token. For each
it reports the time from the request to the first answer token (the first ``TextDelta``: after
the engine closed the thinking), the tokens generated before it, and whether an answer came at
all before the limit (the starter does not close its thinking by itself under this frame:
without a budget it thinks until the limit, and the figure is then the time to the limit, a
lower bound). With the host's calibration line.

    .venv/bin/python bench/bench_think_budget.py [--rounds 5] [--budget 64] [--tokens 512]
        [--threads 2] [--quiet-wait 10] [--retries 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import (
    alternating_rounds,
    calibration,
    describe_machine,
    disturbed_warning,
    quiet_logs,
    save_samples,
    with_other_load,
)

TESTS = Path(__file__).resolve().parent.parent / "tests"
PROMPT = "Think step by step: what is 17 times 23?"
MODES = ("budget", "none")


@dataclass
class Sample:
    mode: str
    # From the request to the first answer token (or to the reply's end when none came).
    first_answer_s: float = 0.0
    answered: bool = False
    thinking_tokens: int = 0
    round: int = 0
    other_load: float | None = None


def reply(backend, params) -> Sample:
    """One greedy reply from an empty KV cache, timed to its first answer token: the reply is
    stopped there (what comes after is not measured)."""
    from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta, ThinkingDelta

    backend.reset()
    sample = Sample("budget" if params.think_budget else "none")
    t0 = time.perf_counter()
    events = backend.stream_chat([ChatMessage("user", PROMPT)], params)
    try:
        for event in events:
            if isinstance(event, ThinkingDelta):
                sample.thinking_tokens = event.tokens
            elif isinstance(event, TextDelta):
                sample.first_answer_s, sample.answered = time.perf_counter() - t0, True
                # The tokens generated before it (the closing ones included).
                sample.thinking_tokens = event.tokens - 1
                break
            elif isinstance(event, GenerationDone):
                sample.first_answer_s = time.perf_counter() - t0
                sample.thinking_tokens = event.stats.thinking_tokens
    finally:
        events.close()
    return sample


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--budget", type=int, default=64, help="the thinking budget (default 64)")
    parser.add_argument("--tokens", type=int, default=512, help="the token limit (default 512)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument(
        "--quiet-wait", type=float, default=10.0, help="seconds to wait for a quiet machine"
    )
    parser.add_argument(
        "--retries", type=int, default=2, help="reruns of a disturbed sample (default 2)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every sample here")
    args = parser.parse_args(argv)
    quiet_logs()
    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(TESTS / "engine" / "llama"))
    from test_think_budget import think_frame_model
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams

    cal = calibration()
    folder = Path(tempfile.mkdtemp(prefix="vibechat-bench-think-"))
    model = think_frame_model(starter_model_path(), folder)
    backend = LlamaCppBackend(
        LlamaCppOptions(
            model_path=model,
            prompt_format="template",
            context_size=2048,
            threads=args.threads,
            kv_snapshots=False,
        )
    )
    backend.load()
    params = {
        "budget": SamplingParams(temperature=0, max_tokens=args.tokens, think_budget=args.budget),
        "none": SamplingParams(temperature=0, max_tokens=args.tokens),
    }
    try:
        samples = alternating_rounds(
            args.rounds,
            MODES,
            lambda mode: with_other_load(lambda: reply(backend, params[mode])),
            lambda mode, s: (
                f"{mode}: first answer token {s.first_answer_s:.2f} s"
                f"{'' if s.answered else ' (none: the limit)'}, {s.thinking_tokens} thinking"
            ),
            retries=args.retries,
            quiet_wait_s=args.quiet_wait,
            swap_odd_rounds=True,
        )
    finally:
        backend.close()
    print(f"{describe_machine()}\n{cal}")
    print(
        f"starter under a forced <think> frame, greedy, limit {args.tokens} tokens, "
        f"{args.threads} threads, {args.rounds} alternating rounds\n"
    )
    print("| | first answer token (median, range) | answered | tokens before it (median) |")
    print("| --- | --- | --- | --- |")
    for mode in MODES:
        mine = [s for s in samples if s.mode == mode]
        times = [s.first_answer_s for s in mine]
        label = f"budget {args.budget}" if mode == "budget" else "no budget"
        answered = sum(s.answered for s in mine)
        bound = "" if answered == len(mine) else " (≥: the limit, no answer)"
        print(
            f"| {label} | {statistics.median(times):.2f} s ({min(times):.2f}–{max(times):.2f})"
            f"{bound} | {answered} of {len(mine)} | "
            f"{statistics.median(s.thinking_tokens for s in mine):.0f} |"
        )
    by_round = {(s.round, s.mode): s.first_answer_s for s in samples}
    ratios = [by_round[(r, "none")] / by_round[(r, "budget")] for r in range(1, args.rounds + 1)]
    print(
        f"\nno budget / budget, time to the first answer token: median "
        f"{statistics.median(ratios):.1f}× (per round {min(ratios):.1f}–{max(ratios):.1f}×)"
    )
    warning = disturbed_warning(samples)
    if warning:
        print(warning)
    save_samples(args.json, samples, budget=args.budget, tokens=args.tokens)


if __name__ == "__main__":
    main()
