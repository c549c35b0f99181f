"""What the benchmarks share: how busy the rest of the machine is, waiting for it to be
quiet, alternating rounds that rerun a disturbed sample, the machine's description, and
the host's speed (``calibration``) with the chat's speed targets scaled to it.

On a shared machine (CI runners, laptops with a browser open) figures swing with other
load, so every sample notes how many cores other processes used while it ran; a sample
above ``DISTURBED`` is run again, and the tables warn when one remains."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
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
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import GenerationDone

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


def alternating_rounds(
    rounds: int,
    modes: Sequence[str],
    sample: Callable[[str], S],
    describe: Callable[[str, S], str],
    retries: int = 2,
    quiet_wait_s: float = 60.0,
    swap_odd_rounds: bool = False,
) -> list[S]:
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
                print(
                    f"[round {r}/{rounds}] {describe(mode, s)}  {load_text(s)}",
                    file=sys.stderr,
                    flush=True,
                )
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
    return (
        f"Warning: {len(bad)} of {len(samples)} samples ran while other processes used the CPU: "
        "the figures are suspect, run again on a quiet machine."
    )


def save_samples(path: Path | None, samples: Sequence[Any], **extra: object) -> None:
    """``--json FILE``: the machine, every sample (dataclasses) and ``extra``, when a path is
    given."""
    if path is not None:
        data = {"machine": describe_machine(), **extra, "samples": [asdict(s) for s in samples]}
        path.write_text(json.dumps(data, indent=2))


def add_common_args(parser: argparse.ArgumentParser, *, rounds: int, tokens: int) -> None:
    """--rounds, --tokens, --retries, --threads and --json, as every in-process benchmark has
    them."""
    parser.add_argument(
        "--rounds", type=int, default=rounds, help=f"alternating rounds (default {rounds})"
    )
    parser.add_argument(
        "--tokens", type=int, default=tokens, help=f"tokens to generate (default {tokens})"
    )
    parser.add_argument(
        "--retries", type=int, default=2, help="reruns of a disturbed sample (default 2)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: vibechat's)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every sample to this JSON file"
    )


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
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}; "
        f"llama-cpp-python {llama_cpp_python_version()}"
    )


def use_own_dirs() -> Path:
    """Run as a new user's first start: this process (and the ``vibechat`` processes it starts)
    gets its own empty config, data and state folders, removed at exit. The chat then saves what
    it streams as it does by default, into a new history of its own: never the user's, whose
    sidebar a bench would otherwise grow by a conversation a round (and whose config could change
    what is measured). The cache folder stays the user's: the starter is assembled there once."""
    home = Path(tempfile.mkdtemp(prefix="vibechat-bench-"))
    for name in ("CONFIG", "DATA", "STATE"):
        os.environ[f"VIBECHAT_{name}_DIR"] = str(home / name.lower())
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


# ------------------------------------------------------------------ host speed
CALIBRATION_LOOP = "sum(i*i for i in range(10000))"
REFERENCE_US = 974.0  # the loop on the slowest machine the targets were set on (a 2 GHz EPYC)
_TIMEIT = re.compile(r"([0-9.]+) (sec|msec|usec|nsec) per loop")
_UNIT_US = {"sec": 1e6, "msec": 1e3, "usec": 1.0, "nsec": 1e-3}


@dataclass(frozen=True)
class Calibration:
    """The host's speed, as the notes compare machines: ``python3 -m timeit`` of a small
    pure-Python loop (``line``: what timeit printed; ``us``: microseconds per loop, None if
    it printed no figure). The chat's UI work is pure Python on one core, so its costs
    scale with this figure, not with the model's decode speed."""

    line: str
    us: float | None

    @property
    def speed(self) -> float | None:
        """How many times faster than the reference machine (974 µs) this host is."""
        return REFERENCE_US / self.us if self.us else None

    def __str__(self) -> str:
        return f'python3 -m timeit "{CALIBRATION_LOOP}": {self.line}' + (
            f" (×{self.speed:.2f} the {REFERENCE_US:.0f} µs reference)" if self.speed else ""
        )


def calibration() -> Calibration:
    """Run the calibration loop in a fresh interpreter (as the notes do), on this Python."""
    out = subprocess.run(
        [sys.executable, "-m", "timeit", CALIBRATION_LOOP],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = out.stdout.strip() or out.stderr.strip()
    found = _TIMEIT.search(line)
    return Calibration(line, float(found.group(1)) * _UNIT_US[found.group(2)] if found else None)


@dataclass(frozen=True)
class Target:
    """One of the chat's speed targets, as set at the reference speed and as it applies
    here: times scale by µs/974 (a slower host may take longer), rates by 974/µs."""

    name: str
    reference: float  # the target at 974 µs
    value: float  # the target on this host
    unit: str
    at_least: bool  # a rate (the figure must reach it) rather than a time (must stay under)

    def met(self, figure: float) -> bool:
        return figure >= self.value if self.at_least else figure <= self.value

    def verdict(self, figure: float) -> str:
        """``target ≥ 26,000 (10,000 at 974 µs): met`` for a figure."""
        sign = "≥" if self.at_least else "≤"
        return (
            f"target {sign} {fmt(self.value, self.unit)} ({fmt(self.reference, self.unit)} at "
            f"{REFERENCE_US:.0f} µs): {'met' if self.met(figure) else 'NOT met'}"
        )


def fmt(value: float, unit: str) -> str:
    if unit == "tok/s":
        return f"{value:,.0f} {unit}"
    if unit == "s":
        return f"{value:.2f} {unit}"
    return f"{value:.1f} {unit}"


# name: (target at the reference speed, unit, a rate?)
REFERENCE_TARGETS = {
    "absorb": (10_000.0, "tok/s", True),  # a 16,000-token synthetic stream, absorbed by the UI
    "gap": (33.0, "ms", False),  # the worst event-loop gap meanwhile
    "keypress": (
        50.0,
        "ms",
        False,
    ),  # keypress to screen, worst, while a reply streams at 500 tok/s
    "ttft_over_run": (
        10.0,
        "ms",
        False,
    ),  # the chat's TTFT minus `vibechat run`'s (same host: not scaled)
    "first_frame": (0.5, "s", False),  # `vibechat` started to its first frame
    "model_ready": (1.0, "s", False),  # ... to the model ready (the starter)
}
UNSCALED = {"ttft_over_run"}  # a difference between two runs on the same host


def scaled_targets(cal: Calibration) -> dict[str, Target]:
    """The chat's speed targets (issue 26) scaled to this host's calibration (unscaled when
    timeit printed no figure)."""
    factor = cal.us / REFERENCE_US if cal.us else 1.0
    targets = {}
    for name, (reference, unit, at_least) in REFERENCE_TARGETS.items():
        value = (
            reference
            if name in UNSCALED
            else reference / factor
            if at_least
            else reference * factor
        )
        targets[name] = Target(name, reference, value, unit, at_least)
    return targets


def print_calibration(cal: Calibration, names: Iterable[str]) -> dict[str, Target]:
    """Print the machine, the calibration and the targets ``names`` as they apply here;
    returns every scaled target."""
    targets = scaled_targets(cal)
    print(f"Machine: {describe_machine()}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Calibration: {cal}; load average {load:.2f} (other work on the cores slows the loop too)"
    )
    print(
        "Targets here: "
        + "; ".join(
            f"{name} {'≥' if targets[name].at_least else '≤'} "
            f"{fmt(targets[name].value, targets[name].unit)}"
            for name in names
        ),
        flush=True,
    )
    return targets
