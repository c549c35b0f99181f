"""A setting's value checked: as TOML, a flag or the chat gives it (``check_value``), or as an
environment variable's text (``from_text``), and a config file's parsed document checked key by
key (``read_document``: each bad key a problem of its own, the others apply). Every rule comes
from the settings table (table.py)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from .params import PARAM_SPECS, SamplingParams
from .setting import Setting, show as _show
from .table import PARAM_KEYS, SETTINGS_BY_KEY, TOP_LEVEL, Config

TRUE_WORDS = ("1", "true", "yes", "on")  # a true-or-false setting in an environment variable
FALSE_WORDS = ("0", "false", "no", "off")


# ------------------------------------------------------------- validation
def _bare(exc: Exception) -> str:
    return str(exc).rstrip(".")


def range_text(setting: Setting) -> str:
    """' between LO and HI', ' of LO or more' or '': the setting's range, for messages."""
    lo, hi = setting.minimum, setting.maximum
    if lo is not None and hi is not None:
        return f" between {_show(lo)} and {_show(hi)}"
    if lo is not None:
        return f" at least {_show(lo)}"
    return ""


def _check(setting: Setting, value: Any, base: Path) -> Any:
    """``value`` (as TOML or Python gives it) made the setting's type, or InvalidParameterError."""
    name = setting.key.removeprefix("params.")
    if setting.key.startswith("params.") and name in PARAM_SPECS:
        spec = PARAM_SPECS[name]
        if spec.auto and isinstance(value, str):  # "auto", "none", "off" (TOML has no null)
            return spec.parse(value)
        if spec.optional and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "a whole number" if spec.kind is int else "a number"
            raise InvalidParameterError(f"{name} must be {kind} {spec.range_text()} (got {_show(value)})")
        return spec.check(value)
    if setting.key == "params.stop":
        stop = (value,) if isinstance(value, str) else value
        if stop is None:
            return ()
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
            raise InvalidParameterError(f"stop must be a list of strings (got {_show(value)})")
        return SamplingParams(stop=tuple(stop)).stop
    if value is None or (isinstance(value, str) and not value.strip() and setting.optional):
        if setting.optional:
            return None
        raise InvalidParameterError(f"{name} needs a value")
    if setting.kind == "true or false":
        if not isinstance(value, bool):
            raise InvalidParameterError(f"{name} must be true or false (got {_show(value)})")
        return value
    if setting.kind == "whole number":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidParameterError(f"{name} must be a whole number{range_text(setting)} (got {_show(value)})")
        if (setting.minimum is not None and value < setting.minimum) or (
                setting.maximum is not None and value > setting.maximum):
            raise InvalidParameterError(f"{name} must be{range_text(setting)} (got {value})")
        return value
    if setting.check is not None:
        return setting.check(value)
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise InvalidParameterError(f"{name} must be a non-empty string (got {_show(value)})")
    if setting.choices:
        choice = str(value).strip().lower()
        if choice not in setting.choices:
            raise InvalidParameterError(f"{name} must be one of {', '.join(setting.choices)} "
                                        f"(got {_show(value)}){_suggest(choice, setting.choices)}")
        return choice
    if setting.kind == "url":
        from .server_url import normalize_base_url

        try:
            return normalize_base_url(str(value))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{name} {_bare(exc).removeprefix('the base URL ')}") from None
    if setting.kind == "variable name":
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(value).strip()):
            # The value is not echoed: it may be the key itself, put here by mistake.
            raise InvalidParameterError(f"{name} must be the name of an environment variable, such as "
                                        "MY_SERVER_KEY: the key itself goes in that variable, never in a "
                                        "file or on the command line")
        return str(value).strip()
    if setting.kind == "path":
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path
    return value


def _apply(config: Config, changes: Mapping[str, Any]) -> Config:
    top = {k: v for k, v in changes.items() if "." not in k}
    params = {k.partition(".")[2]: v for k, v in changes.items() if k.startswith("params.")}
    keys = {k.partition(".")[2]: v for k, v in changes.items() if k.startswith("keys.")}
    if params:
        top["params"] = config.params.replace(**params)
    if keys:
        top["keys"] = {**config.keys, **keys}
    return dataclasses.replace(config, **top)


def _suggest(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _FileProblem(Exception):
    """A problem of one key: ``where`` its key path (for the line), ``key`` the setting it
    leaves out (dotted; None: no setting), ``detail`` the known names (terminals only)."""

    def __init__(self, message: str, where: tuple[str, ...] = (), *, key: str | None = None,
                 detail: str = "") -> None:
        super().__init__(message)
        self.where = where
        self.key = key
        self.detail = detail


def _read_document(data: Mapping[str, Any], base: Path,
                   key_ids: Collection[str] | None) -> tuple[dict[str, Any], list[_FileProblem]]:
    """Check a parsed file key by key: ``{dotted key: value}`` for the good ones, and a
    problem for each bad one (left out; the others still apply). Bounded by the file
    (at most 1 MiB)."""
    values: dict[str, Any] = {}
    problems: list[_FileProblem] = []

    def check(key: str, item: Any, where: tuple[str, ...]) -> None:
        try:
            values[key] = _check(SETTINGS_BY_KEY[key], item, base)
        except InvalidParameterError as exc:
            problems.append(_FileProblem(_bare(exc), where, key=key))

    for key, value in data.items():
        if key == "params":
            if not isinstance(value, Mapping):
                problems.append(_FileProblem(f"params must be a table ([params]), not {_show(value)}", ("params",),
                                             key="params"))
                continue
            for name, item in value.items():
                if name not in PARAM_KEYS:
                    problems.append(_FileProblem(f"unknown key '{name}' in [params]{_suggest(name, PARAM_KEYS)}",
                                                 ("params", name), detail=f"known: {', '.join(PARAM_KEYS)}"))
                    continue
                check(f"params.{name}", item, ("params", name))
        elif key == "keys":
            if not isinstance(value, Mapping):
                problems.append(_FileProblem(f"keys must be a table ([keys]), not {_show(value)}", ("keys",),
                                             key="keys"))
                continue
            for name, item in value.items():
                try:
                    values[f"keys.{name}"] = _binding(name, item, key_ids)
                except _FileProblem as exc:
                    problems.append(exc)
        elif key == "presets":
            problems.extend(_preset_problems(value, base))
        elif key in SETTINGS_BY_KEY:
            check(key, value, (key,))
        else:
            hint = (f" ({key} belongs in the [params] table)" if key in PARAM_KEYS
                    else _suggest(key, TOP_LEVEL))
            problems.append(_FileProblem(f"unknown key '{key}'{hint}", (key,), detail=f"known: {', '.join(TOP_LEVEL)}"))
    return values, problems


def _binding(name: str, item: Any, key_ids: Collection[str] | None) -> str:
    """A ``[keys]`` entry checked: its key string, or _FileProblem."""
    where, key = ("keys", name), f"keys.{name}"
    if isinstance(item, Mapping):
        raise _FileProblem(f"keys.{name} is a table: quote binding ids that contain a dot "
                           f"(\"{name}.…\" = \"key\")", where, key=key)
    if key_ids is not None and name not in key_ids:
        raise _FileProblem(f"unknown binding id '{name}' in [keys]{_suggest(name, key_ids)}", where, key=key,
                           detail=f"known: {', '.join(sorted(key_ids))}")
    if not isinstance(item, str) or not item.strip():
        raise _FileProblem(f"keys.{name} must be a key string such as \"ctrl+t\" or \"f12,ctrl+t\" "
                           f"(got {_show(item)})", where, key=key)
    # What a key string may be is the app's (app/keynames.py): its binding ids check them.
    check = getattr(key_ids, "key_problem", None)
    problem = check(item) if check is not None else None
    if problem:
        raise _FileProblem(f"keys.{name} = {_show(item)} is not a valid key: {problem}", where, key=key)
    return item.replace(" ", "")


def _preset_problems(table: Any, base: Path) -> list[_FileProblem]:
    """The ``[presets.NAME]`` tables' problems, one per bad preset (engine/settings/presets.py checks
    them; the chat and ``run`` read the good ones from there)."""
    try:
        from .presets import MAX_PRESETS, PresetProblem, Rules, parse_preset, parse_presets
    except ImportError:  # pragma: no cover - presets are not part of this build
        return [_FileProblem("unknown key 'presets'", ("presets",))]
    problems: list[_FileProblem] = []
    rules = Rules(lambda key, value, at: _check(SETTINGS_BY_KEY[key], value, at), PARAM_KEYS)  # this file's own
    try:  # the table itself (a table of tables, not too many)
        parse_presets({} if isinstance(table, Mapping) and len(table) <= MAX_PRESETS else table, base, rules)
    except PresetProblem as exc:
        return [_FileProblem(str(exc), tuple(exc.where), key="presets")]
    for name, value in table.items():
        try:
            parse_preset(name, value, base, rules)
        except PresetProblem as exc:
            problems.append(_FileProblem(str(exc), tuple(exc.where), key=f"presets.{name}"))
    return problems


def _from_text(setting: Setting, raw: str) -> Any:
    """A setting typed as text (an environment variable)."""
    if setting.key == "params.stop":
        return _check(setting, [s for s in raw.split("|") if s], Path.cwd())
    if setting.key.startswith("params.") and setting.name in PARAM_SPECS:
        return PARAM_SPECS[setting.name].parse(raw)
    if setting.kind == "true or false":
        word = raw.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
        raise InvalidParameterError(f"{setting.name} must be true or false (1/0, yes/no, on/off; got {raw!r})")
    if setting.kind == "whole number":
        try:
            value: Any = int(raw.strip())
        except ValueError:
            raise InvalidParameterError(
                f"{setting.name} must be a whole number{range_text(setting)} (got {raw!r})") from None
        return _check(setting, value, Path.cwd())
    return _check(setting, raw, Path.cwd())


