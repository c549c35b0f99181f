"""A keyboard-first slider for one numeric parameter.

Left/Right change by a fine step, Shift+Left/Right or PgUp/PgDn by a coarse one,
Home/End jump to the bounds, Delete (or Backspace) resets to the default (no letter: the
panel sends typing on to the input). It shows, from the top: its
label and value (``●`` once the value is not the default), what it does in one line
(``SliderSpec.help``, from the setting's declaration), the bar, and its range and
default. The focused slider has a bar down its left edge and the accent behind it, in
every theme. The slider posts ``Slider.Changed``; it does not know who listens.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class SliderSpec:
    name: str
    label: str
    minimum: float
    maximum: float
    fine: float
    coarse: float
    default: float | None
    integer: bool = False
    # Such as "no limit": the minimum means None.
    none_at_minimum: str | None = None
    # What it does, in one line (the setting's ``Setting.summary``).
    help: str = ""

    def clamp(self, value: float) -> float | int:
        value = min(max(value, self.minimum), self.maximum)
        return int(round(value)) if self.integer else round(value, 4)

    def show(self, value: float | int | None) -> str:
        if value is None or (self.none_at_minimum and value <= self.minimum):
            return self.none_at_minimum or "none"
        return str(int(value)) if self.integer else f"{value:.2f}"

    def range_text(self) -> str:
        lo = self.none_at_minimum if self.none_at_minimum else self.show(self.minimum)
        return f"{lo}…{self.show(self.maximum)}"


class Slider(Widget, can_focus=True):
    DEFAULT_CSS = """
    Slider {
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
    }
    Slider:focus {
        padding: 0 1 0 0;
        border-left: outer $accent;
        background: $accent 25%;
    }
    Slider:focus .slider--label {
        text-style: bold;
    }
    Slider .slider--changed {
        color: $warning;
        text-style: bold;
    }
    Slider:disabled {
        color: $text-disabled;
    }
    """
    COMPONENT_CLASSES = {"slider--label", "slider--bar", "slider--fill", "slider--changed"}
    BINDINGS = [
        Binding("left", "step(-1)", "Decrease", id="slider.decrease", show=False),
        Binding("right", "step(1)", "Increase", id="slider.increase", show=False),
        Binding(
            "shift+left,pagedown",
            "step(-10)",
            "Decrease a lot",
            id="slider.decrease_more",
            show=False,
        ),
        Binding(
            "shift+right,pageup",
            "step(10)",
            "Increase a lot",
            id="slider.increase_more",
            show=False,
        ),
        Binding("home", "bound(-1)", "Minimum", id="slider.minimum", show=False),
        Binding("end", "bound(1)", "Maximum", id="slider.maximum", show=False),
        Binding("delete,backspace", "reset", "Reset", id="slider.reset", show=False),
        Binding("up", "app.focus_previous", "Previous", id="slider.previous", show=False),
        Binding("down", "app.focus_next", "Next", id="slider.next", show=False),
    ]

    value: reactive[float | int | None] = reactive(None, layout=False)

    class Changed(Message):
        def __init__(self, slider: Slider, name: str, value: float | int | None) -> None:
            super().__init__()
            self.slider = slider
            self.name = name
            self.value = value

        @property
        def control(self) -> Slider:
            return self.slider

    def __init__(
        self, spec: SliderSpec, value: float | int | None, *, id: str | None = None
    ) -> None:
        super().__init__(id=id or f"slider-{spec.name}")
        self.spec = spec
        self.set_reactive(Slider.value, value)

    @property
    def param_value(self) -> float | int | None:
        """The value in the parameter's own terms (None where the minimum means none)."""
        if self.value is None or (self.spec.none_at_minimum and self.value <= self.spec.minimum):
            return None
        return self.value

    def _numeric(self) -> float:
        return self.spec.minimum if self.value is None else float(self.value)

    def set_value(self, value: float | int | None, announce: bool = True) -> None:
        """Set the value; a user change (``announce``) is clamped to the slider's range and
        posted, a value shown from outside is displayed as it is."""
        if value is None:
            new = None if self.spec.none_at_minimum else self.spec.clamp(self.spec.minimum)
        else:
            new = self.spec.clamp(value) if announce else value
        if new != self.value:
            self.value = new
            if announce:
                self.post_message(self.Changed(self, self.spec.name, self.param_value))

    def action_step(self, direction: int) -> None:
        step = self.spec.coarse if abs(direction) > 1 else self.spec.fine
        self.set_value(self._numeric() + step * (1 if direction > 0 else -1))

    def action_bound(self, direction: int) -> None:
        self.set_value(self.spec.maximum if direction > 0 else self.spec.minimum)

    def action_reset(self) -> None:
        default = self.spec.default
        self.set_value(
            self.spec.minimum if default is None and self.spec.none_at_minimum else default
        )

    @property
    def changed(self) -> bool:
        """Whether the value differs from the default (``r`` would change it)."""
        return self.param_value != self.spec.default

    def render(self) -> Text:
        spec = self.spec
        width = max(10, self.size.width)
        fraction = (self._numeric() - spec.minimum) / ((spec.maximum - spec.minimum) or 1)
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(fraction * width))
        label_style = self.get_component_rich_style("slider--label")
        line1 = Text.assemble((spec.label, label_style), " ", (spec.show(self.param_value), "bold"))
        if self.changed:
            line1.append(" ●", self.get_component_rich_style("slider--changed"))
        bar = Text.assemble(
            ("━" * filled, self.get_component_rich_style("slider--fill")),
            ("─" * (width - filled), self.get_component_rich_style("slider--bar")),
        )
        default = (
            spec.none_at_minimum
            if spec.default is None and spec.none_at_minimum
            else spec.show(spec.default)
        )
        lines = [
            line1,
            Text(spec.help, style="dim") if spec.help else None,
            bar,
            Text(f"{spec.range_text()} · default {default}", style="dim"),
        ]
        return Text("\n").join(line for line in lines if line is not None)
