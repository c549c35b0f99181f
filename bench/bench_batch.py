"""``vibechat run --prompts-file``: the KV-cache prefix kept between lines against a fresh cache.

A JSON Lines file of ``--lines`` prompts that share a system prompt of about
``--system-tokens`` tokens (a store's rules: the common shape of a batch) runs through
``vibechat run --prompts-file F --no-save -n TOKENS --temperature 0`` in a subprocess, the
whole command timed, in alternating rounds: with the default prefix reuse, and with
``--no-prefix-cache`` (every line evaluated from an empty cache). Per mode: median wall
time, prompt tokens evaluated (from the results' stats), and the speed-up as the median of
the per-round ratios. Also says whether the two modes' replies were identical.

    .venv/bin/python bench/bench_batch.py [--rounds 3] [--lines 20] [--system-tokens 500] [--tokens
16]"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    add_common_args,
    alternating_rounds,
    children_cpu_s,
    describe_machine,
    disturbed_warning,
    save_samples,
    with_other_load,
)

MODES = ("fresh", "reuse")
QUESTIONS = (
    "Do you sell hammers?",
    "What are your opening hours?",
    "Can I return a drill?",
    "Which glue works on wood?",
    "How long is the warranty on saws?",
    "Do you cut keys?",
    "Is there parking?",
    "Do you deliver?",
    "What paint suits a bathroom?",
    "Do you rent ladders?",
)


@dataclass
class Sample:
    mode: str
    round: int
    wall_s: float
    prompt_tokens: int
    prompt_tokens_evaluated: int
    texts: list[str] = field(default_factory=list)
    other_load: float | None = None


def write_prompts(path: Path, lines: int, system_tokens: int) -> None:
    rules = " ".join(
        f"Rule {i}: answer questions about aisle {i % 12} politely and name the shelf."
        for i in range(max(1, system_tokens // 18))
    )
    system = f"You are the assistant of a hardware store. {rules}"
    with path.open("w") as f:
        for i in range(lines):
            f.write(
                json.dumps({"id": i, "system": system, "prompt": QUESTIONS[i % len(QUESTIONS)]})
                + "\n"
            )


def vibechat_bin() -> str:
    return str(Path(sys.executable).with_name("vibechat"))


def one_run(path: Path, mode: str, args: argparse.Namespace) -> Sample:
    cmd = [
        vibechat_bin(),
        "run",
        "--prompts-file",
        str(path),
        "--no-save",
        "-n",
        str(args.tokens),
        "--temperature",
        "0",
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if mode == "fresh":
        cmd.append("--no-prefix-cache")

    def run() -> Sample:
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            raise SystemExit(f"bench_batch: {' '.join(cmd)} failed: {out.stderr.strip()}")
        results = [json.loads(line) for line in out.stdout.splitlines()]
        return Sample(
            mode,
            0,
            wall,
            sum(r["stats"]["prompt_tokens"] for r in results),
            sum(r["stats"]["prompt_tokens_evaluated"] for r in results),
            [r["text"] for r in results],
        )

    return with_other_load(run, own_cpu_s=children_cpu_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=3, tokens=16)
    parser.add_argument("--lines", type=int, default=20, help="prompts in the file (default 20)")
    parser.add_argument(
        "--system-tokens", type=int, default=500, help="shared system prompt (default ~500)"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prompts.jsonl"
        write_prompts(path, args.lines, args.system_tokens)
        print(
            f"machine: {describe_machine()}\n{args.lines} prompts sharing a "
            f"~{args.system_tokens}-token system "
            f"prompt, {args.tokens} tokens each, greedy; the starter model",
            file=sys.stderr,
        )
        samples = alternating_rounds(
            args.rounds,
            MODES,
            lambda mode: one_run(path, mode, args),
            lambda mode, s: (
                f"{mode:5} {s.wall_s:6.1f} s  prompt tokens evaluated "
                f"{s.prompt_tokens_evaluated} of {s.prompt_tokens}"
            ),
            retries=args.retries,
            swap_odd_rounds=True,
        )

    by = {(s.mode, s.round): s for s in samples}
    rounds = range(1, args.rounds + 1)
    print("| KV cache between lines | wall time, median (min–max) | prompt tokens evaluated |")
    print("|---|---|---|")
    for mode, label in (
        ("fresh", "empty (`--no-prefix-cache`)"),
        ("reuse", "prefix kept (default)"),
    ):
        walls = [by[(mode, r)].wall_s for r in rounds]
        s = by[(mode, 1)]
        print(
            f"| {label} | {statistics.median(walls):.1f} s ({min(walls):.1f}–{max(walls):.1f}) | "
            f"{s.prompt_tokens_evaluated:,} of {s.prompt_tokens:,} |"
        )
    ratios = [by[("fresh", r)].wall_s / by[("reuse", r)].wall_s for r in rounds]
    print(
        f"\nspeed-up of the whole command (fresh / reuse wall time, median of per-round ratios): "
        f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}–{max(ratios):.2f})"
    )
    identical = all(by[("fresh", r)].texts == by[("reuse", r)].texts for r in rounds)
    print(f"replies identical with and without reuse: {'yes' if identical else 'no'}")
    if warning := disturbed_warning(samples):
        print(warning)
    save_samples(args.json, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
