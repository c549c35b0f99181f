"""Dialogs on a short terminal (80×24): a dialog screen under ``TALL`` rows has the class
``-short``, where its list shows fewer rows, so that the whole dialog, its status and the key
line that says how to close it (docked at its bottom) stay on screen. Taller, nothing changes."""

from __future__ import annotations

TALL = 32  # rows from which a dialog shows its lists at their full height
BREAKPOINTS = [(0, "-short"), (TALL, "-tall")]  # a screen's VERTICAL_BREAKPOINTS
