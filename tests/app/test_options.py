"""The command-line options come from the settings table (issue 26.4): app/options.py builds
each setting's typer option from its row, and ``setting_options`` gives a command all of them
in one ``SettingFlags`` parameter."""

from __future__ import annotations

from typing import Annotated

import typer
import typer.main
from typer.testing import CliRunner

from vibechat.app.options import SettingFlags, flagged_settings, option_name, setting_options
from vibechat.engine.settings.table import SETTINGS


def _app() -> tuple[typer.Typer, list[SettingFlags]]:
    app = typer.Typer()
    seen: list[SettingFlags] = []

    @app.command()
    @setting_options
    def run(
        prompt: Annotated[str | None, typer.Option("--prompt", "-p")] = None,
        flags: SettingFlags = SettingFlags.NONE,
        verbose: Annotated[bool, typer.Option("--verbose")] = False,
    ) -> None:
        seen.append(flags)

    @app.command()
    def other() -> None:
        """A second command, so that typer keeps 'run' as a subcommand."""

    return app, seen


def test_every_setting_with_a_flag_is_an_option_named_by_the_table():
    app, _ = _app()
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    options = {p.name: p.opts for p in command.params}
    flagged = [s for s in SETTINGS if s.flag]
    assert {s.key for s in flagged_settings()} == {s.key for s in flagged}
    for setting in flagged:
        assert options[option_name(setting)] == [
            setting.flag,
            *([setting.short] if setting.short else []),
        ]
    names = [p.name for p in command.params]  # the options stand where the placeholder stood
    assert names[0] == "prompt" and names[-1] == "verbose" and "flags" not in names


def test_the_command_gets_the_flags_given_in_one_value():
    app, seen = _app()
    result = CliRunner().invoke(
        app,
        [
            "run",
            "-p",
            "hi",
            "--ctx",
            "512",
            "-t",
            "0.2",
            "--draft",
            "auto",
            "--stop",
            "a\\n",
            "-s",
            "be brief",
            "--verbose",
        ],
    )
    assert result.exit_code == 0, result.output
    flags = seen[-1]
    assert dict(flags.engine) == {"context_size": 512, "speculative": "auto"}
    assert flags.sampling.values["temperature"] == "0.2" and flags.sampling.stop == ["a\n"]
    assert flags.system == "be brief"
    result = CliRunner().invoke(app, ["run", "-n", "abc"])  # a malformed number: a usage error
    assert result.exit_code == 2
