"""Pilot tests of the parameter panel (F2) as a newcomer meets it: what each slider does, its
default and whether it was changed, which one has the focus, the focus kept in sight at 80×24,
Esc to close, and the reset keys (issue 46, point 1)."""

from __future__ import annotations

from fakes import RecordingBackend, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.choice import Choice
from vibechat.app.tui.widgets.slider import Slider
from vibechat.engine.settings.params import PARAM_SPECS, SamplingParams
from vibechat.engine.settings.table import SETTINGS_BY_KEY

SMALL = (80, 24)


def lines(widget: Slider | Choice) -> list[str]:
    return str(widget.render()).split("\n")


async def open_panel(pilot) -> None:
    await settle(pilot)
    await pilot.press("f2")
    await pilot.pause()


async def test_each_slider_says_what_it_does_in_the_words_of_its_declaration():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_panel(pilot)
        temperature = app.query_one("#slider-temperature", Slider)
        # The declaration's own words, up to its first clause: the same text as the flag's and
        # the config file's comment, not a copy of it.
        assert (
            lines(temperature)[1]
            == PARAM_SPECS["temperature"].help.split(";")[0]
            == "Randomness of sampling"
        )
        for slider in app.query(Slider):
            key = (
                slider.spec.name
                if slider.spec.name == "gpu_layers"
                else f"params.{slider.spec.name}"
            )
            declared = SETTINGS_BY_KEY[key].help
            assert lines(slider)[1] == slider.spec.help == SETTINGS_BY_KEY[key].summary
            assert slider.spec.help and declared.startswith(slider.spec.help)
        thinking = app.query_one(Choice)
        # The panel is too narrow for the label and the six values on one line: the values go
        # below it, whole (none wrapped onto a line of its own).
        assert lines(thinking)[:2] == ["Thinking", "auto on off low medium high"]
        assert lines(thinking)[2] == SETTINGS_BY_KEY["params.thinking"].summary
        assert SETTINGS_BY_KEY["params.thinking"].help.startswith(lines(thinking)[2])


async def test_each_slider_shows_its_default_and_marks_a_changed_value():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_panel(pilot)
        temperature = app.query_one("#slider-temperature", Slider)
        assert lines(temperature)[0] == "Temperature 0.80"
        assert lines(temperature)[-1] == "0.00…5.00 · default 0.80"
        assert lines(app.query_one("#slider-max_tokens", Slider))[-1] == "auto…32768 · default auto"
        await pilot.press("right")
        assert lines(temperature)[0] == "Temperature 0.85 ●"
        assert lines(app.query_one(Choice))[-1].startswith("default auto")


async def test_reset_one_and_all_clear_the_changed_marks_and_the_hint_names_them():
    app = create_app(
        RecordingBackend(), params=SamplingParams(temperature=1.5, top_k=3), blink=False
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await open_panel(pilot)
        hint = app.panel.hint_text()
        assert "Del reset one" in hint and "Shift+Del reset all" in hint and "Esc close" in hint
        assert hint in [str(s.render()) for s in app.panel.query(".panel--hint")]
        temperature, top_k = (
            app.query_one("#slider-temperature", Slider),
            app.query_one("#slider-top_k", Slider),
        )
        assert lines(temperature)[0].endswith("●") and lines(top_k)[0].endswith("●")
        await pilot.press("delete")  # the focused one: temperature
        assert lines(temperature)[0] == "Temperature 0.80" and lines(top_k)[0] == "Top-k 3 ●"
        assert app.conversation.params.temperature == 0.8 and app.conversation.params.top_k == 3
        await pilot.press(
            "down", "right", "right", "shift+delete"
        )  # top_k, the thinking switch: all back
        assert not [
            w.id
            for w in (*app.query(Slider), app.query_one(Choice))
            if w.id != "slider-gpu_layers" and "●" in lines(w)[0]
        ]
        assert app.conversation.params == SamplingParams()


async def test_the_focus_stays_in_sight_at_80x24():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=SMALL) as pilot:
        await open_panel(pilot)
        for _ in range(6):
            await pilot.press("down")
            await pilot.pause()
        focused = app.focused
        assert isinstance(focused, (Slider, Choice)) and focused.id == "choice-thinking"
        geometry = app.screen.find_widget(focused)
        assert geometry.region.height > 0 and geometry.visible_region == geometry.region
        assert app.panel.scroll_y > 0
        await pilot.press("up")  # max tokens, also seen whole
        geometry = app.screen.find_widget(app.focused)
        assert app.focused.id == "slider-max_tokens" and geometry.visible_region == geometry.region


async def test_escape_closes_the_panel_and_gives_the_focus_back_to_the_input():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=SMALL) as pilot:
        await open_panel(pilot)
        await pilot.press("down", "right")
        assert app.panel.has_class("-visible") and isinstance(app.focused, Slider)
        await pilot.press("escape")
        await pilot.pause()
        assert not app.panel.has_class("-visible")
        assert app.focused is app.prompt_input
        assert app.conversation.params.top_k == 41  # closing keeps what was set


async def test_the_focused_slider_is_unmistakable_in_every_theme():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_panel(pilot)
        focused, other = (
            app.query_one("#slider-temperature", Slider),
            app.query_one("#slider-top_k", Slider),
        )
        assert app.focused is focused
        for theme in sorted(app.available_themes):
            app.theme = theme
            await pilot.pause()
            # A bar down its left edge (seen without colours too) and the accent behind it.
            assert focused.styles.border_left[0] and not other.styles.border_left[0], theme
            assert focused.styles.background != other.styles.background, theme
