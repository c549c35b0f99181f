"""The question before a tool runs: which tool, on which server, with which arguments, and
the user's answer: allow once, allow this tool for this conversation, always allow it (saved
in the config file), or deny (Esc). Nothing runs without a yes.

The question comes when a reply ends, often while the user is typing the next message. So each
grant is a key ordinary typing never produces (Ctrl+Y once, Ctrl+E every call in this
conversation, Ctrl+A always), and the dialog is a ``QuestionScreen``: a key
pressed before it was seen is never an answer, and typing while it is up goes on in the input
(a stray "y" or the "a" of "and" once ran a tool and allowed it for good).

Everything shown is outside text (the model wrote the arguments, a server the tool's name and
description): sanitised, bounded, shown as ``Content``, never read as markup."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

from .. import outside
from ..laid_out import LaidOut
from . import dialog
from .question import QuestionScreen

ANSWERS = ("once", "conversation", "always", "deny")
# Characters of the arguments shown (a longer call says it is cut).
ARGUMENTS_SHOWN = 4000


def pretty_arguments(call: ToolCall) -> str:
    """The arguments as indented JSON (as written when they do not parse), bounded."""
    try:
        text = json.dumps(call.parsed_arguments(), indent=2, ensure_ascii=False)
    except ValueError:
        text = call.arguments
    if len(text) > ARGUMENTS_SHOWN:
        text = text[:ARGUMENTS_SHOWN] + f"\n… ({len(text):,} characters in all)"
    return text


class ToolApprovalScreen(QuestionScreen[str]):
    """Dismissed with one of ``ANSWERS``."""

    DEFAULT_CSS = (
        dialog.frame("ToolApprovalScreen", 90, max_height="90%", border="warning", padding="1 2")
        + """
    ToolApprovalScreen .approval--title {
        text-style: bold;
    }
    ToolApprovalScreen .approval--description {
        color: $text-muted;
    }
    ToolApprovalScreen VerticalScroll {
        height: auto;
        max-height: 20;
    }
    ToolApprovalScreen.-short VerticalScroll {
        max-height: 5;
        margin: 1 0 0 0;
        background: $boost;
    }
    ToolApprovalScreen .approval--keys {
        color: $text-muted;
        margin: 1 0 0 0;
        dock: bottom;
    }
    """
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [
        Binding("ctrl+y", "answer('once')", "Allow once", id="approval.once"),
        Binding(
            "ctrl+e",
            "answer('conversation')",
            "Allow in this conversation",
            id="approval.conversation",
        ),
        Binding("ctrl+a", "answer('always')", "Always allow", id="approval.always"),
        Binding("escape", "answer('deny')", "Deny", id="approval.deny"),
    ]

    def __init__(self, call: ToolCall, spec: ToolSpec, asker: str | None = None) -> None:
        """``asker``: who asks, when not the model of a plain reply (``Side A`` of a
        comparison: "Side A asks to run …")."""
        super().__init__()
        self.call = call
        self.spec = spec
        self.asker = asker

    def compose(self) -> ComposeResult:
        spec = self.spec
        where = f"MCP server {spec.server}" if spec.server else "built into vibechat"
        with Vertical():
            yield Static(
                outside.block(f"{self._who()} {spec.qualified} ({where})", limit=300),
                classes="approval--title",
            )
            if spec.description:
                yield Static(
                    outside.block(spec.description, limit=600), classes="approval--description"
                )
            with VerticalScroll():
                yield Static(
                    outside.block(pretty_arguments(self.call), limit=None),
                    classes="approval--arguments",
                )
            yield Static(
                LaidOut.text(
                    "Ctrl+Y run it once · Ctrl+E run it whenever asked in this conversation · "
                    "Ctrl+A always run it (saved in the config file) · Esc deny\n"
                    "What you type goes on in the input."
                ),
                classes="approval--keys",
            )

    def _who(self) -> str:
        return f"{self.asker} asks to run" if self.asker else "The model wants to run"

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)
