"""CPU weight repacking (``--repack``): what each load configuration costs, on this CPU.

llama.cpp 0.3.36's AMX kernel crashes on multi-token batches on many Intel AMX VMs
(engine/llama/repack.py). This measures, on the starter model and through vibechat's own
backend, every configuration that a fix could choose:

* ``on``        -- extra buffer types on (llama.cpp's default; AMX tiles where the build and
  CPU have them, else the CPU_REPACK layouts), prompts in batches of up to 512 tokens;
* ``off``       -- extra buffer types off (vibechat's choice where the AMX kernel crashes);
* ``on-ubatch1`` -- on, with ``n_ubatch = 1``: every batch is split into single tokens, the
  only batch size whose matrix products take the AMX path's VNNI kernel instead of its
  tile kernel (``ggml_backend_amx_mul_mat``: ``M == 1``), at the price of evaluating
  prompts token by token.

Each variant runs in its own process (a crash is reported as such, not the end of the
benchmark), in alternating rounds (A B C A B C ...), and reports prompt evaluation and
decode speed; the table gives ratios against ``on`` (or the first variant that completed)
measured in the same run.

    .venv/bin/python bench/bench_repack.py [--rounds 3] [--tokens 256] [--prompt-tokens 512]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from _common import (
    alternating_rounds,
    children_cpu_s,
    describe_machine,
    save_samples,
    with_other_load,
)

VARIANTS = {"on": ("on", 512), "off": ("off", 512), "on-ubatch1": ("on", 1)}
PROMPT_TEXT = "Count from 1 to 1000, separated by commas."
FILLER = " ".join(f"Item {i} is stored on shelf {i * 7 % 31}." for i in range(400))


def worker(
    model: str, repack: str, n_ubatch: int, n_tokens: int, prompt_tokens: int
) -> dict[str, object]:
    """In its own process: load, evaluate a prompt of about ``prompt_tokens`` tokens
    (timed), then generate ``n_tokens`` greedily (timed). One JSON line on stdout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import ChatMessage, GenerationDone

    backend = LlamaCppBackend(
        LlamaCppOptions(model_path=Path(model), context_size=4096, n_ubatch=n_ubatch, repack=repack)
    )
    info = backend.load()
    words = FILLER.split()
    text = ""
    # A long prompt (prompt evaluation), then a reply of n_tokens (decode) on a short one.
    long_prompt = [
        ChatMessage("user", " ".join(words[: int(prompt_tokens * 0.6)]) + "\n" + PROMPT_TEXT)
    ]
    done = None
    for event in backend.stream_chat(long_prompt, SamplingParams(temperature=0, max_tokens=1)):
        if isinstance(event, GenerationDone):
            done = event
    assert done is not None
    pp_tokens, pp_ms = done.stats.prompt_tokens_evaluated, done.stats.prompt_eval_ms
    backend.reset()
    for event in backend.stream_chat(
        [ChatMessage("user", PROMPT_TEXT)], SamplingParams(temperature=0, max_tokens=n_tokens)
    ):
        if isinstance(event, GenerationDone):
            done = event
        else:
            text += getattr(event, "text", "")
    backend.close()
    return {
        "repack": info.repack,
        "n_threads": info.n_threads,
        "prompt_tokens": pp_tokens,
        "prompt_tps": pp_tokens / (pp_ms / 1000) if pp_ms else 0.0,
        "completion_tokens": done.stats.completion_tokens,
        "decode_tps": done.stats.decode_tokens_per_s,
    }


@dataclass
class Sample:
    variant: str
    round: int = 0
    other_load: float | None = None
    crashed: str | None = None  # the signal (or exit status) that ended the worker
    repack: str | None = None
    n_threads: int | None = None
    prompt_tokens: int = 0
    prompt_tps: float = 0.0
    completion_tokens: int = 0
    decode_tps: float = 0.0


def run_variant(model: Path, name: str, n_tokens: int, prompt_tokens: int) -> Sample:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        name,
        "--model",
        str(model),
        "--tokens",
        str(n_tokens),
        "--prompt-tokens",
        str(prompt_tokens),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        why = (
            signal.Signals(-out.returncode).name if out.returncode < 0 else f"exit {out.returncode}"
        )
        print(out.stderr[-500:], file=sys.stderr)
        return Sample(name, crashed=why)
    return Sample(name, **json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tokens", type=int, default=256, help="tokens generated per sample (default 256)"
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=512, help="about this many prompt tokens (default 512)"
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--model", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        repack, n_ubatch = VARIANTS[args.worker]
        print(
            json.dumps(worker(str(args.model), repack, n_ubatch, args.tokens, args.prompt_tokens))
        )
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vibechat.engine.llama import repack as rp
    from vibechat.engine.models.starter import starter_model_path

    model = args.model or starter_model_path()
    print(describe_machine())
    info = rp.system_info()
    print(
        f"AMX kernel in this build: {rp.build_has_amx(info)}; AMX on this CPU: "
        f"{bool((rp.cpu_flags() or frozenset()) & rp.AMX_FLAGS)}"
    )

    def sample(name: str) -> Sample:
        return with_other_load(
            lambda: run_variant(model, name, args.tokens, args.prompt_tokens),
            own_cpu_s=children_cpu_s,
        )

    def line(name: str, s: Sample) -> str:
        if s.crashed:
            return f"{name:11} crashed ({s.crashed})"
        return (
            f"{name:11} prompt {s.prompt_tps:7.1f} tok/s ({s.prompt_tokens} tokens)  "
            f"decode {s.decode_tps:6.1f} tok/s ({s.completion_tokens} tokens)  repack={s.repack}"
        )

    samples = alternating_rounds(args.rounds, args.variants, sample, line)
    print()
    print(
        f"{'variant':11} | {'prompt tok/s':>12} | {'decode tok/s':>12} | {'prompt ×':>8} | "
        f"{'decode ×':>8}"
    )
    medians: dict[str, tuple[float, float]] = {}
    for name in args.variants:
        ok = [s for s in samples if s.variant == name and not s.crashed]
        if ok:
            medians[name] = (
                statistics.median(s.prompt_tps for s in ok),
                statistics.median(s.decode_tps for s in ok),
            )
    base = next(iter(medians.values()), None)
    for name in args.variants:
        if name not in medians:
            crashed = next((s.crashed for s in samples if s.variant == name and s.crashed), "?")
            print(f"{name:11} | crashed ({crashed})")
            continue
        pp, tg = medians[name]
        assert base is not None
        print(f"{name:11} | {pp:12.1f} | {tg:12.1f} | {pp / base[0]:8.2f} | {tg / base[1]:8.2f}")
    save_samples(args.json, samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
