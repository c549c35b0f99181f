"""Two replies at once (issue 44, point 2): the time of both replies of a pair decoded as two
sequences of one context (``LlamaCppBackend.stream_pair``: one batch per step holding a token of
each, the shared prompt evaluated once) against one reply alone, on the starter model loaded
once in this process, in alternating rounds (one, pair, one, pair, ...). The issue's target: the
pair in at most 1.3× the time of one reply.

Both modes write exactly ``--tokens`` tokens a reply: end-of-generation and control tokens get a
-inf logit bias in every sampler chain (a stage put before the chain's own, as ``ignore_eos``
does in llama.cpp's tools), and the prompt is in Gemma's turn format (no frame stop strings),
so nothing rests on where the model would stop. Each reply starts from an empty KV cache and is
sampled (temperature 0.8 on one side, 1.2 on the other; the seeds fixed). The figure is the
wall time from the request to the last side's end, and the process's CPU time over it (with
``--threads 1`` the figure to trust on a busy host: no thread spins at a barrier waiting for a
descheduled one); the table shows each mode's medians and ranges and the pair's ratios to one
reply, beside the host's calibration (``python3 -m timeit``) line.

    .venv/bin/python bench/bench_compare.py [--rounds 5] [--tokens 128] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _common import (
    alternating_rounds,
    calibration,
    describe_machine,
    disturbed_warning,
    quiet_logs,
    save_samples,
    with_other_load,
)

PROMPT = "Write a long story about a lighthouse keeper and a storm."
MODES = ("one", "pair")


@dataclass
class Sample:
    mode: str
    seconds: float = 0.0
    # The process's CPU time over the sample (every thread's; load-proof with --threads 1, where
    # no thread spins at a barrier waiting for a descheduled one).
    cpu_s: float = 0.0
    # Each reply's tokens (one entry for "one", two for "pair").
    tokens: tuple[int, ...] = ()
    round: int = 0
    other_load: float | None = None


def banned_tokens(ll: Any, vocab: Any) -> list[int]:
    """Every end-of-generation and control token of ``vocab``: what ends a reply early."""
    n_vocab = ll.llama_vocab_n_tokens(vocab)
    return [
        t
        for t in range(n_vocab)
        if ll.llama_vocab_is_eog(vocab, t) or ll.llama_vocab_is_control(vocab, t)
    ]


def force_length() -> None:
    """Every sampler chain the engine builds gets a logit-bias stage first that forbids the
    tokens that would end a reply, so each reply runs to its ``max_tokens``."""
    import llama_cpp as ll

    from vibechat.engine.llama import decoding, llamacpp, pairing

    original = decoding.sampler_chain
    cache: dict[int, Any] = {}

    def chain_with_ban(vocab: Any, params: Any) -> Any:
        key = id(vocab)
        if key not in cache:
            banned = banned_tokens(ll, vocab)
            biases = (ll.llama_logit_bias * len(banned))()
            for i, token in enumerate(banned):
                biases[i].token, biases[i].bias = token, float("-inf")
            cache[key] = (banned, biases)
        banned, biases = cache[key]
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        n_vocab = ll.llama_vocab_n_tokens(vocab)
        ll.llama_sampler_chain_add(
            chain, ll.llama_sampler_init_logit_bias(n_vocab, len(banned), biases)
        )
        ll.llama_sampler_chain_add(chain, original(vocab, params))
        return chain

    llamacpp.sampler_chain = chain_with_ban
    pairing.sampler_chain = chain_with_ban


def load(threads: int | None) -> Any:
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions

    options: dict[str, Any] = {
        "model_path": starter_model_path(),
        "context_size": 4096,
        "prompt_format": "gemma",
    }
    if threads:
        options["threads"] = threads
    backend = LlamaCppBackend(LlamaCppOptions(**options))
    backend.load()
    return backend


def one_sample(backend: Any, mode: str, tokens: int) -> Sample:
    """One timed sample of ``mode`` from an empty KV cache."""
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import (
        ChatMessage,
        GenerationDone,
        SideEvent,
        SideRequest,
    )

    messages = (ChatMessage("user", PROMPT),)
    a = SamplingParams(temperature=0.8, seed=1, max_tokens=tokens)
    b = SamplingParams(temperature=1.2, seed=2, max_tokens=tokens)

    def run() -> Sample:
        backend.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        ends: list[int] = []
        if mode == "one":
            for event in backend.stream_chat(list(messages), a):
                if isinstance(event, GenerationDone):
                    ends.append(event.stats.completion_tokens)
        else:
            for item in backend.stream_pair(SideRequest(messages, a), SideRequest(messages, b)):
                assert isinstance(item, SideEvent)
                if isinstance(item.event, GenerationDone):
                    ends.append(item.event.stats.completion_tokens)
        return Sample(mode, time.perf_counter() - t0, time.process_time() - c0, tuple(ends))

    return with_other_load(run)


def table(samples: list[Sample]) -> str:
    """Each mode's median wall and CPU time, their ranges and ratios to one reply; the ratios'
    verdicts against the target."""
    lines = [
        "| mode | wall time (median) | range | × one | CPU time (median) | range | × one |",
        "| --- | ---: | --- | ---: | ---: | --- | ---: |",
    ]
    ratios = {}
    for what in ("seconds", "cpu_s"):
        by_mode = {m: [getattr(s, what) for s in samples if s.mode == m] for m in MODES}
        ratios[what] = statistics.median(by_mode["pair"]) / statistics.median(by_mode["one"])
    for mode, label in (("one", "one reply"), ("pair", "two replies at once")):
        cells = []
        for what in ("seconds", "cpu_s"):
            values = [getattr(s, what) for s in samples if s.mode == mode]
            med = statistics.median(values)
            ratio = ratios[what] if mode == "pair" else 1.0
            cells.append(f"{med:.2f} s | {min(values):.2f}–{max(values):.2f} s | {ratio:.3f}")
        lines.append(f"| {label} | {' | '.join(cells)} |")
    lines.append("")
    for what, name in (("seconds", "wall time"), ("cpu_s", "CPU time")):
        verdict = "met" if ratios[what] <= 1.3 else "NOT met"
        lines.append(f"pair / one, {name}: {ratios[what]:.3f}; target ≤ 1.3×: {verdict}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quiet-wait", type=float, default=10.0, help="seconds to wait for quiet")
    parser.add_argument("--retries", type=int, default=1, help="reruns of a disturbed sample")
    parser.add_argument("--json", default=None, help="also write every sample to this file")
    args = parser.parse_args()
    quiet_logs()
    cal = calibration()
    force_length()
    backend = load(args.threads)
    try:
        # Warm-up: the first decodes allocate.
        one_sample(backend, "pair", 16)
        samples = alternating_rounds(
            args.rounds,
            MODES,
            lambda mode: one_sample(backend, mode, args.tokens),
            lambda mode, s: f"{mode}: {s.seconds:.2f} s, CPU {s.cpu_s:.2f} s (tokens {s.tokens})",
            retries=args.retries,
            quiet_wait_s=args.quiet_wait,
            swap_odd_rounds=True,
        )
        info = backend.describe()
    finally:
        backend.close()
    lengths = {n for s in samples for n in s.tokens}
    print(
        f"{describe_machine()}; {info.name}, {info.n_threads} threads; {args.tokens} tokens a "
        f"reply (all replies {'equal' if len(lengths) == 1 else 'NOT equal'}: {sorted(lengths)}); "
        f"{args.rounds} rounds"
    )
    print(f"calibration: {cal.line}")
    print(table(samples))
    warning = disturbed_warning(samples)
    if warning:
        print(warning)
    if args.json:
        from pathlib import Path

        save_samples(Path(args.json), samples, tokens=args.tokens)


if __name__ == "__main__":
    main()
