"""Grammar-constrained decoding against unconstrained, on the starter model, in one run:
the same prompt and seeds, tokens/s without a grammar, with a JSON Schema the way the engine
samples it (engine/llama/grammar_sampling.py: the chain first, the grammar checks only the token
drawn, a resample when it rejects it), and with llama.cpp's grammar sampler first in the
chain (what the engine did before: the whole vocabulary checked on every token). Runs are
interleaved (free, lazy, first, free, lazy, first, ...); prints each kind's median and range,
the ratios against unconstrained, and how many tokens the grammar rejected at first.

    .venv/bin/python bench/bench_grammar.py [MODEL.gguf] [--runs N] [--temperature T]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from pathlib import Path

import llama_cpp as ll

from vibechat.engine.llama import grammar_sampling
from vibechat.engine.llama.grammar_sampling import ChainSampler
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.turns.backend import ChatMessage, GenerationDone

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "bio": {"type": "string"},
    },
    "required": ["name", "age", "tags", "bio"],
}


class _Counts(logging.Handler):
    """Collects GrammarSampler's per-reply counts (its debug line on free)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.resampled = self.sampled = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("grammar:") and isinstance(record.args, tuple):
            self.resampled += int(record.args[0])
            self.sampled += int(record.args[1])


def grammar_first(backend: LlamaCppBackend, params: SamplingParams) -> ChainSampler:
    """The engine's former sampler: llama.cpp's grammar sampler first in the C chain."""
    rest = backend._chain(params)
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    assert params.output_format is not None
    gbnf = params.output_format.gbnf().encode("utf-8")
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_grammar(backend._vocab, gbnf, b"root"))
    while ll.llama_sampler_chain_n(rest):
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_chain_remove(rest, 0))
    ll.llama_sampler_free(rest)
    return ChainSampler(chain)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} tok/s (range {min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    starter = next(Path("~/.cache/vibechat/starter").expanduser().glob("*.gguf"))
    parser.add_argument("model", nargs="?", default=str(starter))
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=0.8)
    args = parser.parse_args()
    backend = LlamaCppBackend(
        LlamaCppOptions(model_path=Path(args.model), context_size=2048, threads=args.threads)
    )
    backend.load()
    counts = _Counts()
    logger = logging.getLogger(grammar_sampling.__name__)
    logger.addHandler(counts)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    lazy_sampler = backend._sampler
    ask = [ChatMessage("user", "Write a long JSON description of a person with a detailed bio.")]
    fmt = OutputFormat("schema", json.dumps(SCHEMA), "person.json")
    kinds = (("free", None), ("lazy", fmt), ("first", fmt))
    speed: dict[str, list[float]] = {kind: [] for kind, _ in kinds}
    tokens: dict[str, int] = {kind: 0 for kind, _ in kinds}
    for seed in range(args.runs):
        for kind, output_format in kinds:
            backend._sampler = (
                (lambda p: grammar_first(backend, p)) if kind == "first" else lazy_sampler
            )  # type: ignore[method-assign]
            backend.reset()
            params = SamplingParams(
                seed=seed, temperature=args.temperature, max_tokens=256, output_format=output_format
            )
            done = [e for e in backend.stream_chat(ask, params) if isinstance(e, GenerationDone)][0]
            speed[kind].append(done.stats.decode_tokens_per_s)
            tokens[kind] += done.stats.completion_tokens
    backend.close()
    free = statistics.median(speed["free"])
    print(
        f"unconstrained       {spread(speed['free'])}, median of {args.runs}, "
        f"{tokens['free']} tokens"
    )
    for kind, label in (("lazy", "grammar (lazy)"), ("first", "grammar (first)")):
        ratios = [g / f for g, f in zip(speed[kind], speed["free"], strict=True)]
        print(
            f"{label:<19} {spread(speed[kind])}, {tokens[kind]} tokens; ratio to unconstrained "
            f"{statistics.median(speed[kind]) / free:.2f} (per seed "
            f"{min(ratios):.2f}-{max(ratios):.2f})"
        )
    lazy, first = statistics.median(speed["lazy"]), statistics.median(speed["first"])
    print(
        f"lazy/first {lazy / first:.2f}; tokens the grammar rejected at first (lazy): "
        f"{counts.resampled} of {counts.sampled} ({counts.resampled / max(1, counts.sampled):.0%})"
    )


if __name__ == "__main__":
    main()
