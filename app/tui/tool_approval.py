"""The question before a tool runs: which tool, on which server, with which arguments, and
the user's answer: allow once, allow this tool for this conversation, always allow it (saved
in the config file), or deny (Esc). Nothing runs without a yes.

Everything shown is outside text (the model wrote the arguments, a server the tool's name and
description): sanitised, bounded, shown as ``Content``, never read as markup."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

from . import outside

ANSWERS = ("once", "conversation", "always", "deny")
ARGUMENTS_SHOWN = 4000  # characters of the arguments shown (a longer call says it is cut)


def pretty_arguments(call: ToolCall) -> str:
    """The arguments as indented JSON (as written when they do not parse), bounded."""
    try:
        text = json.dumps(call.parsed_arguments(), indent=2, ensure_ascii=False)
    except ValueError:
        text = call.arguments
    if len(text) > ARGUMENTS_SHOWN:
        text = text[:ARGUMENTS_SHOWN] + f"\n… ({len(text):,} characters in all)"
    return text


class ToolApprovalScreen(ModalScreen[str]):
    """Dismissed with one of ``ANSWERS``."""

    DEFAULT_CSS = """
    ToolApprovalScreen {
        align: center middle;
    }
    ToolApprovalScreen > Vertical {
        width: 90;
        max-width: 95%;
        height: auto;
        max-height: 90%;
        border: thick $warning;
        background: $surface;
        padding: 1 2;
    }
    ToolApprovalScreen .approval--title {
        text-style: bold;
    }
    ToolApprovalScreen .approval--description {
        color: $text-muted;
    }
    ToolApprovalScreen VerticalScroll {
        height: auto;
        max-height: 20;
        margin: 1 0 0 0;
        background: $boost;
    }
    ToolApprovalScreen .approval--keys {
        color: $text-muted;
        margin: 1 0 0 0;
    }
    """
    BINDINGS = [
        Binding("y,enter", "answer('once')", "Allow once", id="approval.once"),
        Binding("c", "answer('conversation')", "Allow in this conversation", id="approval.conversation"),
        Binding("a", "answer('always')", "Always allow", id="approval.always"),
        Binding("n,escape", "answer('deny')", "Deny", id="approval.deny"),
    ]

    def __init__(self, call: ToolCall, spec: ToolSpec) -> None:
        super().__init__()
        self.call = call
        self.spec = spec

    def compose(self) -> ComposeResult:
        spec = self.spec
        where = f"MCP server {spec.server}" if spec.server else "built into vibechat"
        with Vertical():
            yield Static(outside.block(f"The model wants to run {spec.qualified} ({where})", limit=300),
                         classes="approval--title")
            if spec.description:
                yield Static(outside.block(spec.description, limit=600), classes="approval--description")
            with VerticalScroll():
                yield Static(outside.block(pretty_arguments(self.call), limit=None), classes="approval--arguments")
            yield Static("y / Enter allow once · c allow in this conversation · a always allow · n / Esc deny",
                         classes="approval--keys")

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)
