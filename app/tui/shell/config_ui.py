"""The chat's use of the config file: the theme and key overrides at start, the
problems to show (``config_bar``), remembering the theme, "save parameters as default".

Plain functions over a ``LoadedConfig``: the app asks, they answer (and write).
Writes go through the engine (tomlkit: the user's comments and formatting stay),
which refuses to touch a file that does not load cleanly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.config import LoadedConfig
from vibechat.engine.settings.config_save import save_params
from vibechat.engine.settings.params import SamplingParams

from ...appconfig import APP_SCHEMA, DEFAULT_THEME, chat_settings, save_theme


def starting_theme(config: LoadedConfig, available: Iterable[str]) -> tuple[str, list[str]]:
    """The theme to start with, and the config's problems to show while the chat runs, one
    line each (every setting not applied, and why; a configured theme that is not installed)."""
    notes = [problem.short for problem in config.problems]
    wanted = chat_settings(config).theme
    if wanted in available:
        return wanted, notes
    where = config.origin("theme")
    notes.append(
        f"theme {wanted!r} ({where}) is not installed: "
        f"{DEFAULT_THEME} applies (F4 lists the themes)"
    )
    return DEFAULT_THEME, notes


def file_problems(config: LoadedConfig) -> int:
    """How many of ``starting_theme``'s notes (the first ones) are the file's problems."""
    return sum(1 for problem in config.problems if problem.in_file)


def remember_theme(config: LoadedConfig, name: str) -> tuple[LoadedConfig, str | None]:
    """Save ``name`` as the theme: the config as it is now, and a problem to show (or None)."""
    settings = chat_settings(config)
    if name == settings.theme:
        return config, None
    try:
        save_theme(name, config.path)
    except VibechatError as exc:
        return config, f"The theme was not saved: {exc}"
    return replace(config, config=replace(settings, theme=name)), None


def save_params_default(config: LoadedConfig, params: SamplingParams) -> tuple[str, bool]:
    """Write ``params`` as the defaults: what to say, and whether it worked."""
    try:
        path = save_params(params, config.path, schema=APP_SCHEMA)
    except VibechatError as exc:
        return f"Not saved: {exc}", False
    return f"Saved these parameters as the defaults in {path}.", True
