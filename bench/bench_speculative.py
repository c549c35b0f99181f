"""Speculative decoding by prompt lookup, fixed and adaptive, against plain decoding.

Two tasks: a copy-heavy one, "rewrite this code with ``count`` renamed to ``quantity``" with a
60-line Python module in the prompt, where drafts looked up in the prompt often succeed; and a
free-text one (a list of random words, sampled at temperature 1.2 with a fixed seed), where the
lookup finds drafts that mostly fail; and, with ``echo``, a greedy chat reply that the starter
fills by repeating the prompt, where drafts nearly always succeed. The bundled starter model
runs each (greedily but for the free text, ``--tokens`` generated) in three modes per round, in
alternating order: plain decoding
(``off``), ``prompt-lookup`` (always ``--draft-tokens`` drafts) and ``auto`` (the draft length
chosen from measured costs and acceptance, drafting off when it does not pay:
engine/llama/speculative.py); with ``--draft-model``, a fourth: ``auto`` with the starter as its own
draft model (the only draft this repository ships: it checks that drafting from a model works
and what it costs, it cannot be faster). The backends are loaded once, in this process, with the
same settings otherwise. Per task and mode: median
decode tokens/s (vibechat's own statistic: generated tokens / time from the end of the prompt
to the last token), the speed-up as the median of the per-round ratios against ``off`` in the
same round, the share of drafted tokens the model accepted, and auto's final draft length.

    .venv/bin/python bench/bench_speculative.py [--rounds 5] [--tokens 300] [--draft-tokens 10]
        [--threads N] [--tasks code,free,echo] [--draft-model] [--quiet-wait S] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

from _common import (
    add_common_args,
    alternating_rounds,
    describe_machine,
    disturbed_warning,
    greedy_reply,
    quiet_logs,
    save_samples,
    with_other_load,
)

MODES = ("off", "prompt-lookup", "auto")

CODE = """\
import json
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    count: int = 0


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)

    def add(self, name: str, price: float, count: int = 1) -> Item:
        item = self.items.get(name)
        if item is None:
            item = Item(name, price, count)
            self.items[name] = item
        else:
            item.count += count
            item.price = price
        return item

    def remove(self, name: str, count: int = 1) -> int:
        item = self.items[name]
        if count > item.count:
            raise ValueError(f"only {item.count} of {name} left")
        item.count -= count
        if item.count == 0:
            del self.items[name]
        return count

    def total_count(self) -> int:
        return sum(item.count for item in self.items.values())

    def total_value(self) -> float:
        return sum(item.price * item.count for item in self.items.values())

    def low_stock(self, threshold: int = 3) -> list[str]:
        return [item.name for item in self.items.values() if item.count < threshold]

    def to_json(self) -> str:
        data = {name: {"price": item.price, "count": item.count} \
for name, item in self.items.items()}
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Inventory":
        inventory = cls()
        for name, entry in json.loads(text).items():
            inventory.add(name, entry["price"], entry["count"])
        return inventory


def report(inventory: Inventory) -> str:
    lines = [f"{item.name}: {item.count} x {item.price:.2f}" for item in inventory.items.values()]
    lines.append(f"total: {inventory.total_count()} items, {inventory.total_value():.2f}")
    return "\\n".join(lines)
"""
# Greedy replies of the starter model echo their prompt, so lookups succeed on any greedy chat
# prompt; a seeded sample at temperature 1.2 (no top-k/top-p/min-p, no penalty) is text where the
# lookup finds drafts that fail, the case that costs. The seed makes every mode sample the same.
FREE = "Write a list of 50 random words, never repeating one."
FREE_SAMPLING = {
    "temperature": 1.2,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "seed": 7,
}
TASK = (
    "Rewrite this code with the variable `count` renamed to `quantity` everywhere. "
    "Reply with the complete code only.\n\n```python\n" + CODE + "```"
)


# The starter model's greedy chat replies repeat the prompt over and over (it is a tiny model):
# text where drafts succeed nearly always, and k + 1 positions for ~k accepted tokens pay best.
ECHO = "Tell me a story about a dragon who opens a bakery in a small mountain village."
TASKS = {"code": TASK, "free": FREE, "echo": ECHO}


def reply(backend, task: str, n_tokens: int):
    """The ``GenerationDone`` of a reply to ``task`` from an empty KV cache: greedy for the
    code, seeded sampling for the free text."""
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import ChatMessage, GenerationDone

    messages = [ChatMessage("user", TASKS[task])]
    if task != "free":
        return greedy_reply(backend, messages, n_tokens)
    backend.reset()
    done = None
    for event in backend.stream_chat(
        messages, SamplingParams(max_tokens=n_tokens, **FREE_SAMPLING)
    ):
        if isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return done


@dataclass
class Sample:
    task: str
    mode: str
    round: int
    completion_tokens: int
    decode_tps: float
    drafted: int
    accepted: int
    draft_k: int
    turned_off: bool
    text: str
    other_load: float | None = None


def one_sample(backend, task: str, mode: str, n_tokens: int) -> Sample:
    def run() -> Sample:
        done = reply(backend, task, n_tokens)
        st = done.stats
        return Sample(
            task,
            mode,
            0,
            st.completion_tokens,
            st.decode_tokens_per_s,
            st.drafted_tokens,
            st.accepted_draft_tokens,
            st.draft_k,
            st.drafting_turned_off,
            done.text,
        )

    return with_other_load(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=5, tokens=300)
    parser.add_argument(
        "--draft-tokens", type=int, default=10, help="most tokens drafted per step (default 10)"
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60.0,
        help="seconds to wait for a quiet machine before each sample (default 60)",
    )
    parser.add_argument(
        "--tasks",
        default="code,free,echo",
        help="tasks to run, of code, free and echo (default: all three)",
    )
    parser.add_argument(
        "--draft-model",
        action="store_true",
        help="also a fourth mode: auto with the starter as its own draft model (a check that "
        "the draft model works and what it costs; no speed-up is possible, the draft is "
        "as dear as the model)",
    )
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    modes = (*MODES, "draft-model") if args.draft_model else MODES

    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.turns.backend import ChatMessage

    quiet_logs()
    model = starter_model_path()
    backends = {
        mode: LlamaCppBackend(
            LlamaCppOptions(
                model_path=model,
                context_size=4096,
                threads=args.threads,
                speculative="auto" if mode == "draft-model" else mode,
                draft_tokens=args.draft_tokens,
                draft_model_path=model if mode == "draft-model" else None,
            )
        )
        for mode in modes
    }
    infos = {mode: b.load() for mode, b in backends.items()}
    sizes = ", ".join(
        f"{t} {backends['off'].count_tokens([ChatMessage('user', TASKS[t])])}" for t in tasks
    )
    print(
        f"model: {model}\nmachine: {describe_machine()}\nprompt tokens: {sizes}; "
        f"{args.tokens} generated, "
        f"at most {args.draft_tokens} draft tokens, threads {infos['off'].n_threads}",
        file=sys.stderr,
    )

    def describe(key: str, s: Sample) -> str:
        accept = f"  accepted {s.accepted}/{s.drafted}" if s.drafted else ""
        k = (
            f"  k {s.draft_k}{' (off)' if s.turned_off else ''}"
            if s.mode in ("auto", "draft-model")
            else ""
        )
        return f"{key:20} {s.decode_tps:5.1f} tok/s ({s.completion_tokens} tokens){accept}{k}"

    keys = [f"{t}/{m}" for t in tasks for m in modes]
    samples = alternating_rounds(
        args.rounds,
        keys,
        lambda key: one_sample(backends[key.split("/")[1]], *key.split("/"), args.tokens),
        describe,
        retries=args.retries,
        quiet_wait_s=args.quiet_wait,
        swap_odd_rounds=True,
    )
    for backend in backends.values():
        backend.close()

    print(
        "| task | decoding | decode tok/s, median (min–max) | drafted / accepted per "
        "reply | acceptance "
        "| speed-up vs off, median (min–max) |"
    )
    print("|---|---|---|---|---|---|")
    for task in tasks:
        by = {m: {s.round: s for s in samples if s.task == task and s.mode == m} for m in modes}
        for mode in modes:
            rows = by[mode]
            tps = [s.decode_tps for s in rows.values()]
            name = {
                "off": "plain",
                "prompt-lookup": f"prompt lookup, {args.draft_tokens} drafts",
                "auto": "auto (adaptive)",
                "draft-model": "auto, the starter as its own draft model",
            }[mode]
            drafted = sum(s.drafted for s in rows.values())
            accepted = sum(s.accepted for s in rows.values())
            if mode == "off":
                per, rate, ratio = "–", "–", ""
            else:
                per = (
                    f"{statistics.median(s.drafted for s in rows.values()):.0f} / "
                    f"{statistics.median(s.accepted for s in rows.values()):.0f}"
                )
                rate = f"{accepted / drafted:.0%}" if drafted else "n/a"
                ratios = [
                    rows[r].decode_tps / by["off"][r].decode_tps for r in rows if r in by["off"]
                ]
                ratio = f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}–{max(ratios):.2f})"
            print(
                f"| {task} | {name} | {statistics.median(tps):.1f} "
                f"({min(tps):.1f}–{max(tps):.1f}) | {per} "
                f"| {rate} | {ratio} |"
            )
        auto = list(by["auto"].values())
        print(
            f"# {task}: auto's final k per reply {[s.draft_k for s in auto]}, turned itself off in "
            f"{sum(s.turned_off for s in auto)} of {len(auto)}",
            file=sys.stderr,
        )
    if warning := disturbed_warning(samples):
        print(warning)
    save_samples(args.json, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
