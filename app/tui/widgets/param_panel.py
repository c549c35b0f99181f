"""The parameter panel: one slider per sampling parameter, the thinking switch (auto, on,
off), and the GPU layers of the loaded model.

Attributes down: the app sets ``params`` and calls ``show_model``, also before the panel is
mounted (the app mounts it after its first frame: it is hidden at start), and the panel shows
them once it is; messages up: the panel posts ``ParamPanel.Changed`` with the new
``SamplingParams`` whenever a sampling slider or the thinking switch moves, and
``ParamPanel.GpuLayersChanged`` when the GPU layers slider does (the app reloads the model, or
explains why it cannot).

The panel acts on no letter: Delete resets the focused control, Shift+Delete all of them, and
what is typed while it has the focus goes on to the input (``type_through``), so a word typed
into a panel taken for closed ("Remember …") changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from vibechat.engine.settings.knobs import gpu_unavailable_message
from vibechat.engine.settings.params import PARAM_SPECS, ParamSpec, SamplingParams
from vibechat.engine.settings.setting import first_clause
from vibechat.engine.settings.table import SETTINGS_BY_KEY
from vibechat.engine.settings.think_switch import DEFAULT_THINKING, THINKING_MODES
from vibechat.engine.turns.backend import ModelInfo

from .choice import Choice, ChoiceSpec
from .slider import Slider, SliderSpec
from .type_through import TypesIntoInput


def summary(key: str) -> str:
    """What the setting ``key`` does, in one line: the first clause of the help its flag and its
    config comment come from (engine/settings/table.py), never restated here."""
    return SETTINGS_BY_KEY[key].summary


@dataclass(frozen=True, kw_only=True)
class ParamSliderSpec(SliderSpec):
    """A sampling parameter's slider, made from its declaration (``ParamSpec``,
    engine/settings/params.py), which clamps and shows its values. Where None is "auto" (the
    model's own default), "auto" sits one fine step below the parameter's minimum, so every
    value the parameter takes keeps its place on the slider and is shown as it is; the value
    that turns it off is shown in words (``no limit``, ``off``). Nothing lands between "auto"
    and the minimum."""

    param: ParamSpec

    def clamp(self, value: float) -> float | int:
        p = self.param
        if p.auto and value < p.minimum - 1e-9:
            return self.minimum
        return p.clamp(min(value, self.maximum))

    def show(self, value: float | int | None) -> str:
        if value is not None and self.param.auto and value <= self.minimum:
            # The "auto" slot below the parameter's minimum.
            value = None
        return self.param.show(value, places=2)


def param_slider(p: ParamSpec) -> ParamSliderSpec:
    """The slider of the parameter ``p``: its range (from "auto" where None is auto, up to its
    ``slider_maximum``), steps, default and line of help (the first clause of its help, as its
    row of the settings table says it), from its declaration."""
    lowest = p.minimum - p.fine_step if p.auto else p.minimum
    return ParamSliderSpec(
        name=p.name,
        label=p.label,
        minimum=int(lowest) if p.kind is int else round(lowest, 6),
        maximum=p.maximum if p.slider_maximum is None else p.slider_maximum,
        fine=p.fine_step,
        coarse=p.coarse_step,
        default=p.default,
        integer=p.kind is int,
        none_at_minimum="auto" if p.auto else None,
        help=first_clause(p.help),
        param=p,
    )


def sliders() -> tuple[ParamSliderSpec, ...]:
    """A slider per sampling parameter that has one (``ParamSpec.slider``), in the table's order."""
    return tuple(param_slider(p) for p in PARAM_SPECS.values() if p.slider)


GPU_LAYERS = "gpu_layers"
THINKING = ChoiceSpec(
    "thinking",
    "Thinking",
    THINKING_MODES,
    DEFAULT_THINKING,
    hint="if the template has a switch",
    help=summary("params.thinking"),
)


def gpu_layers_spec(info: ModelInfo | None) -> SliderSpec:
    """0 to the model's layer count; the default ('r') is what loading chooses by itself."""
    n_layers = info.n_layers if info is not None and info.n_layers else 0
    default = n_layers if info is not None and info.gpu_offload_supported else 0
    return SliderSpec(
        name=GPU_LAYERS,
        label="GPU layers",
        minimum=0,
        maximum=max(n_layers, 1),
        fine=1,
        coarse=4,
        default=default,
        integer=True,
        help=summary(GPU_LAYERS),
    )


def gpu_slider_unavailable(info: ModelInfo) -> str | None:
    """Why the GPU layers slider cannot work for ``info`` (one short line), or None."""
    if info.server is not None:
        return "Off: the server decides."
    if not info.gpu_offload_supported:
        return "Off: a CPU-only llama.cpp build."
    return None


class ParamPanel(TypesIntoInput, VerticalScroll):
    # Columns (the app keeps both side panels open only where the chat still fits).
    WIDTH = 38
    DEFAULT_CSS = (
        """
    ParamPanel {
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
        + f"ParamPanel {{ width: {WIDTH}; }}"
    )
    # Not in the footer (the app's keys fill it): the panel's hint lines show them.
    BINDINGS = [
        Binding("shift+delete", "reset_all", "Reset all", id="params.reset_all", show=False),
        # Only while the panel has the focus: elsewhere Esc stops the reply (the app's binding).
        Binding("escape", "app.toggle_params", "Close", id="params.close", show=False),
        Binding(
            "ctrl+s",
            "app.save_params_default",
            "Save as default",
            id="params.save_default",
            show=False,
        ),
    ]

    class Changed(Message):
        def __init__(self, params: SamplingParams, name: str) -> None:
            super().__init__()
            self.params = params
            self.name = name

    class GpuLayersChanged(Message):
        def __init__(self, layers: int) -> None:
            super().__init__()
            self.layers = layers

    def __init__(self, params: SamplingParams, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._params = params
        # The loaded model (``show_model``); None until one is.
        self._model: ModelInfo | None = None
        # ``focus_first`` asked before the sliders were there.
        self._focus_on_mount = False

    def compose(self) -> ComposeResult:
        yield Static("Parameters", classes="panel--title")
        for spec in sliders():
            yield Slider(spec, getattr(self._params, spec.name))
        yield Choice(THINKING, self._params.thinking)
        yield Static(self.hint_text(), classes="panel--hint")
        yield Static("Model", classes="panel--title")
        gpu = Slider(gpu_layers_spec(None), 0)
        # Until a model is loaded (show_model).
        gpu.disabled = True
        yield gpu
        yield Static("Waiting for the model.", id="gpu-hint", classes="panel--hint", markup=False)

    @staticmethod
    def hint_text() -> str:
        """The panel's keys (they are not in the footer): ● marks a value changed from its
        default."""
        return (
            "←/→ fine · Shift+←/→ coarse · Home/End bounds\n"
            "↑/↓ move · ● changed from default\n"
            "Del reset one · Shift+Del reset all\nCtrl+S save as default · Esc close"
        )

    @property
    def params(self) -> SamplingParams:
        return self._params

    @params.setter
    def params(self, params: SamplingParams) -> None:
        """Show ``params`` (from /set, shortcuts, a loaded conversation) without echoing back;
        before the panel is mounted, kept until it is (``on_mount``)."""
        self._params = params
        if self.is_mounted:
            self._show_params()

    def on_mount(self) -> None:
        """What the app set before the panel was mounted, shown now (unless it composed nothing:
        mounted as the app closes)."""
        if not self.children:
            return
        self._show_params()
        if self._model is not None:
            self._show_model(self._model)
        if self._focus_on_mount:
            self._focus_on_mount = False
            self.query(Slider).first().focus()

    def _show_params(self) -> None:
        params = self._params
        for slider in self._sampling_sliders():
            value = getattr(params, slider.spec.name)
            slider.set_value(
                slider.spec.minimum if value is None and slider.spec.none_at_minimum else value,
                announce=False,
            )
        self.query_one(Choice).set_value(params.thinking, announce=False)

    def _sampling_sliders(self) -> list[Slider]:
        return [slider for slider in self.query(Slider) if slider.spec.name in PARAM_SPECS]

    def on_choice_changed(self, event: Choice.Changed) -> None:
        event.stop()
        self._params = self._params.replace(thinking=event.value)
        self.post_message(self.Changed(self._params, event.name))

    def show_model(self, info: ModelInfo) -> None:
        """The GPU layers slider follows the loaded model: its layer count, what is offloaded.
        Where it cannot work (a CPU-only llama.cpp build, a server), it is disabled and its
        hint line says why (the rebuild command is in its tooltip and in ``vibechat --version``).
        Before the panel is mounted, kept until it is (``on_mount``)."""
        self._model = info
        if self.is_mounted:
            self._show_model(info)

    def _show_model(self, info: ModelInfo) -> None:
        slider = self.query_one(f"#slider-{GPU_LAYERS}", Slider)
        slider.spec = gpu_layers_spec(info)
        slider.set_value(info.gpu_layers, announce=False)
        reason = gpu_slider_unavailable(info)
        slider.disabled = reason is not None
        slider.tooltip = (
            gpu_unavailable_message(-1, asked_by="the GPU layers slider")
            if reason and info.server is None
            else None
        )
        self.query_one("#gpu-hint", Static).update(reason or "Changing it reloads the model.")
        slider.refresh()

    def on_slider_changed(self, event: Slider.Changed) -> None:
        event.stop()
        if event.name == GPU_LAYERS:
            self.post_message(self.GpuLayersChanged(int(event.value or 0)))
            return
        self._params = self._params.replace(**{event.name: event.value})
        self.post_message(self.Changed(self._params, event.name))

    def action_reset_all(self) -> None:
        """Every sampling parameter and the thinking switch to its default (the GPU layers
        stay: that would reload)."""
        for slider in self._sampling_sliders():
            slider.action_reset()
        self.query_one(Choice).action_reset()

    def focus_first(self) -> None:
        """The first slider takes the focus (once mounted, if asked before)."""
        self._focus_on_mount = not self.is_mounted
        if self.is_mounted:
            self.query(Slider).first().focus()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Keep the focused slider in sight: at 80×24 the panel is taller than the screen."""
        event.widget.scroll_visible(animate=False)
