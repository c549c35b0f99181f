"""The parameter panel: one slider per sampling parameter.

Attributes down: the app sets ``params``; messages up: the panel posts
``ParamPanel.Changed`` with the new ``SamplingParams`` whenever a slider moves.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from vibechat.engine.params import PARAM_SPECS, SamplingParams

from .slider import Slider, SliderSpec


def _spec(name: str, label: str, **overrides) -> SliderSpec:
    p = PARAM_SPECS[name]
    values = dict(name=name, label=label, minimum=p.minimum, maximum=p.maximum, fine=p.fine_step,
                  coarse=p.coarse_step, default=p.default, integer=p.kind is int)
    values.update(overrides)
    return SliderSpec(**values)


SLIDERS: tuple[SliderSpec, ...] = (
    _spec("temperature", "Temperature"),
    _spec("top_k", "Top-k"),
    _spec("top_p", "Top-p"),
    _spec("min_p", "Min-p"),
    _spec("repeat_penalty", "Repeat penalty"),
    _spec("max_tokens", "Max tokens", minimum=0, maximum=32768, none_at_minimum="no limit"),
)
SLIDER_SPECS = {spec.name: spec for spec in SLIDERS}


class ParamPanel(VerticalScroll):
    DEFAULT_CSS = """
    ParamPanel {
        width: 38;
        height: 100%;
        border-left: tall $primary;
        background: $surface;
        padding: 0 0 1 0;
        display: none;
    }
    ParamPanel.-visible {
        display: block;
    }
    ParamPanel > .panel--title {
        padding: 0 1;
        text-style: bold;
        color: $primary;
    }
    ParamPanel > .panel--hint {
        padding: 0 1;
        color: $text-muted;
    }
    """
    BINDINGS = [
        Binding("R", "reset_all", "Reset all", id="params.reset_all"),
        Binding("ctrl+s", "app.save_params_default", "Save as default", id="params.save_default"),
    ]

    class Changed(Message):
        def __init__(self, params: SamplingParams, name: str) -> None:
            super().__init__()
            self.params = params
            self.name = name

    def __init__(self, params: SamplingParams, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._params = params

    def compose(self) -> ComposeResult:
        yield Static("Parameters", classes="panel--title")
        for spec in SLIDERS:
            yield Slider(spec, getattr(self._params, spec.name))
        yield Static("←/→ fine · Shift+←/→ coarse · Home/End bounds\n"
                     "r reset one · R reset all · ↑/↓ move\nCtrl+S save as default",
                     classes="panel--hint")

    @property
    def params(self) -> SamplingParams:
        return self._params

    @params.setter
    def params(self, params: SamplingParams) -> None:
        """Show ``params`` (from /set, shortcuts, a loaded conversation) without echoing back."""
        self._params = params
        for slider in self.query(Slider):
            value = getattr(params, slider.spec.name)
            slider.set_value(slider.spec.minimum if value is None and slider.spec.none_at_minimum else value,
                             announce=False)

    def on_slider_changed(self, event: Slider.Changed) -> None:
        event.stop()
        self._params = self._params.replace(**{event.name: event.value})
        self.post_message(self.Changed(self._params, event.name))

    def action_reset_all(self) -> None:
        for slider in self.query(Slider):
            slider.action_reset()

    def focus_first(self) -> None:
        self.query(Slider).first().focus()
