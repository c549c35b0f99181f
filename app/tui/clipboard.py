"""What copying says: where the text went, and, where that is known not to reach the
clipboard by itself, what to change.

The chat copies through the terminal: an OSC 52 escape sequence asks the terminal to put
the text on the system clipboard (it works over SSH). Whether it lands is up to the
terminal, and vibechat cannot ask: most terminals take it (kitty, WezTerm, iTerm2,
Alacritty, foot, Windows Terminal), some never do (GNOME Terminal and the other VTE
terminals, macOS Terminal), and tmux drops it under its default ``set-clipboard external``.
So the message says "sent to the terminal" and names the fix where the environment tells
us enough, instead of claiming a copy that may not have happened.
"""

from __future__ import annotations

from collections.abc import Mapping

TMUX_FIX = "set -g set-clipboard on"


def copied_notice(what: str, n_chars: int, env: Mapping[str, str]) -> str:
    """The notice after copying ``n_chars`` characters of ``what`` ("reply", "code") through
    OSC 52, given the process environment ``env`` (which terminal or multiplexer we are in)."""
    sent = f"Sent the {what} ({n_chars:,} characters) to the terminal's clipboard (OSC 52)"
    if env.get("TMUX"):
        return (f"{sent}. tmux passes it on to your clipboard only with '{TMUX_FIX}' in ~/.tmux.conf "
                "(then: tmux source ~/.tmux.conf).")
    if env.get("STY"):
        return f"{sent}. GNU screen may not pass it on: if nothing was copied, use screen's copy mode (Ctrl+A [)."
    if env.get("TERM_PROGRAM") == "Apple_Terminal":
        return (f"{sent}, but macOS Terminal ignores OSC 52: nothing was copied. Select the text with the "
                "mouse instead, or use a terminal that supports it (iTerm2, kitty, WezTerm).")
    if env.get("VTE_VERSION"):
        return (f"{sent}, but GNOME Terminal and other VTE terminals ignore OSC 52: nothing was copied. "
                "Select the text with the mouse (Shift+drag) instead.")
    return f"{sent}: terminals that support OSC 52 put it on the clipboard."
