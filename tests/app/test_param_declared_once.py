"""A sampling parameter is declared once (issue 41, point 2): a made-up parameter added to the
spec table (``PARAM_SPECS``, engine/settings/params.py), with a ``SamplingParams`` field of its
name and nothing else written anywhere, shows up wherever a parameter does: its flag in
``--help`` (and the flag works), a slider in the parameter panel, its nudge keys, ``/set``'s help
and ``/set`` itself, a preset's round trip, a Modelfile's ``PARAMETER``, a server's request
body, llama.cpp's sampler chain, the Markdown export's line and the docs' settings table."""

from __future__ import annotations

import dataclasses

import llama_cpp as ll
import pytest
import typer
from typer.testing import CliRunner

from fakes import RecordingBackend, settle
from vibechat.app import options, slash
from vibechat.app.appconfig import AppConfig, nudge_binding_ids
from vibechat.app.options import SettingFlags, setting_options
from vibechat.app.tui import create_app
from vibechat.app.tui.shell.bindings import nudge_bindings
from vibechat.app.tui.widgets.slider import Slider
from vibechat.engine.chat.records import export_line
from vibechat.engine.llama.decoding import sampler_chain
from vibechat.engine.remote.request import chat_body, optional_fields
from vibechat.engine.settings import table
from vibechat.engine.settings.config_check import check_value
from vibechat.engine.settings.config_doc import markdown_table
from vibechat.engine.settings.modelfile import parse_modelfile
from vibechat.engine.settings.param_parts import LlamaStage, Nudge, RemoteField
from vibechat.engine.settings.params import PARAM_SPECS, ParamSpec, SamplingParams
from vibechat.engine.settings.presets import Rules, parse_preset
from vibechat.engine.settings.table import Config, Schema

TYPICAL = ParamSpec(
    "typical_p",
    float,
    0.0,
    1.0,
    1.0,
    0.01,
    0.05,
    "Locally typical sampling: keep the tokens whose surprise is near the expected one; 1 "
    "disables.",
    label="Typical-p",
    flag_words="{range}; 1 disables",
    exported=True,
    llama=LlamaStage(
        25,
        lambda ll, vocab, value: ll.llama_sampler_init_typical(value, 1) if value < 1.0 else None,
    ),
    remote=RemoteField(("typical_p",), optional=True),
    nudge=Nudge(
        "ctrl+f11", "ctrl+f12", "Lower typical-p by one step", "Raise typical-p by one step"
    ),
)


@dataclasses.dataclass(frozen=True)
class TypicalParams(SamplingParams):
    """``SamplingParams`` with the made-up parameter's field (each spec has one)."""

    typical_p: float = 1.0


@pytest.fixture
def typical(monkeypatch: pytest.MonkeyPatch) -> Schema:
    """The made-up parameter in the spec table; the settings table, which modules build once
    on import, built again as a start-up would build it with the parameter declared."""
    monkeypatch.setitem(PARAM_SPECS, "typical_p", TYPICAL)
    schema = Schema.of(Config)
    for module in (table, options):
        monkeypatch.setattr(module, "SETTINGS", schema.settings)
        monkeypatch.setattr(module, "SETTINGS_BY_KEY", schema.by_key)
    return schema


def test_its_flag_is_on_the_help_page_and_sets_it(typical):
    app = typer.Typer()

    @app.command()
    @setting_options
    def run(flags: SettingFlags) -> None:
        typer.echo(f"typical_p={flags.sampling.to_params(TypicalParams()).typical_p}")

    runner = CliRunner()
    page = runner.invoke(app, ["--help"], env={"COLUMNS": "240", "NO_COLOR": "1"}).output
    assert "--typical-p" in page and "0-1; 1 disables (default 1)." in page
    assert runner.invoke(app, ["--typical-p", "0.5"]).output.strip() == "typical_p=0.5"
    refused = runner.invoke(app, ["--typical-p", "abc"])
    assert (
        refused.exit_code == 2 and "--typical-p must be a number between 0 and 1" in refused.output
    )


async def test_it_has_a_slider_in_the_panel_and_its_nudge_keys_step_it(typical):
    app = create_app(RecordingBackend(), params=TypicalParams(), blink=False)
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await pilot.pause()
        slider = app.query_one("#slider-typical_p", Slider)
        assert str(slider.render()).split("\n")[:2] == [
            "Typical-p 1.00",
            "Locally typical sampling",
        ]
        slider.focus()
        await pilot.press("left")
        await pilot.pause()
        assert app.conversation.params.typical_p == 0.99
        down = next(b for b in nudge_bindings() if b.id == "typical_p_down")
        assert (down.key, down.description, down.tooltip) == (
            "ctrl+f11",
            "Typical-p down",
            TYPICAL.nudge.lower,
        )
        await app.run_action(down.action)
        await pilot.pause()
        assert app.conversation.params.typical_p == 0.98
        assert str(slider.render()).split("\n")[0] == "Typical-p 0.98 ●"
    assert {"typical_p_down", "typical_p_up"} <= set(nudge_binding_ids())


def test_set_names_it_and_sets_it(typical):
    assert "typical_p" in slash.set_help()
    request = slash.parse_set("typical_p 0.3")
    assert (request.kind, request.name) == ("param", "typical_p")
    assert TypicalParams().set_from_text(request.name, request.value).typical_p == 0.3
    assert slash.shown("typical_p", 0.3) == "0.3"


def test_a_preset_keeps_it_and_a_modelfile_gives_it(typical, tmp_path):
    rules = Rules(
        lambda key, value, at: check_value(typical.by_key[key], value, at), typical.param_keys
    )
    preset = parse_preset("typ", {"params": {"typical_p": 0.4}}, tmp_path, rules)
    assert parse_preset("typ", preset.to_table(), tmp_path, rules) == preset
    assert preset.over(TypicalParams()).typical_p == 0.4
    assert "typical_p 0.4" in preset.summary()
    imported = parse_modelfile("FROM ./m.gguf\nPARAMETER typical_p 0.7\n", tmp_path)
    assert imported.table["params"] == {"typical_p": 0.7}
    assert (
        parse_preset("ollama", imported.table, tmp_path, rules).over(TypicalParams()).typical_p
        == 0.7
    )


def test_a_server_is_sent_it_as_declared(typical):
    body = chat_body("m", [], TypicalParams(typical_p=0.7, seed=1), send_optional=True)
    assert body["typical_p"] == 0.7
    assert "typical_p" not in chat_body(
        "m", [], TypicalParams(typical_p=0.7, seed=1), send_optional=False
    )
    assert "typical_p" in optional_fields()  # a strict server's refusal of it drops the extras


def names(chain) -> list[str]:
    return [
        ll.llama_sampler_name(ll.llama_sampler_chain_get(chain, i)).decode()
        for i in range(ll.llama_sampler_chain_n(chain))
    ]


def test_llama_cpp_samples_with_it_in_its_place(typical):
    chain = sampler_chain(None, TypicalParams(typical_p=0.7, seed=1))
    try:
        assert names(chain) == ["top-k", "top-p", "typical", "min-p", "temp", "dist"]
    finally:
        ll.llama_sampler_free(chain)
    chain = sampler_chain(None, TypicalParams(typical_p=0.7, seed=1, temperature=0))
    try:
        assert names(chain) == ["greedy"]  # it only shapes the draw
    finally:
        ll.llama_sampler_free(chain)


def test_the_export_and_the_docs_table_show_it(typical):
    assert export_line(TypicalParams(typical_p=0.7)).endswith(", typical-p 0.7")
    row = (
        "| `params.typical_p` | `--typical-p` | `VIBECHAT_TYPICAL_P` | 1 | Locally typical sampling"
    )
    assert row in markdown_table(Schema.of(AppConfig, after="system_prompt"))
