"""A tool call in the chat: the tool (SERVER/NAME), its arguments on one line, what it is doing
(waiting for the user's yes, running: Esc cancels, denied, done) and its result, folded to
its first line like a reply's thinking (Enter on the focused block, or a click, opens it).

The arguments are the model's and the result a tool's: outside text, sanitised, shown as
``Content``, never markup."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from vibechat.engine.sanitize import sanitize
from vibechat.engine.turns.tool_calls import ToolCall

from .. import outside
from .messages import ChatMessageWidget, MessageText

FOLDED_CHARS = 160  # of the result's first line, shown folded


class ToolCallBlock(ChatMessageWidget):
    """One call and its result; ``text`` is the result (what Ctrl+C on it copies)."""

    DEFAULT_CSS = """
    ToolCallBlock > .tool--arguments {
        color: $text-muted;
        height: auto;
    }
    ToolCallBlock > .tool--result {
        height: auto;
    }
    """
    BINDINGS = [
        Binding("enter", "toggle_result", "Show or fold the result", id="tool.toggle", show=False)
    ]

    def __init__(
        self,
        call: ToolCall,
        tool: str,
        *,
        state: str = "",
        result: str = "",
        state_kind: str | None = None,
    ) -> None:
        super().__init__(
            "tool",
            sanitize(result),
            label=f"Tool · {outside.one_line(tool, limit=80)}",
            status=state,
            status_kind=state_kind,
        )
        self.call = call
        self.tool = tool
        self.expanded = False

    def has_blocks(self) -> bool:
        """Its arguments and result are widgets of their own."""
        return True

    def compose_body(self) -> ComposeResult:
        yield MessageText(
            outside.block(outside.one_line(self.call.arguments, limit=300), limit=None),
            classes="tool--arguments",
        )
        yield MessageText(self._result_content(), classes="tool--result")

    def _result_content(self):
        text = self.text
        if not text:
            return outside.block("")
        if self.expanded:
            return outside.block(text, limit=None)
        lines = text.splitlines() or [""]
        more = (
            f"  ({len(lines)} lines · Enter shows all)"
            if len(lines) > 1 or len(lines[0]) > FOLDED_CHARS
            else ""
        )
        return outside.block(
            "▸ " + outside.one_line(lines[0], limit=FOLDED_CHARS) + more, limit=None
        )

    def set_result(self, text: str, state: str, kind: str | None = None) -> None:
        """The call settled: its result (sanitised) and the line under it."""
        self.text = sanitize(text)
        self.query_one(".tool--result", Static).update(self._result_content())
        self.set_status(state, kind)

    def action_toggle_result(self) -> None:
        self.expanded = not self.expanded
        self.query_one(".tool--result", Static).update(self._result_content())

    def on_click(self) -> None:
        self.action_toggle_result()
