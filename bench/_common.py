"""What the benchmarks share: how busy the rest of the machine is, waiting for it to be
quiet, alternating rounds that rerun a disturbed sample, and the machine's description.

On a shared machine (CI runners, laptops with a browser open) figures swing with other
load, so every sample notes how many cores other processes used while it ran; a sample
above ``DISTURBED`` is run again, and the tables warn when one remains."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TypeVar

DISTURBED = 0.15  # cores of other work during a sample that make it suspect


class HasLoad(Protocol):
    round: int
    other_load: float | None


S = TypeVar("S", bound=HasLoad)


def machine_busy_s() -> float | None:
    """CPU seconds all processes have used since boot (Linux), else None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """CPU seconds this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu_s() -> float:
    """CPU seconds this process's finished children have used."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def with_other_load(run: Callable[[], S], own_cpu_s: Callable[[], float] = self_cpu_s) -> S:
    """``run()``'s sample, with ``other_load`` set to the cores other processes used
    meanwhile (``own_cpu_s``: how to count the sample's own CPU time)."""
    busy0, mine0, t0 = machine_busy_s(), own_cpu_s(), time.perf_counter()
    sample = run()
    busy1, mine1, wall = machine_busy_s(), own_cpu_s(), time.perf_counter() - t0
    if busy0 is not None and busy1 is not None and wall > 0:
        sample.other_load = max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / wall)
    return sample


def greedy_reply(backend: Any, messages: Sequence[Any], n_tokens: int) -> Any:
    """The ``GenerationDone`` of a greedy reply of ``n_tokens`` from an empty KV cache
    (so the whole prompt is evaluated every time)."""
    from vibechat.engine.backend import GenerationDone
    from vibechat.engine.params import SamplingParams

    backend.reset()
    done = None
    for event in backend.stream_chat(messages, SamplingParams(temperature=0, max_tokens=n_tokens)):
        if isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return done


def disturbed(sample: HasLoad) -> bool:
    return sample.other_load is not None and sample.other_load > DISTURBED


def load_text(sample: HasLoad) -> str:
    load = "?" if sample.other_load is None else f"{sample.other_load:.2f}"
    return f"other load {load} cores" + ("  DISTURBED" if disturbed(sample) else "")


def wait_for_quiet(limit_s: float) -> None:
    """Wait (at most ``limit_s``) until other processes use less than DISTURBED cores."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        busy0 = machine_busy_s()
        time.sleep(1.0)
        busy1 = machine_busy_s()
        if busy0 is None or busy1 is None or busy1 - busy0 <= DISTURBED:
            return


def alternating_rounds(rounds: int, modes: Sequence[str], sample: Callable[[str], S],
                       describe: Callable[[str, S], str], retries: int = 2, quiet_wait_s: float = 60.0,
                       swap_odd_rounds: bool = False) -> list[S]:
    """``rounds`` rounds of every mode in turn (A B C A B C ...; with ``swap_odd_rounds``
    every other round runs backwards, so no mode always goes first). Before each sample,
    wait for a quiet machine; a disturbed sample is run again up to ``retries`` times.
    Prints a progress line per sample (``describe``) to stderr."""
    samples: list[S] = []
    for r in range(1, rounds + 1):
        order = list(modes)[::-1] if swap_odd_rounds and r % 2 == 0 else list(modes)
        for mode in order:
            for _attempt in range(retries + 1):
                wait_for_quiet(quiet_wait_s)
                s = sample(mode)
                s.round = r
                print(f"[round {r}/{rounds}] {describe(mode, s)}  {load_text(s)}", file=sys.stderr, flush=True)
                if not disturbed(s):
                    break
            samples.append(s)
    return samples


def disturbed_warning(samples: Iterable[HasLoad]) -> str:
    """A line warning of samples that ran on a busy machine ('' when none did)."""
    samples = list(samples)
    bad = [s for s in samples if disturbed(s)]
    if not bad:
        return ""
    return (f"Warning: {len(bad)} of {len(samples)} samples ran while other processes used the CPU: "
            "the figures are suspect, run again on a quiet machine.")


def save_samples(path: Path | None, samples: Sequence[Any], **extra: object) -> None:
    """``--json FILE``: the machine, every sample (dataclasses) and ``extra``, when a path is given."""
    if path is not None:
        data = {"machine": describe_machine(), **extra, "samples": [asdict(s) for s in samples]}
        path.write_text(json.dumps(data, indent=2))


def add_common_args(parser: argparse.ArgumentParser, *, rounds: int, tokens: int) -> None:
    """--rounds, --tokens, --retries, --threads and --json, as every in-process benchmark has them."""
    parser.add_argument("--rounds", type=int, default=rounds, help=f"alternating rounds (default {rounds})")
    parser.add_argument("--tokens", type=int, default=tokens, help=f"tokens to generate (default {tokens})")
    parser.add_argument("--retries", type=int, default=2, help="reruns of a disturbed sample (default 2)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: vibechat's)")
    parser.add_argument("--json", type=Path, default=None, help="also write every sample to this JSON file")


def quiet_logs() -> None:
    """llama.cpp's log goes to the 'vibechat' logger; keep its warnings off the terminal."""
    logger = logging.getLogger("vibechat")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def llama_cpp_python_version() -> str:
    return metadata.version("llama-cpp-python")


def describe_machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}; "
            f"llama-cpp-python {llama_cpp_python_version()}")
