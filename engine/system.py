"""Facts about this machine that tuning depends on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def available_cores() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def physical_cores() -> int | None:
    """Physical (performance) cores, the way llama.cpp counts them."""
    system = platform.system()
    if system == "Linux":
        siblings: set[str] = set()
        cpu = 0
        while True:
            path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings")
            try:
                siblings.add(path.read_text().strip())
            except OSError:
                break
            cpu += 1
        return len(siblings) or None
    if system == "Darwin":
        for key in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):
            try:
                out = subprocess.run(
                    ["sysctl", "-n", key], capture_output=True, text=True, timeout=2
                )
                value = int(out.stdout.strip())
                if value > 0:
                    return value
            except (OSError, ValueError, subprocess.SubprocessError):
                continue
        return None
    return None


def default_threads() -> int:
    """Threads for generation: physical performance cores within this process's CPU
    affinity (llama.cpp's own default), at least 1.

    llama-cpp-python's default is ``cpu_count() // 2``, which on a 2-vCPU machine
    is a single thread and costs about a third of the decode speed.
    """
    available = available_cores()
    physical = physical_cores()
    if physical is None:
        logical = os.cpu_count() or 1
        physical = logical if logical <= 4 else logical // 2
    return max(1, min(physical, available))


def available_memory() -> int | None:
    """Bytes of memory available for a new model (None when this OS does not say)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if platform.system() == "Darwin":
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=2).stdout
            free = sum(
                int(line.split(":")[1].strip().rstrip("."))
                for line in out.splitlines()
                if line.startswith(
                    ("Pages free", "Pages inactive", "Pages speculative", "Pages purgeable")
                )
            )
            return free * page
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return None
    return None


def gpu_free_memory() -> int | None:
    """Free memory of the first NVIDIA GPU, from nvidia-smi (None without one). Apple
    GPUs share the system memory, which ``available_memory`` already counts."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        return int(out.stdout.split()[0]) * 1024 * 1024 if out.returncode == 0 else None
    except (ValueError, IndexError):
        return None
