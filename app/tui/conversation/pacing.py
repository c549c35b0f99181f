"""How often a streaming reply re-renders.

Every render costs the UI thread CPU time. When the model's threads already use
every core (llama.cpp's default on most machines), that time is taken from the
model, and because its threads wait for each other at every step, it costs the
model more than the UI's share. So the pacer measures what the UI thread spent
since the last render and spaces renders so the UI stays under ``budget`` of one
core: a fast machine renders up to ``max_hz`` times a second, a slow one less
often, and a machine with a core to spare for the UI renders at ``max_hz``.

A render that costs more than one interval at ``min_hz`` may pay for (a layout of
the whole screen when the view scrolls) leaves the rest as a debt, paid by the
intervals after it: the budget holds on average, not only for cheap renders.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

# Share of one core the UI may use while the model has every core (measured in
# docs/PERFORMANCE.md: about 1 % of decode speed per 1 % of a core; the target is decode
# at >= 0.97x `vibechat run`, so the UI gets 2 %: ~2.2 renders/s of a streaming reply on a
# 2-core host, each a repaint of the lines that changed or, every few lines, a layout that
# scrolls the view and costs more than the 2 renders/s floor pays for: see the debt below).
BUSY_BUDGET = 0.02
FREE_BUDGET = 1.0
# The most a costly render is paid back over: this many intervals at min_hz.
DEBT_INTERVALS = 4


def ui_budget(model_threads: int | None, cores: int) -> float:
    """The UI's share of a core: small when the model's threads fill every core."""
    if model_threads is None or model_threads < cores:
        return FREE_BUDGET
    return BUSY_BUDGET


class RenderPacer:
    def __init__(
        self,
        budget: float = BUSY_BUDGET,
        *,
        max_hz: float = 15.0,
        min_hz: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.budget = budget
        self.min_interval = 1.0 / max_hz
        self.max_interval = 1.0 / min_hz
        self._clock = clock
        self._cpu = cpu
        self._last_at: float | None = None
        self._last_cpu = 0.0
        self._budget_interval = 0.0
        # CPU the UI's work used in other threads (``spent``).
        self._elsewhere = 0.0
        # UI seconds spent beyond the budget and not yet paid for by waiting.
        self.debt = 0.0
        self.interval = self.min_interval

    def spent(self, cpu_s: float) -> None:
        """CPU seconds the UI's work used outside the UI thread (a render's Markdown, drawn in
        a worker thread): counted as the UI thread's own."""
        self._elsewhere += cpu_s

    def wait(self, backlog: bool = False) -> float:
        """Seconds until the next render may run (0: now). ``backlog``: text is arriving
        faster than it renders; then only the CPU budget spaces renders, not ``max_hz``."""
        if self._last_at is None:
            return 0.0
        interval = self._budget_interval if backlog else self.interval
        return max(0.0, self._last_at + interval - self._clock())

    def rendering(self) -> None:
        """A render starts now: the CPU the UI used since the previous one, and what is still
        owed, set the next interval (the next render is taken to cost about as much)."""
        now, cpu = self._clock(), self._cpu() + self._elsewhere
        if self._last_at is not None:
            # Waiting longer than the budget asked (no text came sooner) pays off debt too.
            idle = now - self._last_at - self._budget_interval
            owed = cpu - self._last_cpu + max(0.0, self.debt - self.budget * max(0.0, idle))
            self._budget_interval = min(self.max_interval, owed / self.budget)
            self.debt = min(
                owed - self.budget * self._budget_interval,
                self.budget * self.max_interval * DEBT_INTERVALS,
            )
            self.interval = max(self.min_interval, self._budget_interval)
        self._last_at, self._last_cpu = now, cpu


# The longest the first frame of a sent message waits for the reply's first words.
HOLD_S = 0.1


class _Screen(Protocol):
    def batch_update(self) -> AbstractContextManager[None]: ...
    def set_timer(self, delay: float, callback: Any = None) -> Any: ...


class FrameHold:
    """The screen's next frame waits while the model reads a short prompt.

    Showing a sent message costs the UI a layout of the screen (10-15 ms of CPU while the
    model's threads have every core), and drawn while the model reads the prompt it delays
    the first token by as much. Held until the reply's first words (or an error) arrive, it
    is drawn with them instead; a prompt that takes longer than ``limit_s`` to read (a long
    one, or a slow machine) is shown after ``limit_s``, under a tenth of a second, the
    time a key press takes to feel instant. ``release`` may be called any number of times."""

    def __init__(self, screen: _Screen, limit_s: float | None = None) -> None:
        self._batch = screen.batch_update()
        self._batch.__enter__()
        self.held = True
        screen.set_timer(HOLD_S if limit_s is None else limit_s, self.release)

    def release(self) -> None:
        if self.held:
            self.held = False
            self._batch.__exit__(None, None, None)
