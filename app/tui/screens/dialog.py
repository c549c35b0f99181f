"""The frame every dialog shares: its CSS (``MODAL_CSS``: centred, a thick border, a title, the
key line that says how to close it docked at the bottom), and its height on a short terminal.

A dialog on a short terminal (80×24): a dialog screen under ``TALL`` rows has the class
``-short``, where its list shows fewer rows, so that the whole dialog, its status and the key
line stay on screen. Taller, nothing changes."""

from __future__ import annotations

TALL = 32  # rows from which a dialog shows its lists at their full height
BREAKPOINTS = [(0, "-short"), (TALL, "-tall")]  # a screen's VERTICAL_BREAKPOINTS


# The dialog's frame: ``MODAL_CSS.format(name="TheScreen")``.
MODAL_CSS = """
{name} {{
    align: center middle;
}}
{name} > Vertical {{
    width: 90;
    max-width: 95%;
    height: auto;
    max-height: 85%;
    border: thick $primary;
    background: $surface;
    padding: 0 1;
}}
{name} .modal--title {{
    text-style: bold;
    color: $primary;
    padding: 0 0 1 0;
}}
{name} .modal--keys {{
    color: $text-muted;
    padding: 1 0 0 0;
    dock: bottom;
}}
"""
