"""GPU offload against the CPU: prompt evaluation and decode speed, same model, same run.

Needs a llama-cpp-python build that can offload (CUDA: ``CMAKE_ARGS="-DGGML_CUDA=on"
python3 dev.py test``; Metal is the default on Apple silicon); on a CPU-only build it
says so in one line and exits 2. The model (the bundled starter model unless
``--model``) is loaded twice in this process: every layer on the GPU
(``gpu_layers=-1``) and none (``0``). Each round both evaluate the same prompt
(``--prompt-tokens``, from an empty cache) and generate greedily, in alternating order;
the figures are vibechat's own statistics (prompt tokens / prompt time; generated tokens
/ time from the end of the prompt to the last token). Medians, and the GPU's speed as the
median of the per-round ratios to the CPU.

Then the whole path, once: ``vibechat run --json`` in a subprocess with
``--n-gpu-layers -1``, which must report the layers on the GPU.

    .venv/bin/python bench/bench_gpu.py [--rounds 5] [--tokens 256] [--prompt-tokens 1000] [--model
M]"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
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
from bench_kvcache import long_prompt

MODES = ("cpu", "gpu")


@dataclass
class Sample:
    mode: str
    round: int
    prompt_tokens: int
    prompt_tps: float
    ttft_ms: float
    completion_tokens: int
    decode_tps: float
    other_load: float | None = None


def one_sample(backend, mode: str, messages, n_tokens: int) -> Sample:
    def run() -> Sample:
        st = greedy_reply(backend, messages, n_tokens).stats
        return Sample(
            mode,
            0,
            st.prompt_tokens_evaluated,
            st.prompt_tokens_evaluated / (st.prompt_eval_ms / 1000),
            st.ttft_ms,
            st.completion_tokens,
            st.decode_tokens_per_s,
        )

    return with_other_load(run)


def whole_path(model: Path) -> str:
    """``vibechat run --json --n-gpu-layers -1``: the device it reports, or why it failed."""
    exe = shutil.which("vibechat", path=str(Path(sys.executable).parent)) or "vibechat"
    out = subprocess.run(
        [
            exe,
            "run",
            "--model",
            str(model),
            "--prompt",
            "Name three colours.",
            "--n-gpu-layers",
            "-1",
            "--temperature",
            "0",
            "--max-tokens",
            "32",
            "--json",
            "--no-save",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if out.returncode != 0:
        return f"FAILED (exit {out.returncode}): {out.stderr.strip()}"
    result = json.loads(out.stdout)
    engine = result.get("engine", {})
    return (
        f"{engine.get('device')}; {result['stats']['completion_tokens']} tokens at "
        f"{result['stats']['decode_tokens_per_s']:.1f} tok/s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=5, tokens=256)
    parser.add_argument(
        "--prompt-tokens", type=int, default=1000, help="prompt length (default ~1000)"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="a .gguf file (default: the starter model)"
    )
    args = parser.parse_args(argv)

    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        print(
            "bench_gpu: this llama-cpp-python build cannot offload to a GPU; rebuild it with "
            'CMAKE_ARGS="-DGGML_CUDA=on" python3 dev.py test (Metal: the default on Apple '
            "silicon).",
            file=sys.stderr,
        )
        return 2

    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions

    quiet_logs()
    model = args.model or starter_model_path()
    n_ctx = max(2048, args.prompt_tokens + args.tokens + 64)
    backends = {
        mode: LlamaCppBackend(
            LlamaCppOptions(
                model_path=model,
                context_size=n_ctx,
                threads=args.threads,
                gpu_layers=-1 if mode == "gpu" else 0,
            )
        )
        for mode in MODES
    }
    infos = {mode: b.load() for mode, b in backends.items()}
    messages = long_prompt(backends["cpu"], args.prompt_tokens)
    print(
        f"model: {model}\nmachine: {describe_machine()}\n"
        f"cpu: {infos['cpu'].device}, {infos['cpu'].n_threads} threads; gpu: "
        f"{infos['gpu'].device}\n"
        f"prompt {backends['cpu'].count_tokens(messages)} tokens, {args.tokens} generated greedily",
        file=sys.stderr,
    )
    if not infos["gpu"].gpu_layers:
        print(
            f"bench_gpu: the model loaded with no layers on the GPU ({infos['gpu'].device}).",
            file=sys.stderr,
        )
        return 1
    samples = alternating_rounds(
        args.rounds,
        MODES,
        lambda mode: one_sample(backends[mode], mode, messages, args.tokens),
        lambda mode, s: (
            f"{mode} prompt {s.prompt_tps:8.1f} tok/s  TTFT {s.ttft_ms:7.1f} ms  "
            f"decode {s.decode_tps:6.1f} tok/s ({s.completion_tokens} tokens)"
        ),
        retries=args.retries,
        swap_odd_rounds=True,
    )
    for backend in backends.values():
        backend.close()

    by = {(s.mode, s.round): s for s in samples}
    rounds = range(1, args.rounds + 1)

    def med(mode: str, attr: str) -> float:
        return statistics.median(getattr(by[(mode, r)], attr) for r in rounds)

    def ratio(attr: str) -> float:
        return statistics.median(
            getattr(by[("gpu", r)], attr) / getattr(by[("cpu", r)], attr) for r in rounds
        )

    print("| device | prompt tok/s | TTFT ms | decode tok/s |")
    print("|---|---|---|---|")
    for mode in MODES:
        print(
            f"| {infos[mode].device} | {med(mode, 'prompt_tps'):.0f} | "
            f"{med(mode, 'ttft_ms'):.0f} | "
            f"{med(mode, 'decode_tps'):.1f} |"
        )
    print(
        f"| GPU × CPU | {ratio('prompt_tps'):.2f} | {ratio('ttft_ms'):.2f} | "
        f"{ratio('decode_tps'):.2f} |"
    )
    if warning := disturbed_warning(samples):
        print(warning)
    print(f"\nvibechat run --n-gpu-layers -1: {whole_path(model)}")
    save_samples(args.json, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
