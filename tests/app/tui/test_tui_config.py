"""Pilot tests of the chat's use of the config file: its problems (each setting left out
named in a bar that stays until fixed or hidden; the rest of the file applies), the theme,
"save as default", [keys] overrides, and the binding ids [keys] may name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from textual.binding import Binding

import vibechat.app.tui as tui_package
from fakes import RecordingBackend, send, settle
from helpers import notices, notifications, wait_for, was_notified
from vibechat.app.appconfig import BINDING_IDS, load_app_config
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.config_bar import ConfigBar
from vibechat.engine.settings.config import config_path
from vibechat.engine.settings.params import SamplingParams

SIZE = (110, 36)

COMMENTED = """\
# my settings, hand-written
model = "starter"   # the small one

[params]
# a bit cooler than the default
temperature   = 0.70
top_k = 40 # keep
"""


@pytest.fixture
def fake_backend() -> RecordingBackend:
    return RecordingBackend()


def write_config(text: str):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def bar_text(app) -> str:
    bar = app.query_one(ConfigBar)
    return str(bar.render()) if bar.display else ""


async def test_a_bad_value_is_left_out_alone_and_the_bar_says_so_until_hidden(fake_backend):
    path = write_config('theme = "vibechat-paper"\n[params]\ntemperature = 9\ntop_k = 7\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.status.state == "ready"
        # Only the bad value is left out: the theme and top_k of the same file apply.
        assert app.theme == "vibechat-paper" and app.conversation.params == SamplingParams(top_k=7)
        bar = app.query_one(ConfigBar)  # a widget, not a notice that fades
        assert bar.display and bar.region.y == 0 and bar.region.height == 2
        assert bar_text(app).splitlines() == [
            "⚠ config.toml line 3: temperature must be between 0 and 5 (got 9): not applied",
            "Fix: vibechat config edit (then start vibechat again) · ^g hides this",
        ]
        assert not notifications(app)  # not a toast: the bar
        app.theme = "vibechat-phosphor"  # not saved: the file has a problem
        app.action_save_params_default()
        await pilot.pause()
        assert any("not saved" in n.lower() for n in notices(app))
        await pilot.press("ctrl+g")  # hidden on the user's word
        await pilot.pause()
        assert not bar.display and bar_text(app) == ""
    assert path.read_text() == 'theme = "vibechat-paper"\n[params]\ntemperature = 9\ntop_k = 7\n'


async def test_a_file_that_is_not_toml_runs_on_the_defaults_and_says_so(fake_backend):
    write_config('model = "m"\n\n[params]\nsystem = "You are\ntop_k = 3\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.conversation.params == SamplingParams()
        assert bar_text(app).splitlines()[0] == (
            '⚠ config.toml line 4: a string is not closed: a " is missing at the end: '
            "running on the defaults "
            "until it is fixed"
        )
        await pilot.click(ConfigBar)  # a click hides it too
        await pilot.pause()
        assert bar_text(app) == ""


async def test_a_typo_with_base_url_set_still_runs_the_server_and_names_the_typo(stub, monkeypatch):
    """Issue 30: base_url and a typo in [params] opened the local starter; now the server."""
    from typer.testing import CliRunner

    from vibechat.app.commands.cli import cli

    write_config(
        f'base_url = "{stub.url}"\nmodel = "stub-small"\n\n[params]\ntemprature = 0.5\ntop_k = 9\n'
    )
    seen: dict = {}

    def run_tui(
        *, engine, params, system, config, save, **_tools
    ):  # the chat command's own path, up to the app
        from vibechat.app.backends import make_backend

        seen.update(backend=make_backend(engine), params=params, config=config)

    monkeypatch.setattr(tui_package, "run_tui", run_tui)
    result = CliRunner().invoke(cli, [], env={"VIBECHAT_TEMPRATURE": "0.4"})
    assert result.exit_code == 0, result.output
    backend = seen["backend"]
    server = f"http://127.0.0.1:{stub.port}"
    app = create_app(backend, params=seen["params"], config=seen["config"], blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert f"stub-small · openai · {server}" in app.status.render().plain
        assert app.conversation.params.top_k == 9
        assert bar_text(app).splitlines() == [
            "⚠ config.toml line 5: unknown key 'temprature' in [params] (did you mean "
            "'temperature'?): not applied",
            "⚠ VIBECHAT_TEMPRATURE: not a vibechat variable (did you mean "
            "VIBECHAT_TEMPERATURE?): ignored",
            "Fix: vibechat config edit (then start vibechat again) · ^g hides this",
        ]
        await send(pilot, "Say hello.")
        assert app.chat.messages()[-1].text == stub.reply  # the server answered
    backend.close()


async def test_the_bar_follows_the_file_as_it_is_fixed(fake_backend, monkeypatch):
    from vibechat.app.tui.widgets import config_bar

    monkeypatch.setattr(config_bar, "POLL_S", 0.05)
    path = write_config("[params]\ntemprature = 0.5\n")
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        async def bar_says(words: str) -> list[str]:
            for _ in range(400):  # bounded: the file is looked at every 0.05 s, checked in a thread
                if words in bar_text(app):
                    break
                await pilot.pause(0.05)
            return bar_text(app).splitlines()

        assert (await bar_says("temprature"))[0].startswith(
            "⚠ config.toml line 2: unknown key 'temprature'"
        )
        path.write_text('[params]\n\ntop_k = "x"\n')  # another mistake: the bar says which
        assert (await bar_says("top_k"))[0].startswith(
            "⚠ config.toml line 3: top_k must be a whole number"
        )
        path.write_text("[params]\ntemperature = 0.5\n")
        assert (await bar_says("loads cleanly")) == [
            "⚠ config.toml loads cleanly now: start vibechat again to apply it",
            "^g hides this",
        ]


async def test_many_problems_are_counted_past_the_first_few(fake_backend):
    write_config("".join(f"nope{i} = 1\n" for i in range(7)))
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        lines = bar_text(app).splitlines()
        assert len(lines) == 6 and lines[3].startswith("⚠ config.toml line 4: unknown key 'nope3'")
        assert lines[4] == "… and 3 more: 'vibechat config show' lists them"


async def test_theme_choice_is_saved_in_the_config_keeping_comments(fake_backend):
    path = write_config(COMMENTED)
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "vibechat-dusk"
        for name in ("vibechat-dusk", "vibechat-paper", "vibechat-phosphor"):
            assert name in app.available_themes
        app.theme = "vibechat-paper"
        await pilot.pause()
    text = path.read_text()
    assert text.startswith(
        COMMENTED.splitlines(keepends=True)[0] + COMMENTED.splitlines(keepends=True)[1]
    )
    assert 'theme = "vibechat-paper"' in text
    assert text.replace('theme = "vibechat-paper"\n', "") == COMMENTED
    again = create_app(RecordingBackend(), blink=False)
    async with again.run_test(size=SIZE):
        assert again.theme == "vibechat-paper"


async def test_unknown_theme_in_config_falls_back_and_says_so(fake_backend):
    write_config('theme = "no-such-theme"\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.theme == "vibechat-dusk"
        assert bar_text(app).splitlines()[0] == (
            "⚠ theme 'no-such-theme' (file, line 1) is not installed: "
            "vibechat-dusk applies (F4 lists the themes)"
        )


async def test_save_as_default_writes_params_and_keeps_the_rest(fake_backend):
    path = write_config(COMMENTED)
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.conversation.params.temperature == 0.7  # the config's defaults
        await pilot.press("f2", "right")  # temperature 0.70 -> 0.75, in the panel
        await pilot.press("down", "down", "end")  # top_p -> 1.0
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert was_notified(app, "Saved these parameters")
    text = path.read_text()
    assert text.startswith(
        '# my settings, hand-written\nmodel = "starter"   # the small one\n\n[params]\n'
        "# a bit cooler than the default\ntemperature   = 0.75\ntop_k = 40 # keep\n"
    )
    loaded = load_app_config()
    assert loaded.problem is None
    assert loaded.config.params == SamplingParams(temperature=0.75, top_p=1.0)


def palette_highlights(app, text: str) -> bool:
    """Whether the command palette is open with ``text`` in its highlighted command."""
    from textual.command import CommandList

    found = app.screen.query(CommandList)
    if not found or found.first().highlighted is None:
        return False
    commands = found.first()
    return text.lower() in str(commands.get_option_at_index(commands.highlighted).prompt).lower()


async def run_from_palette(pilot, command: str) -> None:
    """Open the command palette, type ``command`` and run it once the palette highlights it
    (it searches in a worker)."""
    await pilot.press("ctrl+p")
    await pilot.press(*command.lower())
    await wait_for(
        pilot, lambda: palette_highlights(pilot.app, command), "the palette to find the command"
    )
    await pilot.press("enter")


async def test_save_as_default_from_the_palette_creates_a_documented_file(fake_backend):
    app = create_app(fake_backend, params=SamplingParams(top_k=12, seed=5), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await run_from_palette(pilot, "Save parameters as default")
        await settle(pilot)
    text = config_path().read_text()
    assert text.startswith("# vibechat configuration")
    assert load_app_config().config.params == SamplingParams(top_k=12, seed=5)


async def test_keys_override_rebinds_an_action(fake_backend):
    write_config('[keys]\ntoggle_params = "ctrl+f2"\n"params.reset_all" = "X"\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f2")  # no longer the panel's key
        await pilot.pause()
        assert not app.panel.has_class("-visible")
        await pilot.press("ctrl+f2")
        await pilot.pause()
        assert app.panel.has_class("-visible")
        help_rows = dict(app.help_sections()[0][1])
        assert help_rows.get("^f2") == "Params"
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert commands["Params"].endswith(" (ctrl+f2)")


async def test_unknown_binding_id_is_reported_and_the_chat_starts(fake_backend):
    path = write_config('[keys]\ntoggle_param = "f12"\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        messages = bar_text(app)
        assert f"{path.name} line 2" in messages and "'toggle_param'" in messages
        assert "did you mean 'toggle_params'" in messages
        await pilot.press("f2")
        await pilot.pause()
        assert app.panel.has_class("-visible")


def _tui_bindings() -> list[tuple[str, Binding]]:
    found = []
    for info in pkgutil.walk_packages(tui_package.__path__, prefix=f"{tui_package.__name__}."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for binding in cls.__dict__.get("BINDINGS", []):
                if isinstance(binding, Binding):
                    found.append((cls.__name__, binding))
    return found


def test_every_binding_has_an_id_and_a_description_and_keys_knows_them_all():
    bindings = _tui_bindings()
    assert bindings
    missing = [f"{owner}: {b.key}" for owner, b in bindings if not b.id or not b.description]
    assert missing == []
    ids = [b.id for _, b in bindings]
    assert len(ids) == len(set(ids)), "binding ids must be unique"
    assert set(ids) == set(BINDING_IDS), "app/appconfig.py BINDING_IDS must list every binding id"


async def test_a_key_textual_cannot_report_is_reported_and_f2_still_works(fake_backend):
    path = write_config('[keys]\ntoggle_params = "notakey+++"\n')
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        messages = bar_text(app)
        assert (
            f"{path.name} line 2" in messages
            and 'keys.toggle_params = "notakey+++" is not a valid key' in messages
        )
        assert "notakey" not in str(app.screen.active_bindings)  # not bound, not in the footer
        await pilot.press("f2")
        await pilot.pause()
        assert app.panel.has_class("-visible")


def test_every_default_key_passes_the_engines_key_check():
    from vibechat.app.keynames import keys_problem

    bad = {
        f"{owner}: {b.id} = {b.key!r}": keys_problem(b.key)
        for owner, b in _tui_bindings()
        if keys_problem(b.key)
    }
    assert bad == {}


def test_the_engines_key_names_are_ones_textual_reports():
    """app/keynames.py does not import Textual (vibechat run and config stay light): its tables
    are checked against Textual's here."""
    import string

    from textual._keyboard_protocol import FUNCTIONAL_KEYS
    from textual.keys import Keys, _character_to_key

    from vibechat.app.keynames import (
        FUNCTION_KEYS,
        KEY_NAMES,
        MODIFIERS,
        NAMED_KEYS,
        PUNCTUATION_NAMES,
    )

    assert PUNCTUATION_NAMES == {c: _character_to_key(c) for c in string.punctuation}
    textual_names = {k.value.rpartition("+")[2] for k in Keys} | set(FUNCTIONAL_KEYS.values())
    assert set(NAMED_KEYS) | set(FUNCTION_KEYS) <= textual_names
    assert {
        "escape",
        "enter",
        "tab",
        "space",
        "backspace",
        "delete",
        "insert",
        "home",
        "end",
        "pageup",
        "pagedown",
        "up",
        "down",
        "left",
        "right",
    } | {f"f{n}" for n in range(1, 25)} <= KEY_NAMES
    # Textual sorts the modifiers of a key it reports (textual/_xterm_parser.py): so do we.
    assert list(MODIFIERS) == sorted(MODIFIERS)
    assert {"alt", "ctrl", "hyper", "meta", "shift", "super"} == set(MODIFIERS)


async def test_a_key_that_typing_produces_is_refused_for_a_binding_that_grants_or_deletes(
    fake_backend,
):
    """[keys] cannot put "run this tool" or "delete" one letter away from ordinary typing; the
    default key stays bound, and every default of those bindings is a key typing never makes."""
    from vibechat.app.appconfig import GRANTING, types

    path = write_config(
        '[keys]\n"approval.once" = "y,ctrl+o"\n"sidebar.delete" = "d"\n"confirm.yes" = "enter"\n'
        '"approval.always" = "f12"\n'
    )
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        messages = bar_text(app)
        for line, name, key in (
            (2, "approval.once", "y"),
            (3, "sidebar.delete", "d"),
            (4, "confirm.yes", "enter"),
        ):
            assert (
                f"{path.name} line {line}" in messages
                and f"keys.{name}" in messages
                and repr(key) in messages
            )
        assert "approval.always" not in messages  # f12 types nothing: accepted
    assert all(
        not types(key) for _, b in _tui_bindings() if b.id in GRANTING for key in b.key.split(",")
    )
