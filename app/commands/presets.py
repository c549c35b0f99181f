"""``vibechat presets``: list, show, import (an Ollama Modelfile) and remove presets, and
``--preset NAME`` for the chat and ``vibechat run``.

Presets live in the config file (``[presets.NAME]``, engine/settings/presets.py). With ``--preset``,
the preset goes between the config and the flags: flags > preset > ``VIBECHAT_*`` > file >
defaults. A name that is not there is one line with a suggestion and exit status 1 (a bad
value, like an unknown model).

Imports inside functions are deliberate: the preset files and the config load only when a
``presets`` command runs (start-up time).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .clitools import echo, guard, plain, safe_json, table

if TYPE_CHECKING:
    from vibechat.engine.settings.presets import Preset

presets_app = typer.Typer(
    help="Named set-ups: list, show, import (a Modelfile), remove.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

PresetOpt = Annotated[
    str | None,
    typer.Option(
        "--preset",
        metavar="NAME",
        help="Start from the config file's preset NAME ([presets.NAME]: model, system "
        "prompt, parameters); flags given beside it win ('vibechat presets list').",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="A preset's name ('vibechat presets list').")
]
# The system prompt's start, in the list.
SYSTEM_WIDTH = 40


def preset_dict(preset: Preset) -> dict[str, Any]:
    return {"name": preset.name, **preset.to_table()}


def _book():
    from vibechat.engine.settings.preset_file import load_presets

    return load_presets()


def _problems(book) -> None:
    if book.problem:
        echo(f"vibechat: {book.problem}", err=True)
    for problem in book.problems.values():
        echo(f"vibechat: {problem}", err=True)


@presets_app.command("list")
def list_(json_output: JsonOpt = False) -> None:
    """The presets in the config file: name, model, the system prompt's start, parameters."""

    def go() -> None:
        book = _book()
        presets = sorted(book.presets.values(), key=lambda p: p.name)
        if json_output:
            typer.echo(
                safe_json(
                    {
                        "path": str(book.path),
                        "presets": [preset_dict(p) for p in presets],
                        "problems": [p for p in (book.problem, *book.problems.values()) if p],
                    }
                )
            )
            return
        _problems(book)
        if not presets:
            if not book.problems and not book.problem:
                typer.echo(
                    f"No presets in {book.path} yet: add a [presets.NAME] table "
                    "('vibechat config edit'), or import an Ollama Modelfile "
                    "('vibechat presets import Modelfile').",
                    err=True,
                )
            return

        def start(text: str | None) -> str:
            if text is None:
                return ""
            flat = " ".join(plain(text).split()) or "(none)"
            return flat if len(flat) <= SYSTEM_WIDTH else flat[: SYSTEM_WIDTH - 1] + "…"

        table(
            ["name", "model", "system prompt", "parameters"],
            [[p.name, p.model or "", start(p.system), p.summary()] for p in presets],
        )

    guard(go)


@presets_app.command()
def show(name: NameArg, json_output: JsonOpt = False) -> None:
    """Everything a preset sets (the system prompt in full)."""

    def go() -> None:
        from vibechat.engine.settings.params import PARAM_SPECS

        preset = _book().get(name)
        if json_output:
            typer.echo(safe_json(preset_dict(preset)))
            return
        echo(f"preset: {preset.name}")
        echo(f"model: {preset.model or '(the one in use)'}")
        if preset.context_size is not None:
            echo(f"context size: {preset.context_size}")
        for key, value in preset.params.items():
            spec = PARAM_SPECS.get(key)
            # Stop strings quoted: a newline in one shows as \n.
            shown = (
                spec.show(value)
                if spec is not None
                else (
                    ", ".join(json.dumps(s, ensure_ascii=False) for s in value)
                    if key == "stop"
                    else str(value)
                )
            )
            echo(f"{key}: {shown}")
        if preset.format is not None:
            echo(f"format: {preset.format}")
        if preset.system is None:
            echo("system prompt: (the one in use)")
        else:
            echo("system prompt:" + (" (none)" if not preset.system else ""))
            for line in preset.system.splitlines():
                echo(f"  {line}")

    guard(go)


@presets_app.command("import")
def import_(
    modelfile: Annotated[Path, typer.Argument(metavar="MODELFILE", help="An Ollama Modelfile.")],
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            metavar="NAME",
            help="The preset's name (default: the file's name; a file named Modelfile: "
            "its folder's).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Replace a preset of that name.")
    ] = False,
) -> None:
    """Make a preset of an Ollama Modelfile: its FROM (the model), SYSTEM and PARAMETER lines.

    What has no counterpart (TEMPLATE, ADAPTER, MESSAGE, LICENSE, unknown parameters) is named on \
stderr
    and skipped. The preset is written into the config file; its comments stay."""

    def go() -> None:
        from vibechat.engine.errors import ConfigError
        from vibechat.engine.settings.modelfile import default_name, parse_modelfile, read_modelfile
        from vibechat.engine.settings.preset_file import load_presets, save_preset
        from vibechat.engine.settings.presets import NAME_RE

        from ..appconfig import APP_SCHEMA

        text = read_modelfile(modelfile)
        chosen = name if name is not None else default_name(modelfile)
        if not NAME_RE.fullmatch(chosen):
            raise ConfigError(
                f"preset name {chosen!r} is not usable: use letters, digits, - and _ (at most 64), "
                "e.g. --name coder."
            )
        book = load_presets()
        if not force and (chosen in book.presets or chosen in book.problems):
            raise ConfigError(
                f"a preset named {chosen!r} exists already in {book.path}: pass --force to replace "
                "it, or --name another name."
            )
        result = parse_modelfile(text, modelfile.resolve().parent)
        for note in result.notes:
            echo(f"vibechat: note: {note}", err=True)
        if not result.table:
            raise ConfigError(
                f"{modelfile} holds no FROM, SYSTEM or PARAMETER line vibechat can use: nothing "
                "imported."
            )
        path = save_preset(chosen, result.table, schema=APP_SCHEMA)
        echo(
            f"Saved preset '{chosen}' in {path}: use it with 'vibechat --preset {chosen}', "
            f"'vibechat run --preset {chosen}' or /preset {chosen} in the chat."
        )

    guard(go)


@presets_app.command("rm")
def rm(name: NameArg) -> None:
    """Remove a preset from the config file (the rest of the file stays as it is)."""

    def go() -> None:
        from vibechat.engine.settings.config_save import update_config

        from ..appconfig import APP_SCHEMA

        book = _book()
        if name not in book.presets and name not in book.problems:
            book.get(name)  # raises: not there, with a suggestion
        update_config({f"presets.{name}": None}, schema=APP_SCHEMA)
        echo(f"Removed preset '{name}' from {book.path}.")

    guard(go)
