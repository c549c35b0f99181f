"""A keyboard-first control for a setting with a few named values (the thinking switch:
auto, on, off), beside the panel's sliders and driven like them.

Left/Right (or Enter, or a click) move to the previous/next value, Delete (or Backspace)
resets to the default: no letter or space, which the panel sends on to the input. It shows every
value, the chosen one highlighted (``●`` once it is not the
default), what it does in one line (``ChoiceSpec.help``, from the setting's declaration),
and its default; focused, it is marked like a focused slider. It posts ``Choice.Changed``;
it does not know who listens.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class ChoiceSpec:
    name: str
    label: str
    values: tuple[str, ...]
    default: str
    # One dim line under the values.
    hint: str = ""
    # What it does, in one line (the setting's ``Setting.summary``).
    help: str = ""


class Choice(Widget, can_focus=True):
    DEFAULT_CSS = """
    Choice {
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
    }
    Choice:focus {
        padding: 0 1 0 0;
        border-left: outer $accent;
        background: $accent 25%;
    }
    Choice .choice--changed {
        color: $warning;
        text-style: bold;
    }
    """
    COMPONENT_CLASSES = {"choice--changed"}
    BINDINGS = [
        Binding("left", "step(-1)", "Previous value", id="choice.previous_value", show=False),
        Binding("right,enter", "step(1)", "Next value", id="choice.next_value", show=False),
        Binding("delete,backspace", "reset", "Reset", id="choice.reset", show=False),
        Binding("up", "app.focus_previous", "Previous", id="choice.previous", show=False),
        Binding("down", "app.focus_next", "Next", id="choice.next", show=False),
    ]

    value: reactive[str] = reactive("", layout=False)

    class Changed(Message):
        def __init__(self, choice: Choice, name: str, value: str) -> None:
            super().__init__()
            self.choice = choice
            self.name = name
            self.value = value

        @property
        def control(self) -> Choice:
            return self.choice

    def __init__(self, spec: ChoiceSpec, value: str, *, id: str | None = None) -> None:
        super().__init__(id=id or f"choice-{spec.name}")
        self.spec = spec
        self.set_reactive(Choice.value, value)

    def set_value(self, value: str, announce: bool = True) -> None:
        """Set the value; a user change (``announce``) is posted, one shown from outside is not."""
        if value != self.value:
            self.value = value
            if announce:
                self.post_message(self.Changed(self, self.spec.name, value))

    def action_step(self, direction: int) -> None:
        values = self.spec.values
        at = values.index(self.value) if self.value in values else 0
        self.set_value(values[(at + direction) % len(values)])

    def action_reset(self) -> None:
        self.set_value(self.spec.default)

    def on_click(self, event: events.Click) -> None:
        self.focus()
        self.action_step(1)

    @property
    def changed(self) -> bool:
        """Whether the value differs from the default (``r`` would change it)."""
        return self.value != self.spec.default

    def value_lines(self, width: int) -> list[Text]:
        """The label and the values (``●`` once changed) in ``width`` cells: on one line when
        they fit, else the label above the values, spaced out as far as they fit (never
        wrapped: a wrapped value would look like two)."""
        label = Text(self.spec.label, style="bold" if self.has_focus else "")
        changed = Text("●", self.get_component_rich_style("choice--changed"))
        for pad, gap in ((" ", " "), (" ", ""), ("", " ")):
            values = Text(gap).join(
                Text(f"{pad}{value}{pad}", "reverse bold" if value == self.value else "dim")
                for value in self.spec.values
            )
            if self.changed:
                values.append_text(Text(" ") + changed)
            line = Text.assemble(label, " ", values)
            if width <= 0 or line.cell_len <= width:
                return [line]
            if values.cell_len <= width or not pad:
                return [label, values]
        raise AssertionError("unreachable: the last form is always returned")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many lines as :meth:`render` draws at ``width`` (the values may move below the
        label; the help and the hint wrap)."""
        return sum(len(line.wrap(self.app.console, max(width, 1))) for line in self._lines(width))

    def render(self) -> Text:
        return Text("\n").join(self._lines(self.size.width))

    def _lines(self, width: int) -> list[Text]:
        hint = " · ".join(part for part in (f"default {self.spec.default}", self.spec.hint) if part)
        lines = [
            *self.value_lines(width),
            Text(self.spec.help, style="dim") if self.spec.help else None,
            Text(hint, style="dim"),
        ]
        return [line for line in lines if line is not None]
