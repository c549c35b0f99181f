"""Keep Python's full garbage collections short, and out of a streaming reply.

A full collection scans every object the cyclic collector tracks; a chat holds
tens of thousands that live as long as it does (modules, Textual, the widgets of
the layout), and scanning them costs tens of milliseconds: felt as stutter in a
streaming reply or a delayed keypress (docs/PERFORMANCE.md, the TUI section).
``gc.freeze()`` moves everything alive into a permanent generation the collector
skips. The chat does it twice: before it opens (modules and bindings), and once
the model is ready and the first screen is up (the app's long-lived objects).
Freezing per reply would keep whatever is removed later out of cyclic collection,
so it is done only for what lives as long as the chat.

What a reply adds after that (its segments, Textual's strips and layout caches:
about 55,000 tracked objects at 16,000 tokens) is still scanned by every full
collection, and Python runs one each time the objects that survived since the last
one grow by a quarter: seven during a 16,000-token reply, the last ones 25-110 ms
each, the worst event-loop gaps of the stream (docs/PERFORMANCE.md, "Speed on slow
CPUs"). So while a reply streams, full collections wait (``defer_full_collections``,
called at every render): the young generations are still collected, as often as
before, so garbage that is not in a cycle with old objects goes at once. They
resume when the reply ends (``allow_full_collections``) or, should a reply end
without saying so, once no render has asked for ``HOLD_S`` (the check runs at the
start of any collection, so it needs no timer).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

HOLD_S = 5.0  # full collections resume when no render has deferred them for this long
DEFERRED = 1 << 30  # the full-collection threshold while deferred: never reached


def freeze_startup_objects() -> None:
    """Collect once, then move everything alive out of the collector's sight."""
    gc.collect()
    gc.freeze()


class _Deferral:
    """The process's one deferral of full collections (there is one garbage collector)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.saved: tuple[int, int, int] | None = None  # the thresholds to restore; None: not deferred
        self.until = 0.0  # when the deferral lapses unless renewed
        self.hooked = False

    def defer(self) -> None:
        self.until = self.clock() + HOLD_S
        if self.saved is None:
            if not self.hooked:  # once per process: a callback that returns at once when not deferred
                gc.callbacks.append(self._on_collection)
                self.hooked = True
            t0, t1, t2 = gc.get_threshold()
            self.saved = (t0, t1, t2)
            gc.set_threshold(t0, t1, DEFERRED)

    def allow(self) -> None:
        saved, self.saved = self.saved, None
        if saved is not None:
            gc.set_threshold(*saved)

    def _on_collection(self, phase: str, info: dict) -> None:
        if phase == "start" and self.saved is not None and self.clock() > self.until:
            self.allow()


_deferral = _Deferral()


def defer_full_collections() -> None:
    """A reply is streaming: full collections wait until it ends (or for ``HOLD_S``)."""
    _deferral.defer()


def allow_full_collections() -> None:
    """The reply ended: full collections run again when Python's thresholds say."""
    _deferral.allow()


def full_collections_deferred() -> bool:
    return _deferral.saved is not None
