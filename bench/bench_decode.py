"""Decode speed: ``vibechat run`` against llama-cpp-python's defaults and native llama.cpp.

Three variants generate the same number of tokens from the same prompt on the
bundled starter model, greedily (temperature 0), in alternating rounds within
one run (A B C A B C ...), so that load on a shared machine hits all of them:

* ``vibechat``  -- ``vibechat run --prompt P --temperature 0 --max-tokens N --json``
  in a subprocess; its own ``stats.decode_tokens_per_s`` and ``stats.ttft_ms``.
* ``python-default`` -- llama-cpp-python's high-level streaming API with the
  library's defaults (``Llama(path, n_ctx=2048, verbose=False)``,
  ``create_completion(..., temperature=0, stream=True)``), timed here, one
  subprocess per round.
* ``native`` -- ``llama-completion`` built from the llama.cpp sources that the
  installed llama-cpp-python vendors, with llama.cpp's own defaults; figures from
  its own timers.

The native binary is built on first use (CMake, Release, CPU only, ``-j2``) into
``~/.cache/vibechat-bench/llama.cpp-<llama-cpp-python version>/`` and reused
afterwards. Each sample notes how much CPU other processes used meanwhile; a
disturbed sample is run again (``--retries``), and the table warns if any remain.

    .venv/bin/python bench/bench_decode.py [--rounds 3] [--tokens 256 1500] [--skip-native]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _common import (
    DISTURBED,
    alternating_rounds,
    children_cpu_s,
    describe_machine,
    disturbed,
    llama_cpp_python_version,
    with_other_load,
)

# A prompt for which the starter model (a tiny base model) keeps writing numbered
# lines instead of ending its turn, so every variant really generates N tokens.
USER_PROMPT = "Count from 1 to 1000, separated by commas."
# The same text as vibechat's Gemma chat template renders it (the starter GGUF has
# no template of its own). The other variants get this string; llama.cpp and
# llama-cpp-python add the BOS token and parse the turn markers as special tokens,
# so all three evaluate the same prompt tokens (the table shows the counts).
GEMMA_PROMPT = f"<start_of_turn>user\n{USER_PROMPT}<end_of_turn>\n<start_of_turn>model\n"

NATIVE_TARGET = "llama-completion"
VARIANTS = ("vibechat", "python-default", "native")
TARGET_RATIO = 0.95


@dataclass
class Sample:
    """One generation: what a variant reports for one round."""

    variant: str
    n_tokens: int  # requested
    completion_tokens: int
    prompt_tokens: int
    decode_tps: float
    ttft_ms: float
    threads: int | None = None
    extra: dict[str, object] = field(default_factory=dict)
    round: int = 0
    other_load: float | None = None  # CPU cores busy with other processes meanwhile


def run_checked(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` capturing its output; on failure stop with the end of its stderr."""
    out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise SystemExit(f"{Path(cmd[0]).name} exited with {out.returncode}:\n{out.stderr[-3000:]}")
    return out


# --------------------------------------------------------------------- native build
def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vibechat-bench" / f"llama.cpp-{llama_cpp_python_version()}"


def native_binary(root: Path) -> Path:
    return root / "build" / "bin" / NATIVE_TARGET


def fetch_sdist(root: Path, sdist: Path | None) -> Path:
    """The llama-cpp-python source archive: ``--sdist``, a cached one, or ``pip download``."""
    if sdist is not None:
        return sdist
    version = llama_cpp_python_version()
    dest = root / "sdist"
    found = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    print(
        f"[build] downloading the llama-cpp-python {version} source distribution", file=sys.stderr
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(dest),
            f"llama-cpp-python=={version}",
        ],
        check=True,
    )
    found = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"pip download left no llama_cpp_python-{version}.tar.gz in {dest}")
    return found[0]


def unpack_vendored_llama_cpp(archive: Path, src: Path) -> None:
    """Extract only ``vendor/llama.cpp/`` of the sdist into ``src`` (atomically)."""
    tmp = Path(tempfile.mkdtemp(prefix="src-", dir=src.parent))
    try:
        with tarfile.open(archive) as tar:
            # Files and folders only; leave out the submodule's ``.git`` pointer file.
            members = [
                m
                for m in tar.getmembers()
                if "/vendor/llama.cpp/" in m.name
                and (m.isfile() or m.isdir())
                and not m.name.endswith("/.git")
            ]
            if not members:
                raise SystemExit(f"{archive} holds no vendor/llama.cpp/")
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(tmp, members=members, filter="data")
            else:
                tar.extractall(tmp, members=members)
        (vendored,) = tmp.glob("*/vendor/llama.cpp")
        vendored.rename(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_native(root: Path, sdist: Path | None = None, jobs: int = 2) -> Path:
    """Build ``llama-completion`` (Release, CPU only) unless it is already there."""
    binary = native_binary(root)
    if binary.exists():
        return binary
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"building native llama.cpp needs {' and '.join(missing)} "
            "(e.g. apt-get install cmake g++), or pass --skip-native"
        )
    root.mkdir(parents=True, exist_ok=True)
    src = root / "src"
    if not (src / "CMakeLists.txt").exists():
        shutil.rmtree(src, ignore_errors=True)
        unpack_vendored_llama_cpp(fetch_sdist(root, sdist), src)
    build = root / "build"
    print(
        f"[build] building {NATIVE_TARGET} in {build} (a few minutes on 2 cores)", file=sys.stderr
    )
    subprocess.run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_SHARED_LIBS=OFF",
            "-DGGML_NATIVE=ON",  # as llama-cpp-python's own source build does
            "-DGGML_CUDA=OFF",
            "-DGGML_METAL=OFF",
            "-DGGML_VULKAN=OFF",
            "-DGGML_BLAS=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_APP=OFF",
        ],
        check=True,
    )
    subprocess.run(
        [
            "cmake",
            "--build",
            str(build),
            "--config",
            "Release",
            f"-j{jobs}",
            "--target",
            NATIVE_TARGET,
        ],
        check=True,
    )
    if not binary.exists():
        raise SystemExit(f"the build finished but {binary} is missing")
    return binary


# ------------------------------------------------------------------------ variants
def vibechat_command() -> list[str]:
    exe = Path(sys.executable).with_name("vibechat")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("vibechat")
    if found:
        return [found]
    return [sys.executable, "-m", "vibechat.app.commands.cli"]


def run_vibechat(model: Path, n_tokens: int, repack: str = "auto") -> Sample:
    cmd = [
        *vibechat_command(),
        "run",
        "--model",
        str(model),
        "--prompt",
        USER_PROMPT,
        "--temperature",
        "0",
        "--max-tokens",
        str(n_tokens),
        "--json",
        "--stats",
        "--repack",
        repack,
    ]
    out = run_checked(cmd)
    data = json.loads(out.stdout)
    stats = data["stats"]
    threads = re.search(r"(\d+) threads?\b", out.stderr)  # from --stats, which goes to stderr
    return Sample(
        "vibechat",
        n_tokens,
        stats["completion_tokens"],
        stats["prompt_tokens"],
        stats["decode_tokens_per_s"],
        stats["ttft_ms"],
        int(threads.group(1)) if threads else None,
        extra={"finish_reason": data["finish_reason"]},
    )


def python_default_worker(
    model: str, prompt: str, n_tokens: int, repack: bool = True
) -> dict[str, object]:
    """Runs in its own process: the high-level streaming API, library defaults (``repack``
    False: extra buffer types off, which ``Llama`` has no argument for).

    TTFT: from the ``create_completion`` call to the first streamed text.
    Decode: streamed tokens after the first, over the time from the first to the last.
    """
    from llama_cpp import Llama

    if not repack:
        import llama_cpp.llama_cpp as c

        default_params = c.llama_model_default_params

        def no_repack():
            params = default_params()
            params.use_extra_bufts = False
            return params

        c.llama_model_default_params = no_repack
    llm = Llama(model_path=model, n_ctx=2048, verbose=False)
    prompt_tokens = len(llm.tokenize(prompt.encode("utf-8"), special=True))
    stamps: list[float] = []
    finish = None
    t0 = time.perf_counter()
    for chunk in llm.create_completion(prompt, max_tokens=n_tokens, temperature=0, stream=True):
        choice = chunk["choices"][0]
        if choice["text"]:
            stamps.append(time.perf_counter())
        finish = choice["finish_reason"] or finish
    # The KV cache holds the prompt and the generated tokens; when max_tokens ends the
    # reply, the last one is never evaluated (an end-of-generation token is never counted).
    completion = llm.n_tokens - prompt_tokens + (1 if finish == "length" else 0)
    threads = llm.context_params.n_threads
    llm.close()
    decode_tps = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    return {
        "completion_tokens": completion,
        "prompt_tokens": prompt_tokens,
        "decode_tps": decode_tps,
        "ttft_ms": (stamps[0] - t0) * 1000 if stamps else 0.0,
        "threads": threads,
        "finish_reason": finish,
        "chunks": len(stamps),
    }


def run_python_default(model: Path, n_tokens: int, repack: bool = True) -> Sample:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--python-worker",
        "--model",
        str(model),
        "--tokens",
        str(n_tokens),
        "--repack",
        "on" if repack else "off",
    ]
    out = run_checked(cmd)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return Sample(
        "python-default",
        n_tokens,
        data.pop("completion_tokens"),
        data.pop("prompt_tokens"),
        data.pop("decode_tps"),
        data.pop("ttft_ms"),
        data.pop("threads"),
        extra=data,
    )


_PERF = {
    "sampling_ms": r"sampling time =\s*([\d.]+) ms",
    "prompt_ms": r"prompt eval time =\s*([\d.]+) ms",
    "prompt_tokens": r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens",
    "eval_ms": r"\beval time =\s*([\d.]+) ms /\s*\d+ runs",
    "eval_runs": r"\beval time =\s*[\d.]+ ms /\s*(\d+) runs",
    "threads": r"n_threads = (\d+)",
}


def parse_native_log(log: str) -> dict[str, float]:
    """The figures of llama.cpp's ``common_perf_print`` (and the thread count)."""
    values = {}
    for key, pattern in _PERF.items():
        matches = re.findall(pattern, log)
        if not matches:
            raise ValueError(f"no '{key}' in llama-completion's output:\n{log[-2000:]}")
        values[key] = float(matches[-1])
    return values


def run_native(binary: Path, model: Path, n_tokens: int, repack: bool = True) -> Sample:
    """``llama-completion`` with its defaults (threads, context, flash attention auto,
    sampler chain), greedy, end-of-generation ignored so that it writes exactly N tokens.

    From its own timers: it evaluates every generated token but the last, so
    tokens = eval runs + 1; one sampling step = sampling time / tokens;
    TTFT = prompt evaluation + one sampling step; decode tokens/s = 1 / (one
    evaluation + one sampling step) -- the work per token that vibechat's wall-clock
    decode figure covers, without any console or bookkeeping overhead.
    """
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-p",
        GEMMA_PROMPT,
        "-n",
        str(n_tokens),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "--no-display-prompt",
        *([] if repack else ["--no-repack"]),
    ]
    out = run_checked(cmd)
    perf = parse_native_log(out.stdout + out.stderr)
    runs = max(int(perf["eval_runs"]), 1)
    generated = runs + 1
    sample_ms = perf["sampling_ms"] / generated
    per_token_ms = perf["eval_ms"] / runs + sample_ms
    return Sample(
        "native",
        n_tokens,
        generated,
        int(perf["prompt_tokens"]),
        1000 / per_token_ms,
        perf["prompt_ms"] + sample_ms,
        int(perf["threads"]),
        extra={"eval_only_tps": 1000 * runs / perf["eval_ms"], "sample_ms": sample_ms},
    )


# ------------------------------------------------------------------------- driver
def measured(runner: Callable[[int], Sample], n_tokens: int) -> Sample:
    """Run one sample (in subprocesses) and note how busy the rest of the machine was."""
    return with_other_load(lambda: runner(n_tokens), own_cpu_s=children_cpu_s)


def run_rounds(
    model: Path,
    native: Path | None,
    token_counts: list[int],
    rounds: int,
    retries: int = 2,
    quiet_wait_s: float = 60.0,
    repack: str = "auto",
) -> list[Sample]:
    """Every length: rounds of all variants in turn (A B C A B C ...). A sample during
    which other processes kept the CPU busy is run again (up to ``retries`` times).
    ``repack``: vibechat's --repack; the other two use what it resolves to on this machine."""
    on = resolved_repack(repack)
    runners = {
        "vibechat": lambda n: run_vibechat(model, n, repack),
        "python-default": lambda n: run_python_default(model, n, on),
    }
    if native is not None:
        runners["native"] = lambda n: run_native(native, model, n, on)
    samples: list[Sample] = []
    for n_tokens in token_counts:
        samples += alternating_rounds(
            rounds,
            list(runners),
            lambda name, n_tokens=n_tokens: measured(runners[name], n_tokens),
            lambda name, s, n_tokens=n_tokens: (
                f"N={n_tokens} {name:15} {s.decode_tps:6.1f} tok/s  TTFT {s.ttft_ms:6.1f} ms  "
                f"{s.completion_tokens} tokens  threads={s.threads}"
            ),
            retries=retries,
            quiet_wait_s=quiet_wait_s,
        )
    return samples


def resolved_repack(setting: str) -> bool:
    """Whether ``--repack setting`` loads with extra buffer types here (a cached probe verdict
    counts; without one, auto on an AMX machine means off)."""
    from vibechat.engine.llama import repack as rp
    from vibechat.engine.paths import cache_dir

    info = rp.system_info()
    key = rp.probe_key(info, llama_cpp_python_version())
    found = rp.cached_verdict(cache_dir() / rp.VERDICT_FILE, key)
    return rp.decide_repack(setting, info, rp.cpu_flags(), lambda: (found, False)).extra_buffers


def summarise(samples: list[Sample], token_counts: list[int]) -> list[dict[str, object]]:
    """Per length and variant: medians over the rounds, and the decode speed against
    native llama.cpp both as a ratio of medians and as the median of the ratios
    within each round (robust to load that drifts between rounds)."""
    rows = []
    for n_tokens in token_counts:
        native = {s.round: s for s in samples if s.variant == "native" and s.n_tokens == n_tokens}
        native_median = statistics.median(s.decode_tps for s in native.values()) if native else None
        for variant in VARIANTS:
            group = [s for s in samples if s.variant == variant and s.n_tokens == n_tokens]
            if not group:
                continue
            decode = statistics.median(s.decode_tps for s in group)
            paired = [s.decode_tps / native[s.round].decode_tps for s in group if s.round in native]
            rows.append(
                {
                    "n_tokens": n_tokens,
                    "variant": variant,
                    "decode_tps": decode,
                    "decode_range": (
                        min(s.decode_tps for s in group),
                        max(s.decode_tps for s in group),
                    ),
                    "ttft_ms": statistics.median(s.ttft_ms for s in group),
                    "vs_native": decode / native_median if native_median else None,
                    "vs_native_paired": statistics.median(paired) if paired else None,
                    "completion_tokens": sorted({s.completion_tokens for s in group}),
                    "prompt_tokens": sorted({s.prompt_tokens for s in group}),
                    "threads": sorted({s.threads for s in group if s.threads is not None}),
                    "rounds": len(group),
                    "disturbed": sum(1 for s in group if disturbed(s)),
                }
            )
    return rows


def _ints(values: list[int]) -> str:
    return ",".join(map(str, values)) or "–"


def _ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "–"


def format_table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| N | variant | decode tok/s, median (min–max) | TTFT ms, median | × native (of medians) "
        "| × native (per round, median) | tokens generated | prompt tokens | threads |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = r["decode_range"]
        lines.append(
            f"| {r['n_tokens']} | {r['variant']} | {r['decode_tps']:.1f} ({low:.1f}–{high:.1f}) "
            f"| {r['ttft_ms']:.0f} | {_ratio(r['vs_native'])} | {_ratio(r['vs_native_paired'])} "
            f"| {_ints(r['completion_tokens'])} | {_ints(r['prompt_tokens'])} | "
            f"{_ints(r['threads'])} |"
        )
    lines.append("")
    disturbed = sum(r["disturbed"] for r in rows)
    if disturbed:
        lines.append(
            f"WARNING: other processes used > {DISTURBED} cores during {disturbed} of "
            f"{sum(r['rounds'] for r in rows)} samples: the figures are suspect, run again on a "
            "quiet machine."
        )
    for r in rows:
        if r["variant"] == "vibechat" and r["vs_native"] is not None:
            verdict = "meets" if r["vs_native"] >= TARGET_RATIO else "MISSES"
            python = next(
                (
                    x
                    for x in rows
                    if x["n_tokens"] == r["n_tokens"] and x["variant"] == "python-default"
                ),
                None,
            )
            lines.append(
                f"N={r['n_tokens']}: vibechat/native = {r['vs_native']:.2f} ({verdict} the >= "
                f"{TARGET_RATIO} target; per-round median {r['vs_native_paired']:.2f})"
                + (f"; python-default/native = {python['vs_native']:.2f}" if python else "")
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds per length (default 3)"
    )
    parser.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=[256, 1500],
        help="tokens to generate, one or more lengths (default 256 1500)",
    )
    parser.add_argument("--skip-native", action="store_true", help="leave out native llama.cpp")
    parser.add_argument(
        "--sdist",
        type=Path,
        default=None,
        help="llama-cpp-python sdist (.tar.gz) to build from instead of 'pip download'",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="runs again a sample during which other processes used the CPU (default 2)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every sample to this JSON file"
    )
    parser.add_argument(
        "--repack",
        choices=("auto", "on", "off"),
        default="auto",
        help="vibechat's --repack; python-default and native load the same way (default auto)",
    )
    parser.add_argument("--model", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--python-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.python_worker:
        print(
            json.dumps(
                python_default_worker(
                    str(args.model), GEMMA_PROMPT, args.tokens[0], args.repack != "off"
                )
            )
        )
        return 0
    from vibechat.engine.models.starter import starter_model_path

    model = args.model or starter_model_path()
    native = None if args.skip_native else build_native(cache_root(), args.sdist)
    print(
        f"model: {model}\nnative: {native or 'skipped'}\nmachine: {describe_machine()}",
        file=sys.stderr,
    )
    print(
        f"repack: {args.repack} ({'on' if resolved_repack(args.repack) else 'off'} here)",
        file=sys.stderr,
    )
    samples = run_rounds(
        model, native, args.tokens, args.rounds, retries=args.retries, repack=args.repack
    )
    rows = summarise(samples, args.tokens)
    print(format_table(rows))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": describe_machine(),
                    "rows": rows,
                    "samples": [asdict(s) for s in samples],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
