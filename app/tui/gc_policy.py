"""Keep Python's full garbage collections short, and out of a streaming reply.

A full collection scans every object the cyclic collector tracks; a chat holds
tens of thousands that live as long as it does (modules, Textual, the widgets of
the layout), and scanning them costs tens of milliseconds: felt as stutter in a
streaming reply or a delayed keypress (docs/PERFORMANCE.md, the TUI section).
``gc.freeze()`` moves everything alive into a permanent generation the collector
skips. The chat does it twice: before it opens (modules and bindings), and once
the model is ready and the first screen is up (the app's long-lived objects), after
the Markdown's warm-up (``hold_startup_freeze``): the modules, lexers and caches it
builds then (~5,000 tracked objects) live as long as the chat too. Frozen before it,
they were left in the young generations, scanned by the collections the first reply's
frames ran, then by every full collection. Should a reply stream by then (a prompt sent
while the model loaded), the freeze collects only the young generations first: a full
collection is what the reply defers (below).
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
resume ``ENDED_S`` after the reply ends (``allow_full_collections``): the one
collection owed then runs while the user reads the reply, not in the turn that draws
its last words (there it was the longest gap of the stream, 40-400 ms). Should a reply
end without saying so, they resume once no render has asked for ``HOLD_S``. The
check runs at the start of any collection (young ones run all the time in a live
app), so it needs no timer.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

# Seconds: full collections resume when no render has deferred them for this long...
HOLD_S = 5.0
# ... and this long after the reply ended.
ENDED_S = 1.0
# The full-collection threshold while deferred: never reached.
DEFERRED = 1 << 30


class _StartupFreeze:
    """The freeze once the model is ready waits while something that lives as long as the chat
    is being built (the Markdown's warm-up, in a worker): held, a freeze asked meanwhile is
    owed, and runs when the hold is released."""

    def __init__(self) -> None:
        self.held = False
        self.owed = False

    def freeze(self) -> None:
        if self.held:
            self.owed = True
            return
        self.owed = False
        # A reply streaming (a prompt sent while the model loaded): no full collection in it
        # (~60 ms at that point); the young generations only, the older garbage frozen with
        # the rest, once (the few cycles left since the freeze before the screen opened).
        gc.collect(1 if full_collections_deferred() else 2)
        gc.freeze()

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False
        if self.owed:
            self.freeze()


_startup_freeze = _StartupFreeze()


def freeze_startup_objects() -> None:
    """Collect once, then move everything alive out of the collector's sight (once the hold,
    if any, is released: ``hold_startup_freeze``)."""
    _startup_freeze.freeze()


def hold_startup_freeze() -> None:
    """The model is ready and the Markdown's warm-up is coming: the freeze waits for it
    (``release_startup_freeze``), so that what it builds is frozen too."""
    _startup_freeze.hold()


def release_startup_freeze() -> None:
    """The warm-up ended: a freeze asked meanwhile runs now."""
    _startup_freeze.release()


class _Deferral:
    """The process's one deferral of full collections (there is one garbage collector)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # The thresholds to restore; None: not deferred.
        self.saved: tuple[int, int, int] | None = None
        # When the deferral lapses unless renewed.
        self.until = 0.0
        self.hooked = False

    def defer(self, hold_s: float = HOLD_S) -> None:
        self.until = self.clock() + hold_s
        if self.saved is None:
            # Once per process: a callback that returns at once when not deferred.
            if not self.hooked:
                gc.callbacks.append(self._on_collection)
                self.hooked = True
            t0, t1, t2 = gc.get_threshold()
            self.saved = (t0, t1, t2)
            gc.set_threshold(t0, t1, DEFERRED)

    def allow(self, after_s: float = 0.0) -> None:
        """Full collections resume now, or at the first collection ``after_s`` from now."""
        if after_s > 0:
            if self.saved is not None:
                self.until = min(self.until, self.clock() + after_s)
            return
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


def allow_full_collections(after_s: float = ENDED_S) -> None:
    """The reply ended: full collections run again, when Python's thresholds say, from
    ``after_s`` on (0: at once)."""
    _deferral.allow(after_s)


def full_collections_deferred() -> bool:
    return _deferral.saved is not None


def full_collections_resume_at() -> float | None:
    """When (``time.monotonic()``) deferred full collections resume (None: not deferred)."""
    return _deferral.until if _deferral.saved is not None else None
