"""KV-cache types: memory, prompt evaluation and decode speed per type at 8k context.

The bundled starter model is loaded once per KV-cache type (f16, q8_0, q4_0) with an
8,192-token context, all in this process. Each round, every type in turn (A B C A B C
...) evaluates the same long prompt (~6,000 tokens, from an empty cache) and then
generates greedily; the figures are vibechat's own statistics:

* KV memory -- what llama.cpp allocated for the cache (``ModelInfo.kv_cache_bytes``,
  from its log);
* prompt tokens/s -- prompt tokens evaluated / prompt evaluation time;
* decode tokens/s -- generated tokens / time from the end of the prompt to the last token
  (every token attends to the whole ~6k-token cache).

Medians over the rounds, with each type's ratio to f16 from the same run. Before each
sample the script waits (at most a minute) for the machine to be quiet, notes how much
CPU other processes used meanwhile, and runs a disturbed sample again (``--retries``).

    .venv/bin/python bench/bench_kvcache.py [--rounds 3] [--prompt-tokens 6000] [--tokens 128]
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

TYPES = ("f16", "q8_0", "q4_0")
N_CTX = 8192


@dataclass
class Sample:
    kv_type: str
    round: int
    prompt_tokens: int
    prompt_tps: float
    completion_tokens: int
    decode_tps: float
    other_load: float | None = None


def long_prompt(backend, target: int):
    """A user message of about ``target`` tokens (a numbered log the base model continues)."""
    from vibechat.engine.turns.backend import ChatMessage

    words = (
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
        "mike",
        "november",
        "oscar",
        "papa",
        "quebec",
        "romeo",
        "sierra",
        "tango",
    )
    lines = []
    i = 0
    while True:
        i += 1
        picked = " ".join(words[(i * k) % len(words)] for k in (1, 3, 7, 11, 13))
        lines.append(
            f"{i}. station {picked} reported {i * 37 % 1000} units at {i % 24:02d}:{i * 7 % 60:02d}"
        )
        if i % 10 == 0:
            messages = [ChatMessage("user", "Continue this log:\n" + "\n".join(lines))]
            if backend.count_tokens(messages) >= target:
                return messages


def one_sample(backend, kv_type: str, messages, n_tokens: int) -> Sample:
    def run() -> Sample:
        stats = greedy_reply(backend, messages, n_tokens).stats
        return Sample(
            kv_type,
            0,
            stats.prompt_tokens_evaluated,
            stats.prompt_tokens_evaluated / (stats.prompt_eval_ms / 1000),
            stats.completion_tokens,
            stats.decode_tokens_per_s,
        )

    return with_other_load(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=3, tokens=128)
    parser.add_argument(
        "--prompt-tokens", type=int, default=6000, help="prompt length (default ~6000)"
    )
    args = parser.parse_args(argv)

    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions

    quiet_logs()
    model = starter_model_path()
    backends, infos = {}, {}
    for kv_type in TYPES:
        backends[kv_type] = LlamaCppBackend(
            LlamaCppOptions(
                model_path=model, context_size=N_CTX, kv_cache_type=kv_type, threads=args.threads
            )
        )
        infos[kv_type] = backends[kv_type].load()
    messages = long_prompt(backends["f16"], args.prompt_tokens)
    print(
        f"model: {model}\nmachine: {describe_machine()}\ncontext {N_CTX}, prompt "
        f"{backends['f16'].count_tokens(messages)} tokens, {args.tokens} generated, threads "
        f"{infos['f16'].n_threads}",
        file=sys.stderr,
    )
    samples = alternating_rounds(
        args.rounds,
        TYPES,
        lambda kv_type: one_sample(backends[kv_type], kv_type, messages, args.tokens),
        lambda kv_type, s: (
            f"{kv_type:5} prompt {s.prompt_tps:7.1f} tok/s  decode {s.decode_tps:5.1f} tok/s "
            f"({s.completion_tokens} tokens)"
        ),
        retries=args.retries,
    )
    for backend in backends.values():
        backend.close()

    def med(kv_type: str, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in samples if s.kv_type == kv_type)

    def ratio_of_rounds(kv_type: str, attr: str) -> float:
        by_round = {(s.kv_type, s.round): getattr(s, attr) for s in samples}
        return statistics.median(
            by_round[(kv_type, r)] / by_round[("f16", r)] for r in range(1, args.rounds + 1)
        )

    print(
        "| KV cache | memory | × f16 | prompt tok/s (min–max) | × f16 | decode tok/s "
        "(min–max) | × f16 |"
    )
    print("|---|---|---|---|---|---|---|")
    for kv_type in TYPES:
        mem = infos[kv_type].kv_cache_bytes or 0
        ps = [s.prompt_tps for s in samples if s.kv_type == kv_type]
        ds = [s.decode_tps for s in samples if s.kv_type == kv_type]
        print(
            f"| {kv_type} | {mem / (1 << 20):.2f} MiB | "
            f"{mem / (infos['f16'].kv_cache_bytes or 1):.2f} | "
            f"{med(kv_type, 'prompt_tps'):.1f} ({min(ps):.1f}–{max(ps):.1f}) | "
            f"{ratio_of_rounds(kv_type, 'prompt_tps'):.2f} | "
            f"{med(kv_type, 'decode_tps'):.1f} ({min(ds):.1f}–{max(ds):.1f}) | "
            f"{ratio_of_rounds(kv_type, 'decode_tps'):.2f} |"
        )
    if warning := disturbed_warning(samples):
        print("\n" + warning)
    print("\n× f16: memory as allocated; speeds as the median of the per-round ratios to f16.")
    save_samples(args.json, samples, kv_cache_bytes={t: infos[t].kv_cache_bytes for t in TYPES})
    return 0


if __name__ == "__main__":
    sys.exit(main())
