"""The token lens's cost (issue 43, point 1): decode speed on the starter with the lens off, on at
N candidates (default 10), and with the engine as it was before the lens (``--baseline``, a git
revision: its engine/ and app/ extracted with ``git archive`` into a temporary tree and imported
from there), in alternating rounds within one run (before, off, on, before, off, on, ...).

Each sample is a fresh process (``--child``): the model loaded in process (no engine process,
no pipes), one short warm-up reply, then one timed reply of ``--tokens`` tokens from an empty
KV cache, sampled (temperature 0.8, top-k 40, the seed fixed) from a prompt the starter keeps
answering; its figure is the reply's own ``decode_tokens_per_s``. The table shows each mode's
median and range and its ratio to ``before`` (the issue's bounds: off ≥ 0.99×, on ≥ 0.90×), and
the lens's own CPU time per token (its thread's CPU time, which other processes' load does not
inflate as much as wall time: the figure to trust on a busy machine).

    .venv/bin/python bench/bench_lens.py [--rounds 3] [--tokens 256] [--n 10] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from _common import alternating_rounds, children_cpu_s, describe_machine, with_other_load

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Count from 1 to 1000, separated by commas."
MODES = ("before", "off", "on")


@dataclass
class Sample:
    mode: str
    tokens_per_s: float = 0.0
    tokens: int = 0
    # The lens's own CPU time per token (mode "on"), in milliseconds.
    lens_ms: float | None = None
    round: int = 0
    other_load: float | None = None


def child(mode: str, tokens: int, n: int, threads: int | None) -> None:
    """One sample, in this process: prints its JSON line."""
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import ChatMessage, GenerationDone

    # The Gemma turn format: the starter keeps counting (its completion frame ends early).
    options = {"model_path": starter_model_path(), "context_size": 4096, "prompt_format": "gemma"}
    if threads:
        options["threads"] = threads
    backend = LlamaCppBackend(LlamaCppOptions(**options))
    backend.load()
    params = SamplingParams(temperature=0.8, top_k=40, seed=1, max_tokens=tokens)
    if mode == "on":
        params = params.replace(logprobs=n)
    messages = [ChatMessage("user", PROMPT)]
    spent = [0.0] if mode == "on" else None
    if spent is not None:
        # The lens's own time: CPU seconds of this thread (the decode loop's), load-proof.
        from vibechat.engine.llama import lens

        observe, step = lens.LensSampler._observe, lens._Step.candidates

        def timed(fn):
            def wrapper(*args, **kwargs):
                t0 = time.thread_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    spent[0] += time.thread_time() - t0

            return wrapper

        lens.LensSampler._observe = timed(observe)
        lens._Step.candidates = timed(step)
    done = None
    for max_tokens in (16, tokens):
        if spent is not None:
            spent[0] = 0.0
        backend.reset()
        for event in backend.stream_chat(messages, params.replace(max_tokens=max_tokens)):
            if isinstance(event, GenerationDone):
                done = event
    assert done is not None
    backend.close()
    n_tokens = done.stats.completion_tokens
    lens_ms = spent[0] * 1000 / max(n_tokens, 1) if spent is not None else None
    print(
        json.dumps({"tps": done.stats.decode_tokens_per_s, "tokens": n_tokens, "lens_ms": lens_ms})
    )


def baseline_tree(rev: str, into: Path) -> Path:
    """A tree where ``vibechat.engine`` and ``vibechat.app`` are those of ``rev``."""
    data = subprocess.run(
        ["git", "archive", rev, "engine", "app", "themes"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    src = into / "src"
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(src, filter="data")
    package = into / "tree" / "vibechat"
    package.mkdir(parents=True)
    for name in ("engine", "app", "themes"):
        (package / name).symlink_to(src / name)
    return into / "tree"


def sample(mode: str, args: argparse.Namespace, tree: Path) -> Sample:
    env = dict(os.environ)
    if mode == "before":
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, __file__, "--child", mode, "--tokens", str(args.tokens)]
    command += ["--n", str(args.n)] + (["--threads", str(args.threads)] if args.threads else [])

    def run() -> Sample:
        out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return Sample(mode, got["tps"], got["tokens"], got["lens_ms"])

    return with_other_load(run, children_cpu_s)


def table(samples: list[Sample], n: int) -> str:
    by_mode = {m: [s.tokens_per_s for s in samples if s.mode == m] for m in MODES}
    base = statistics.median(by_mode["before"])
    label = {"before": "before the lens", "off": "lens off", "on": f"lens on, N = {n}"}
    lines = ["| engine | decode tok/s (median) | range | × before |", "| --- | ---: | --- | ---: |"]
    for mode in MODES:
        values = by_mode[mode]
        med = statistics.median(values)
        lines.append(
            f"| {label[mode]} | {med:.1f} | {min(values):.1f}–{max(values):.1f} | "
            f"{med / base:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--n", type=int, default=10, help="candidates per token (default 10)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--baseline", default="main", help="the engine before the lens: a git revision"
    )
    parser.add_argument("--quiet-wait", type=float, default=5.0, help="seconds to wait for quiet")
    parser.add_argument("--retries", type=int, default=1, help="reruns of a disturbed sample")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.tokens, args.n, args.threads)
        return
    rev = subprocess.run(
        ["git", "merge-base", "HEAD", args.baseline],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = baseline_tree(rev, Path(tmp))
        samples = alternating_rounds(
            args.rounds,
            MODES,
            lambda mode: sample(mode, args, tree),
            lambda mode, s: f"{mode}: {s.tokens_per_s:.1f} tok/s ({s.tokens} tokens)",
            retries=args.retries,
            quiet_wait_s=args.quiet_wait,
        )
    print(f"{describe_machine()}; before = {rev[:10]}; {args.tokens} tokens, {args.rounds} rounds")
    print(table(samples, args.n))
    lens_ms = [s.lens_ms for s in samples if s.lens_ms is not None]
    tps_on = statistics.median(s.tokens_per_s for s in samples if s.mode == "on")
    if lens_ms:
        med = statistics.median(lens_ms)
        print(
            f"the lens's own CPU time: {med:.2f} ms a token (median; "
            f"{min(lens_ms):.2f}–{max(lens_ms):.2f}), {med * tps_on / 10:.1f} % of a token's "
            "time at the measured speed with the lens on"
        )
    loads = [s.other_load for s in samples if s.other_load is not None]
    if loads:
        print(f"other processes' load during the samples: {min(loads):.2f}–{max(loads):.2f} cores")


if __name__ == "__main__":
    main()
