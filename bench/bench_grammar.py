"""Grammar-constrained decoding against unconstrained, on the starter model, in one run:
the same prompt and seeds, tokens/s with a JSON Schema (llama.cpp's grammar sampler first
in the chain) and without; prints the ratio constrained/unconstrained.

    .venv/bin/python bench/bench_grammar.py [MODEL.gguf] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from vibechat.engine.backend import ChatMessage, GenerationDone
from vibechat.engine.llamacpp import LlamaCppBackend, LlamaCppOptions
from vibechat.engine.params import SamplingParams
from vibechat.engine.structured import OutputFormat

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "bio": {"type": "string"}}, "required": ["name", "age", "tags", "bio"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(next(Path("~/.cache/vibechat/starter").expanduser().glob("*.gguf"))))
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    backend = LlamaCppBackend(LlamaCppOptions(model_path=Path(args.model), context_size=2048, threads=args.threads))
    backend.load()
    ask = [ChatMessage("user", "Write a long JSON description of a person with a detailed bio.")]
    fmt = OutputFormat("schema", json.dumps(SCHEMA), "person.json")
    speed: dict[str, list[float]] = {"free": [], "grammar": []}
    tokens: dict[str, list[int]] = {"free": [], "grammar": []}
    for seed in range(args.runs):
        for kind, output_format in (("free", None), ("grammar", fmt)):
            backend.reset()
            params = SamplingParams(seed=seed, max_tokens=256, output_format=output_format)
            done = [e for e in backend.stream_chat(ask, params) if isinstance(e, GenerationDone)][0]
            speed[kind].append(done.stats.decode_tokens_per_s)
            tokens[kind].append(done.stats.completion_tokens)
    backend.close()
    free, constrained = statistics.median(speed["free"]), statistics.median(speed["grammar"])
    print(f"unconstrained {free:.1f} tok/s (median of {args.runs}, {sum(tokens['free'])} tokens)")
    print(f"grammar       {constrained:.1f} tok/s (median of {args.runs}, {sum(tokens['grammar'])} tokens)")
    print(f"ratio constrained/unconstrained {constrained / free:.2f}")


if __name__ == "__main__":
    main()
