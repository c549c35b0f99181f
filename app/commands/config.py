"""``vibechat config``: where the config file is, what is in effect, checking and editing it.

All of them work with a broken file: ``show`` reports every problem beside the values
in effect (a bad key is left out, the rest of the file applies; a file that is not
TOML is left out whole), ``check`` lists the problems and fails when there are any,
``edit`` opens the file and checks it after.
Engine modules are imported inside the commands, so ``--help`` stays instant.

Imports inside functions are deliberate: the config file's modules load only when a ``config``
command runs (start-up time).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .clitools import echo, guard, safe_json, table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from vibechat.engine.settings.config import ConfigProblem
    from vibechat.engine.settings.setting import Setting

config_app = typer.Typer(
    help="Show, locate, check and edit the config file (config.toml).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

FALLBACK_EDITORS = ("sensible-editor", "editor", "nano", "vim", "vi")


@config_app.command()
def path(
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every folder vibechat writes to (settings, conversations, models, the starter's "
            "cache, crash reports), one 'what<TAB>path' a line: what to delete to uninstall.",
        ),
    ] = False,
) -> None:
    """Print the config file's path ($VIBECHAT_CONFIG moves it); --all: every folder \
vibechat uses."""
    from vibechat.engine.paths import cache_dir, config_dir, crash_dir, data_dir
    from vibechat.engine.settings.config import config_path, models_dir

    if not every:
        typer.echo(str(config_path()))
        return
    rows = (
        ("config", config_path()),
        ("config folder", config_dir()),
        ("data folder", data_dir()),
        ("models", models_dir()),
        ("cache", cache_dir()),
        ("crash reports", crash_dir()),
    )
    for what, where in rows:
        typer.echo(f"{what}\t{where}")


def _value_text(key: str, value: Any, setting: Setting | None) -> str:
    """A setting's value for people, as the config file spells it: ``true``/``false`` (not
    Python's ``True``), ``(none)`` for nothing, a list as its quoted items (``"\\nUser:"``:
    JSON's quoting shows a newline or a tab in a stop string)."""

    from vibechat.engine.settings.config import models_dir

    if key == "models_dir" and value is None:
        # What config.models_dir() resolves: the default folder.
        return f"{models_dir()}"
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return f"({setting.default_text()})" if setting is not None and setting.unset else "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(json.dumps(str(v), ensure_ascii=False) for v in value)
    return str(value)


@config_app.command()
def show(
    ctx: typer.Context,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON: every value and its source.")
    ] = False,
) -> None:
    """Print every setting in effect and where it comes from: default, file (line), env or flag.

    Flags given before the command count too: `vibechat -t 0.2 config show`."""

    def go() -> None:
        from ..appconfig import load_app_config
        from ..options import with_flags

        loaded = load_app_config()
        flags = (ctx.obj or {}).get("flags") if ctx.obj else None
        if flags:
            loaded = with_flags(loaded, *flags)
        rows = loaded.items()
        if json_output:
            data = {
                "path": str(loaded.path),
                "exists": loaded.exists,
                "problem": loaded.problem,
                "problems": [str(p) for p in loaded.problems],
                "left_out": "file" if loaded.file_problem else list(loaded.left_out),
                "settings": {
                    key: {
                        "value": str(value) if isinstance(value, Path) else value,
                        **origin.to_dict(),
                    }
                    for key, value, origin in rows
                },
            }
            typer.echo(safe_json(data, indent=2))
            return
        state = "" if loaded.exists else "  (not created yet: 'vibechat config edit' creates it)"
        echo(f"config file: {loaded.path}{state}")
        # A problem quotes the file's own text: sanitised by echo.
        for problem in loaded.problems:
            echo(f"problem: {problem}")
        if loaded.file_problem:
            typer.echo(
                "(the values below are in effect: the whole file is left out until it is fixed)"
            )
        elif loaded.left_out:
            echo(f"(the values below are in effect: they leave out {', '.join(loaded.left_out)})")
        typer.echo("")
        by_key = loaded.schema.by_key
        table(
            ["setting", "value", "source"],
            [
                [key, _value_text(key, value, by_key.get(key)), str(origin)]
                for key, value, origin in rows
            ],
        )

    guard(go)


def find_editor() -> list[str]:
    """The editor command: $VISUAL, $EDITOR, else the first of the usual ones found."""
    for var in ("VISUAL", "EDITOR"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                return shlex.split(value, posix=os.name != "nt")
            except ValueError as exc:
                # An unclosed quote: EDITOR='vim "x'.
                from vibechat.engine.errors import ConfigError

                raise ConfigError(
                    f"{var} cannot be read as a command ({exc}: {value!r}): fix the quoting, "
                    f"e.g. export {var}=nano."
                ) from None
    candidates = ("notepad",) if os.name == "nt" else FALLBACK_EDITORS
    for name in candidates:
        found = shutil.which(name)
        if found:
            return [found]
    return []


@config_app.command()
def edit() -> None:
    """Open the config file in $VISUAL / $EDITOR, then check it (creates a documented template \
first)."""

    def go() -> int:
        from vibechat.engine.errors import ConfigError
        from vibechat.engine.settings.config import config_file_problems, config_path
        from vibechat.engine.settings.config_save import write_template

        from ..appconfig import APP_SCHEMA

        target = config_path()
        editor = find_editor()
        if not editor:
            raise ConfigError(
                f"no editor found: set EDITOR (e.g. export EDITOR=nano), or edit {target} by hand."
            )
        if write_template(target, APP_SCHEMA):
            typer.echo(f"Created {target} (every setting documented, all commented out).", err=True)
        try:
            code = subprocess.call([*editor, str(target)])
        except OSError as exc:
            raise ConfigError(
                f"could not start the editor {editor[0]!r} ({exc.strerror or exc}): "
                "set VISUAL or EDITOR to one that works."
            ) from None
        if code != 0:
            raise ConfigError(
                f"the editor {editor[0]!r} exited with status {code}; {target} was not checked."
            )
        report_problems(config_file_problems(target, APP_SCHEMA))
        typer.echo(f"{target}: OK", err=True)
        return 0

    guard(go)


def report_problems(problems: Sequence[ConfigProblem]) -> None:
    """Every problem on stderr, one line each; the last one ends the command (exit 1)."""
    from vibechat.engine.errors import ConfigError

    if not problems:
        return
    for problem in problems[:-1]:
        echo(f"vibechat: error: {problem}", err=True)
    raise ConfigError(str(problems[-1]))


@config_app.command()
def check() -> None:
    """Check the config file and the VIBECHAT_* variables: every problem, one line each on stderr
    (exit 1), else 'OK'. Unknown variables are named too; they change nothing, so they alone \
pass."""

    def go() -> int:
        from ..appconfig import load_app_config

        loaded = load_app_config()
        for warning in loaded.warnings:
            echo(f"vibechat: warning: {warning}", err=True)
        report_problems(loaded.blocking)
        state = "" if loaded.exists else " (no file: the defaults apply)"
        echo(f"{loaded.path}: OK{state}", err=True)
        return 0

    guard(go)
