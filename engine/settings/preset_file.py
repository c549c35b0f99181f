"""The config file's presets: reading them (``load_presets``: each checked on its own, by
the config's own rules), putting one over the loaded config (``apply_to_loaded``: flags >
preset > ``VIBECHAT_*`` > file > defaults) and writing one (``save_preset``, through
config_save.py's ``update_config``: comments stay).

engine/settings/presets.py is the model (a preset, its checks; an Ollama Modelfile is read in
modelfile.py); engine/settings/config.py imports it to check the file's ``presets`` table;
this module joins the two.

Imports inside functions are deliberate: tomlkit and the config load only when a preset file is
edited (start-up time).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..sanitize import sanitize
from .config import LoadedConfig, Origin, config_path, file_message, read_config_file
from .config_check import apply_changes, check_value
from .config_save import update_config
from .config_text import key_lines, line_of
from .presets import MAX_PRESETS, Preset, PresetProblem, Rules, parse_preset, parse_presets, spelled
from .table import PARAM_KEYS, SCHEMA, SETTINGS_BY_KEY, Schema


def _setting_check(key: str, value: Any, base: Path) -> Any:
    return check_value(SETTINGS_BY_KEY[key], value, base)


# The config file's own rules, for its presets.
RULES = Rules(_setting_check, PARAM_KEYS)


def check_preset(name: str, table: Any, base: Path) -> Preset:
    """``parse_preset`` by the config's rules (raises ``PresetProblem``)."""
    return parse_preset(name, table, base, RULES)


@dataclass(frozen=True)
class PresetBook:
    """The config file's presets: the usable ones, and why each other one is not (one line
    each, naming the file and the line). ``problem``: the file itself could not be read."""

    path: Path
    presets: dict[str, Preset] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    problem: str | None = None

    def get(self, name: str) -> Preset:
        """The preset ``name``; a missing or broken one raises ``VibechatError`` in one line,
        with a suggestion."""
        preset = self.presets.get(name)
        if preset is not None:
            return preset
        if name in self.problems:
            raise ConfigError(self.problems[name])
        if self.problem:
            raise ConfigError(f"no preset {spelled(sanitize(name)[:70])}: {self.problem}")
        names = sorted([*self.presets, *self.problems])
        if not names:
            raise ConfigError(
                f"no preset {spelled(sanitize(name)[:70])}: {self.path} has no presets yet; add a "
                "[presets.NAME] table ('vibechat config edit') or import an Ollama Modelfile "
                "('vibechat presets import Modelfile')."
            )
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(
            f"no preset {spelled(sanitize(name)[:70])}{hint}; "
            f"presets in {self.path}: {', '.join(names)}."
        )


def load_presets(path: Path | None = None) -> PresetBook:
    """The presets of the config file (``config_path()`` by default), each checked on its own:
    a bad one is left out with its problem, the others stay usable. Never raises."""
    import tomlkit

    path = path or config_path()
    try:
        text = read_config_file(path)
    except ConfigError as exc:
        return PresetBook(path, problem=str(exc))
    if text is None:
        return PresetBook(path)
    try:
        data = tomlkit.parse(text).unwrap()
    except Exception:  # noqa: BLE001 - the config loader words TOML errors: ask it
        from .config import check_config_file

        return PresetBook(
            path, problem=check_config_file(path) or f"config file {path} cannot be read as TOML"
        )
    table = data.get("presets")
    if table is None:
        return PresetBook(path)
    lines = key_lines(text)
    try:
        parse_presets(
            {} if isinstance(table, Mapping) and len(table) <= MAX_PRESETS else table,
            path.parent,
            RULES,
        )
    except PresetProblem as exc:
        return PresetBook(path, problem=file_message(path, line_of(lines, exc.where), str(exc)))
    presets: dict[str, Preset] = {}
    problems: dict[str, str] = {}
    for name, value in table.items():
        try:
            presets[name] = check_preset(name, value, path.parent)
        except PresetProblem as exc:
            problems[name] = file_message(path, line_of(lines, exc.where), str(exc))
    return PresetBook(path, presets, problems)


def apply_to_loaded(loaded: LoadedConfig, preset: Preset) -> LoadedConfig:
    """``loaded`` (file and variables) with ``preset`` on top; flags go on top of this
    (``options.with_flags``). Each value the preset sets is recorded as coming from it."""
    values = preset.settings()
    origins = dict(loaded.origins)
    for key in values:
        origins[key] = Origin("preset", preset.name)
    return dataclasses.replace(loaded, config=apply_changes(loaded.config, values), origins=origins)


def save_preset(
    name: str, table: Mapping[str, Any], path: Path | None = None, *, schema: Schema = SCHEMA
) -> Path:
    """Write ``table`` as ``[presets.NAME]`` (replacing one of that name) with the config's
    ``update_config``: the rest of the file, comments included, stays as it was (``schema``:
    the file's settings table, the app's)."""

    # Never write a preset that would not load.
    try:
        check_preset(name, table, (path or config_path()).parent)
    except PresetProblem as exc:
        raise ConfigError(str(exc)) from None
    return update_config({f"presets.{name}": dict(table)}, path, schema=schema)
