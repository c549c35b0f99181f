"""How often Textual may draw a changed screen.

Textual draws what changed on a fixed grid of frames, 60 a second by default: a key pressed
just after a frame waits up to 16.7 ms for the next one before it is even drawn. At 120 the
wait is at most 8.3 ms. The chat's frames are not more frequent for it: a streaming reply
renders at the pace its ``RenderPacer`` sets (pacing.py), and an idle screen draws nothing;
the grid only decides how soon a change is drawn. Measured (docs/PERFORMANCE.md, "Speed on
slow CPUs"): keypress to screen while a reply streams at 500 tokens/s, median 3-7 ms against
13-22 ms, worst 32-44 ms against 48-60 ms; the model's decode speed and the chat's CPU while it
streams unchanged.

Textual reads ``TEXTUAL_FPS`` once, when it is imported, so ``use_frame_rate`` runs before
anything imports it (``run_tui``'s first step; the benches do the same). A ``TEXTUAL_FPS`` the
user set is theirs to keep.
"""

from __future__ import annotations

import os

FRAME_RATE = 120


def use_frame_rate() -> None:
    """Textual's frame rate for the chat, unless the user set one (see the module doc)."""
    os.environ.setdefault("TEXTUAL_FPS", str(FRAME_RATE))
