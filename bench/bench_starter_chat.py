"""The starter (Gemma 3 270M, a base model) as a chat model: how each way of prompting it
answers everyday prompts (issue 24). For every configuration, every prompt of ``PROMPTS``
(24 greetings, questions and short tasks) with each seed, at the default sampling settings
(temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), at most 256 tokens a reply, from an
empty KV cache; then per configuration:

* **stop**: the share of replies that ended by themselves (finish_reason ``stop``: an end
  token or a stop string) within the 256 tokens;
* **echo**: replies that repeat the prompt: the prompt, lowercased with every run of
  characters other than letters and digits made one space, appears in the reply treated
  the same way (only prompts of 3 words or more: "Hello!" answering "hello" is no echo);
* **rep3**: the mean share of repeated word 3-grams: of a reply's 3-grams of lowercased
  words, the share that already occurred earlier in it (0 for a reply under 3 words);
* **parrot**: replies that borrow the subject of one of the frame's examples (Tokyo, an
  apple: no prompt is about them) or repeat one of their answers;
* **right**: of the replies to the 7 questions with one right answer (``ANSWERS``), the
  share that has it (a rough sign of sense: a 270M base model knows little);
* **empty**: replies with no words; **words**: the median length; **longest**: the most
  tokens a reply that ended by itself took.

Configurations: ``gemma`` (Gemma's turn format: vibechat's prompt for the starter before
issue 24), ``frame`` (the completion frame, no repetition control), ``rp1.05`` / ``rp1.1`` /
``rp1.15`` (the frame with llama.cpp's repeat penalty over the last 64 tokens), ``dry`` (the
frame with llama.cpp's DRY sampler, its usual settings: multiplier 0.8, base 1.75, allowed
length 2, the last 256 tokens, sequence breakers \\n : " *) and ``auto`` (the frame with
vibechat's defaults for a completion model: what a user gets); not run unless named,
``gemma-rp1.1`` and ``gemma-dry`` (Gemma's turn format with either: the repetition control
where the model does not stop by itself). ``--long`` asks 8 requests for a longer text
(``LONG_PROMPTS``) instead of the everyday prompts. Prints a Markdown table, the host's speed
calibration (``python3 -m timeit "sum(i*i for i in range(10000))"``) and, with ``--show``,
every reply of the first seed.

    .venv/bin/python bench/bench_starter_chat.py [--seeds 1 2 3] [--configs gemma frame ...]
        [--show CONFIG ...] [--json FILE] [--long]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import llama_cpp as ll

from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.models.starter import starter_model_path
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone
from vibechat.engine.turns.prompt_format import COMPLETION_EXAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import calibration, describe_machine, quiet_logs

PROMPTS = (
    # greetings and small talk
    "hello",
    "Hi, how are you?",
    "Good morning!",
    "Thanks for your help!",
    # questions
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Who wrote Romeo and Juliet?",
    "What is the largest planet in the solar system?",
    "Why is the sky blue?",
    "What is 12 times 7?",
    "What language is spoken in Brazil?",
    "How many days are in a leap year?",
    "What does a CPU do?",
    # short tasks
    "Write a haiku about tmux",
    "Give me three tips for better sleep.",
    "Translate 'thank you' into Spanish.",
    "Suggest a name for a black cat.",
    "Tell me a joke.",
    "Write one sentence about autumn.",
    "Recommend a good book for a long flight.",
    "Summarise in one sentence: the meeting moved from Monday to Wednesday because the "
    "manager was ill.",
    "Give me a synonym for happy.",
    "What should I cook for dinner tonight?",
    "Explain recursion to a child.",
)
# Requests for a longer text, where a base model repeats itself if anything does: ``--long``
# measures the repetition control on these (the everyday prompts get replies too short to tell).
LONG_PROMPTS = (
    "Write a long story about a dragon who learns to bake bread.",
    "List ten animals that live in the sea.",
    "Write a poem about the sea.",
    "Describe your perfect day from morning to night.",
    "Explain how a car engine works.",
    "Give me a recipe for pancakes.",
    "Tell me everything you know about the Moon.",
    "Write a letter to a friend about your holiday.",
)
# The questions with one right answer, and a pattern the right answer matches: how often the
# replies are right, a rough sign of sense (a 270M base model knows little).
ANSWERS = {
    "What is the capital of France?": r"\bparis\b",
    "How many legs does a spider have?": r"\b(8|eight)\b",
    "Who wrote Romeo and Juliet?": r"shakespeare",
    "What is the largest planet in the solar system?": r"jupiter",
    "What is 12 times 7?": r"\b84\b",
    "What language is spoken in Brazil?": r"portuguese",
    "How many days are in a leap year?": r"\b366\b",
}
LIMIT = 256  # tokens: the target is measured within this budget
CONFIGS = ("gemma", "frame", "rp1.05", "rp1.1", "rp1.15", "dry", "auto", "gemma-rp1.1", "gemma-dry")
DEFAULT_CONFIGS = CONFIGS[:7]
DRY_BREAKERS = (b"\n", b":", b'"', b"*")


def normalised(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def echoes(prompt: str, reply: str) -> bool:
    """The prompt (3 words or more) reappears in the reply, case and punctuation aside."""
    said = normalised(prompt)
    return len(said.split()) >= 3 and said in normalised(reply)


def repeated_3grams(reply: str) -> float:
    """Of the reply's word 3-grams, the share that already occurred earlier in it."""
    words = re.findall(r"\w+", reply.lower())
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


# The subjects of the frame's examples (engine/turns/chat_template.py COMPLETION_EXAMPLES): none of
# the prompts is about them, so a reply that names one borrowed it from an example.
EXAMPLE_SUBJECTS = ("tokyo", "japan", "apple")


def parrots(reply: str) -> bool:
    """The reply borrows an example's subject (or repeats an example's answer whole)."""
    said = normalised(reply)
    return bool(said) and (
        any(re.search(rf"\b{word}\b", said) for word in EXAMPLE_SUBJECTS)
        or any(normalised(answer) == said for _q, answer in COMPLETION_EXAMPLES[1:])
    )


@dataclass
class Reply:
    config: str
    prompt: str
    seed: int
    text: str
    finish_reason: str
    tokens: int
    seconds: float


class DryBackend(LlamaCppBackend):
    """The engine with llama.cpp's DRY sampler first in its chain (the bench's ``dry``)."""

    def _chain(self, params: SamplingParams):
        rest = super()._chain(params)
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        breakers = (ctypes.c_char_p * len(DRY_BREAKERS))(*DRY_BREAKERS)
        # The last 256 tokens: this build's llama_sampler_init_dry takes no context size, and a
        # penalty_last_n of -1 ("the context") turned DRY off here (the same replies as without it).
        ll.llama_sampler_chain_add(
            chain,
            ll.llama_sampler_init_dry(self._vocab, 0.8, 1.75, 2, 256, breakers, len(DRY_BREAKERS)),
        )
        while ll.llama_sampler_chain_n(rest):
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_chain_remove(rest, 0))
        ll.llama_sampler_free(rest)
        return chain


def backend_for(config: str, model: Path) -> LlamaCppBackend:
    """``gemma...``: Gemma's turn format; any other: the completion frame; ``...dry``: with DRY."""
    options = LlamaCppOptions(
        model_path=model,
        context_size=2048,
        prompt_format="gemma" if config.startswith("gemma") else "completion",
    )
    return (DryBackend if config.endswith("dry") else LlamaCppBackend)(options)


def params_for(config: str, seed: int) -> SamplingParams:
    """The default sampling settings; a 256-token budget; the configuration's penalty. ``auto``
    leaves max_tokens and repeat_penalty to the engine (its completion-model defaults) and
    checks they are at most the budget measured."""
    if config == "auto":
        return SamplingParams(seed=seed)
    rp = re.search(r"rp([0-9.]+)$", config)
    return SamplingParams(
        seed=seed, max_tokens=LIMIT, repeat_penalty=float(rp.group(1)) if rp else 1.0
    )


def ask(backend: LlamaCppBackend, config: str, prompt: str, seed: int) -> Reply:
    backend.reset()
    done = None
    started = time.perf_counter()
    for event in backend.stream_chat([ChatMessage("user", prompt)], params_for(config, seed)):
        if isinstance(event, GenerationDone):
            done = event
    assert done is not None
    if config == "auto":  # the engine's own budget must be within the one measured
        assert (
            done.params is not None and done.params.max_tokens and done.params.max_tokens <= LIMIT
        ), done.params
    return Reply(
        config,
        prompt,
        seed,
        done.text,
        done.stats.finish_reason,
        done.stats.completion_tokens,
        time.perf_counter() - started,
    )


def summary(config: str, replies: list[Reply]) -> dict[str, float]:
    n = len(replies)
    return {
        "replies": n,
        "stop": sum(r.finish_reason == "stop" and r.tokens <= LIMIT for r in replies) / n,
        "echo": sum(echoes(r.prompt, r.text) for r in replies),
        "rep3": statistics.fmean(repeated_3grams(r.text) for r in replies),
        "parrot": sum(parrots(r.text) for r in replies),
        "right": (
            sum(
                bool(re.search(ANSWERS[r.prompt], r.text.lower()))
                for r in replies
                if r.prompt in ANSWERS
            )
            / max(1, sum(r.prompt in ANSWERS for r in replies))
        ),
        "empty": sum(not re.search(r"\w", r.text) for r in replies),
        "words": statistics.median(len(r.text.split()) for r in replies),
        "tokens": statistics.fmean(r.tokens for r in replies),
        "longest": max((r.tokens for r in replies if r.finish_reason == "stop"), default=0),
        "seconds": sum(r.seconds for r in replies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS), choices=CONFIGS)
    parser.add_argument(
        "--show",
        nargs="*",
        default=None,
        choices=CONFIGS,
        help="print every reply of the first seed of these configurations (none named: all)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every reply to this JSON file"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help=f"the {len(LONG_PROMPTS)} requests for a longer text instead of the everyday prompts",
    )
    args = parser.parse_args()
    prompts = LONG_PROMPTS if args.long else PROMPTS
    quiet_logs()
    model = starter_model_path()
    print(f"Machine: {describe_machine()}")
    print(f"Calibration: {calibration()}")
    print(
        f"{len(prompts)} prompts x seeds {args.seeds}, at most {LIMIT} tokens a reply\n", flush=True
    )
    results: dict[str, list[Reply]] = {}
    for config in args.configs:
        backend = backend_for(config, model)
        try:
            backend.load()
            results[config] = [
                ask(backend, config, prompt, seed) for seed in args.seeds for prompt in prompts
            ]
        finally:
            backend.close()
        print(f"  {config}: done", file=sys.stderr, flush=True)
    print(
        "| configuration | stop by itself | echoes | repeated 3-grams | parrots an "
        "example | right answers | "
        "empty | median words | mean tokens | longest | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for config, replies in results.items():
        s = summary(config, replies)
        print(
            f"| {config} | {s['stop']:.0%} | {s['echo']} | {s['rep3']:.1%} | {s['parrot']} "
            f"| {s['right']:.0%} | "
            f"{s['empty']} | "
            f"{s['words']:g} | {s['tokens']:.0f} | {s['longest']} | {s['seconds']:.0f} |"
        )
    if args.show is not None:
        for config in args.show or results:
            print(f"\n## {config} (seed {args.seeds[0]})")
            for r in results.get(config, []):
                if r.seed == args.seeds[0]:
                    print(
                        f"- {r.prompt!r} -> {r.text.strip()[:300]!r} [{r.finish_reason}, "
                        f"{r.tokens}]"
                    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "machine": describe_machine(),
                    "calibration": calibration().line,
                    "replies": [asdict(r) for rs in results.values() for r in rs],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
