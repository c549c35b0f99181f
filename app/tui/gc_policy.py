"""Keep Python's full garbage collections short while a reply streams.

A full collection scans every object the cyclic collector tracks; a chat holds
tens of thousands that live as long as it does (modules, Textual, the widgets of
the layout), and scanning them costs tens of milliseconds: felt as stutter in a
streaming reply or a delayed keypress (docs/PERFORMANCE.md, the TUI section).
``gc.freeze()`` moves everything alive into a permanent generation the collector
skips. The chat does it twice: before it opens (modules and bindings), and once
the model is ready and the first screen is up (the app's long-lived objects).
Freezing per reply would keep whatever is removed later out of cyclic collection,
so it is done only for what lives as long as the chat.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect once, then move everything alive out of the collector's sight."""
    gc.collect()
    gc.freeze()
