"""The frame every dialog shares: its CSS (``frame``: centred, a thick border; ``modal_css``: a
list dialog's, with its title and the key line that says how to close it docked at the bottom),
and its height on a short terminal.

A dialog on a short terminal (80×24): a dialog screen under ``TALL`` rows has the class
``-short``, where its list shows fewer rows, so that the whole dialog, its status and the key
line stay on screen. Taller, nothing changes."""

from __future__ import annotations

# Rows from which a dialog shows its lists at their full height.
TALL = 32
# A screen's VERTICAL_BREAKPOINTS.
BREAKPOINTS = [(0, "-short"), (TALL, "-tall")]


def frame(
    name: str,
    width: int,
    *,
    height: str = "auto",
    max_height: str | None = None,
    border: str = "primary",
    padding: str = "0 1",
) -> str:
    """The CSS of a dialog's frame: the screen ``name`` centres its ``Vertical``, ``width``
    columns wide (at most 95 % of the terminal), with a thick ``border`` in that theme colour."""
    limit = f"\n    max-height: {max_height};" if max_height else ""
    return f"""
{name} {{
    align: center middle;
}}
{name} > Vertical {{
    width: {width};
    max-width: 95%;
    height: {height};{limit}
    border: thick ${border};
    background: $surface;
    padding: {padding};
}}
"""


def modal_css(name: str) -> str:
    """The CSS of a list dialog (search, rename, export, presets): its frame, its title, and the
    key line that says how to close it, docked at its bottom."""
    return (
        frame(name, 90, max_height="85%")
        + f"""
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
    )
