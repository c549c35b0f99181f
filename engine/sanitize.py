"""Neutralise terminal control sequences in untrusted model output.

Model text can contain ESC sequences that a terminal would obey: screen clears,
OSC 8 hyperlinks, OSC 52 clipboard writes, title changes. We drop every C0 control
character except newline and tab, DEL and every C1 control (U+0080..U+009F). The
filter is stateless and per character, so it is safe on arbitrary stream chunks:
a sequence split across two deltas loses its introducer either way, and what
remains of it is inert printable text.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """Return ``text`` with terminal control characters removed (keeps ``\\n`` and ``\\t``).

    A carriage return is dropped too: on its own it lets output overwrite what
    was already printed on the line.
    """
    if text.isprintable():  # fast path: most deltas are plain text
        return text
    return _CONTROL.sub("", text)
