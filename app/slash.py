"""Slash commands typed in the chat input, for people coming from ``ollama run``.

Parsing is pure: ``parse()`` turns a line into a ``SlashCommand`` (or ``None`` for
a normal message); the app decides what each does.
"""

from __future__ import annotations

from dataclasses import dataclass

COMMANDS: dict[str, str] = {
    "/set": "/set NAME VALUE: change a parameter (temperature, top_k, top_p, min_p, repeat_penalty, "
            "max_tokens, seed, stop, thinking); /set alone lists them",
    "/format": "/format json|FILE|off: make the next replies JSON (json), follow a JSON Schema or a .gbnf "
               "grammar (FILE, or inline JSON); off clears it; /format alone shows it",
    "/think": "/think on|off|auto: switch a reasoning model's thinking on or off for the next replies, where "
              "its template takes a switch (auto: as the template does by default); /think alone shows it",
    "/system": "/system TEXT: set the system prompt; /system alone shows it, /system clear removes it",
    "/clear": "/clear: clear the conversation (same as /new)",
    "/new": "/new: start a new conversation (Ctrl+N)",
    "/stats": "/stats: show the last reply's statistics",
    "/help": "/help: list the commands and key bindings (F1)",
    "/bye": "/bye: quit",
}
ALIASES = {"/quit": "/bye", "/exit": "/bye", "/?": "/help", "/reset": "/new"}


@dataclass(frozen=True)
class SlashCommand:
    name: str  # canonical, e.g. "/set"
    arg: str  # the rest of the line, stripped

    @property
    def known(self) -> bool:
        return self.name in COMMANDS


def parse(line: str) -> SlashCommand | None:
    """A slash command, or None when ``line`` is a message for the model.

    A line starting with ``//`` is a message that starts with ``/`` (escape)."""
    text = line.strip()
    if not text.startswith("/") or text.startswith("//"):
        return None
    head, _, rest = text.partition(" ")
    name = head.lower()
    name = ALIASES.get(name, name)
    return SlashCommand(name=name, arg=rest.strip())


def unescape(line: str) -> str:
    """``//text`` sends ``/text`` to the model."""
    stripped = line.lstrip()
    return stripped[1:] if stripped.startswith("//") else line


def suggestion(name: str) -> str:
    """The one-line message for an unknown command."""
    close = [c for c in COMMANDS if c.startswith(name[:3])] if len(name) > 1 else []
    hint = f" Did you mean {close[0]}?" if close else ""
    return f"Unknown command {name}.{hint} Type /help for the list; start with // to send a message beginning with /."
