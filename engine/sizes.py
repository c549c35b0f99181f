"""Sizes in words: the one byte formatter (memory, limits, files, downloads).

Binary units (KiB, MiB, GiB) for what the machine counts in powers of two (memory, the KV cache,
a limit); ``si=True`` for what the Hub and a download's progress count in powers of ten (kB, MB,
GB, as ``ls --si`` and the Hub's pages do). Whole values are printed whole (a limit reads
"16 MiB"); below 10 units one decimal says the rest."""

from __future__ import annotations

_BINARY = ("bytes", "KiB", "MiB", "GiB", "TiB")
_SI = ("B", "KB", "MB", "GB", "TB")


def human_bytes(n: float, *, si: bool = False) -> str:
    """``n`` bytes in the largest unit it reaches: ``"16 MiB"``, ``"1.5 GiB"``, ``"700 bytes"``;
    ``si``: ``"253.1 MB"`` (always one decimal past bytes, as download sizes are shown)."""
    step, units = (1000, _SI) if si else (1024, _BINARY)
    value = float(n)
    for unit in units:
        if abs(value) < step or unit == units[-1]:
            break
        value /= step
    if unit == units[0]:
        return f"{value:,.0f} {unit}"
    if si:
        return f"{value:.1f} {unit}"
    whole = value == int(value) or abs(value) >= 10 and unit != "GiB" and unit != "TiB"
    return f"{value:,.0f} {unit}" if whole else f"{value:.1f} {unit}"
