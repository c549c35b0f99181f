"""What copying says: where the text went, and, where that is known not to reach the
clipboard by itself, what to change.

The chat copies through the terminal: an OSC 52 escape sequence asks the terminal to put
the text on the system clipboard (it works over SSH). Whether it lands is up to the
terminal, and vibechat cannot ask: most terminals take it (kitty, WezTerm, iTerm2,
Alacritty, foot, Windows Terminal), some never do (GNOME Terminal and the other VTE
terminals, macOS Terminal), and tmux drops it under its default ``set-clipboard external``.
So the message says "sent to the terminal" and names the fix where the environment tells
us enough, instead of claiming a copy that may not have happened. Inside tmux, tmux itself
is asked (``tmux_set_clipboard``: ``tmux show -gv set-clipboard``, bounded by
``TMUX_ASK_S``, off the UI thread): its fix is named only when the setting is not ``on``
or tmux did not say.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

TMUX_FIX = "set -g set-clipboard on"
# Seconds: tmux answers at once; a hung server does not hold the notice longer.
TMUX_ASK_S = 2.0
# "on", "off" or "external": anything longer is no answer.
TMUX_ANSWER_BYTES = 64


def tmux_set_clipboard(env: Mapping[str, str], timeout: float = TMUX_ASK_S) -> str | None:
    """tmux's ``set-clipboard`` option ("on", "external", "off") as the server named by
    ``env["TMUX"]`` has it, or None when that is unknown: not inside tmux, no ``tmux`` command,
    an error, or no answer within ``timeout`` seconds. Blocks: call it from a worker thread."""
    if not env.get("TMUX"):
        return None
    try:
        done = subprocess.run(
            ["tmux", "show", "-gv", "set-clipboard"],
            env=dict(env),
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    answer = done.stdout[:TMUX_ANSWER_BYTES].decode("ascii", "replace").strip()
    return answer if done.returncode == 0 and answer in ("on", "external", "off") else None


def copied_notice(
    what: str, n_chars: int, env: Mapping[str, str], tmux_setting: str | None = None
) -> str:
    """The notice after copying ``n_chars`` characters of ``what`` ("reply", "code") through
    OSC 52, given the process environment ``env`` (which terminal or multiplexer we are in)
    and, inside tmux, its ``set-clipboard`` setting (``tmux_set_clipboard``; None: unknown).
    tmux's fix is named only where the copy may have stopped at tmux: not under ``on``."""
    sent = f"Sent the {what} ({n_chars:,} characters) to the terminal's clipboard (OSC 52)"
    if env.get("TMUX") and tmux_setting == "on":
        return f"{sent}: tmux passes it on (set-clipboard on) to terminals that support OSC 52."
    if env.get("TMUX"):
        return (
            f"{sent}. tmux passes it on to your clipboard only with '{TMUX_FIX}' in ~/.tmux.conf "
            "(then: tmux source ~/.tmux.conf)."
        )
    if env.get("STY"):
        return (
            f"{sent}. GNU screen may not pass it on: if nothing was copied, "
            "use screen's copy mode (Ctrl+A [)."
        )
    if env.get("TERM_PROGRAM") == "Apple_Terminal":
        return (
            f"{sent}, but macOS Terminal ignores OSC 52: nothing was copied. "
            "Select the text with the mouse instead, "
            "or use a terminal that supports it (iTerm2, kitty, WezTerm)."
        )
    if env.get("VTE_VERSION"):
        return (
            f"{sent}, but GNOME Terminal and other VTE terminals ignore OSC 52: "
            "nothing was copied. Select the text with the mouse (Shift+drag) instead."
        )
    return f"{sent}: terminals that support OSC 52 put it on the clipboard."
