"""Prompt-lookup speculative decoding against plain decoding on a repetitive task.

The task repeats its prompt: "rewrite this code with ``count`` renamed to ``quantity``",
with a 60-line Python module in the prompt. The bundled starter model runs it greedily
(temperature 0, ``--tokens`` generated) twice per round, in alternating order: once with
plain decoding, once with ``speculative="prompt-lookup"`` (llama-cpp-python's
``LlamaPromptLookupDecoding``, n-gram size 2, ``--draft-tokens`` per step, verified in
vibechat's decode loop). Both backends are loaded once, in this process, with the same
settings otherwise. Per mode: median decode tokens/s (vibechat's own statistic:
generated tokens / time from the end of the prompt to the last token), the speed-up as
the median of the per-round ratios, and the share of drafted tokens the model accepted.
The script also says whether greedy output was identical with and without drafting.

    .venv/bin/python bench/bench_speculative.py [--rounds 5] [--tokens 300] [--draft-tokens 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

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

CODE = '''\
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
        data = {name: {"price": item.price, "count": item.count} for name, item in self.items.items()}
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
'''
TASK = ("Rewrite this code with the variable `count` renamed to `quantity` everywhere. "
        "Reply with the complete code only.\n\n```python\n" + CODE + "```")


@dataclass
class Sample:
    mode: str
    round: int
    completion_tokens: int
    decode_tps: float
    drafted: int
    accepted: int
    text: str
    other_load: float | None = None


def one_sample(backend, mode: str, n_tokens: int) -> Sample:
    from vibechat.engine.backend import ChatMessage

    def run() -> Sample:
        done = greedy_reply(backend, [ChatMessage("user", TASK)], n_tokens)
        st = done.stats
        return Sample(mode, 0, st.completion_tokens, st.decode_tokens_per_s, st.drafted_tokens,
                      st.accepted_draft_tokens, done.text)

    return with_other_load(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=5, tokens=300)
    parser.add_argument("--draft-tokens", type=int, default=10, help="most tokens drafted per step (default 10)")
    args = parser.parse_args(argv)

    from vibechat.engine.llamacpp import LlamaCppBackend, LlamaCppOptions
    from vibechat.engine.starter import starter_model_path

    quiet_logs()
    model = starter_model_path()
    backends = {
        mode: LlamaCppBackend(LlamaCppOptions(model_path=model, context_size=4096, threads=args.threads,
                                              speculative=mode, draft_tokens=args.draft_tokens))
        for mode in ("off", "prompt-lookup")
    }
    infos = {mode: b.load() for mode, b in backends.items()}
    from vibechat.engine.backend import ChatMessage

    prompt_tokens = backends["off"].count_tokens([ChatMessage("user", TASK)])
    print(f"model: {model}\nmachine: {describe_machine()}\nprompt {prompt_tokens} tokens ({CODE.count(chr(10))} "
          f"lines of code), {args.tokens} generated greedily, draft {args.draft_tokens} tokens, threads "
          f"{infos['off'].n_threads}", file=sys.stderr)

    def describe(mode: str, s: Sample) -> str:
        accept = f"  accepted {s.accepted}/{s.drafted}" if s.drafted else ""
        return f"{mode:13} {s.decode_tps:5.1f} tok/s ({s.completion_tokens} tokens){accept}"

    samples = alternating_rounds(args.rounds, ("off", "prompt-lookup"),
                                 lambda mode: one_sample(backends[mode], mode, args.tokens), describe,
                                 retries=args.retries, swap_odd_rounds=True)
    for backend in backends.values():
        backend.close()

    off = {s.round: s for s in samples if s.mode == "off"}
    on = {s.round: s for s in samples if s.mode == "prompt-lookup"}
    identical = all(off[r].text == on[r].text for r in off)
    ratios = [on[r].decode_tps / off[r].decode_tps for r in off]
    drafted = sum(s.drafted for s in on.values())
    accepted = sum(s.accepted for s in on.values())
    print("| decoding | decode tok/s, median (min–max) | tokens | drafted / accepted per reply | acceptance |")
    print("|---|---|---|---|---|")
    for name, rows in (("plain", off), (f"prompt lookup, {args.draft_tokens} draft tokens", on)):
        tps = [s.decode_tps for s in rows.values()]
        tokens = statistics.median(s.completion_tokens for s in rows.values())
        if rows is on:
            per = f"{statistics.median(s.drafted for s in on.values()):.0f} / " \
                  f"{statistics.median(s.accepted for s in on.values()):.0f}"
            rate = f"{accepted / drafted:.0%}" if drafted else "n/a"
        else:
            per, rate = "–", "–"
        print(f"| {name} | {statistics.median(tps):.1f} ({min(tps):.1f}–{max(tps):.1f}) | {tokens:.0f} | {per} | {rate} |")
    print(f"\nspeed-up (prompt lookup / plain, median of per-round ratios): {statistics.median(ratios):.2f} "
          f"(rounds {min(ratios):.2f}–{max(ratios):.2f})")
    if identical:
        print("greedy output identical with and without drafting: yes")
    else:
        a, b = off[1].text, on[1].text
        at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        print(f"greedy output identical with and without drafting: no, they part after {at} of {len(a)} characters "
              f"(batched evaluation rounds differently from one-token decoding; see docs/PERFORMANCE.md)")
    if warning := disturbed_warning(samples):
        print(warning)
    save_samples(args.json, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
