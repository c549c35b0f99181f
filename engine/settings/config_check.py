"""A setting's value checked: as TOML, a flag or the chat gives it (``check_value``), or as an
environment variable's text (``from_text``), and a config file's parsed document checked key by
key (``read_document``: each bad key a problem of its own, the others apply). Every rule comes
from the settings table (table.py).

Imports inside functions are deliberate: the preset rules and the server URL check load only
when a config names them (start-up time)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidParameterError
from .params import PARAM_SPECS, SamplingParams
from .setting import Setting
from .setting import show as _show
from .table import PARAM_KEYS, SCHEMA, SETTINGS_BY_KEY, Config, EntryProblem, Schema

# A true-or-false setting in an environment variable.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


# ------------------------------------------------------------- validation
def bare_message(exc: Exception) -> str:
    return str(exc).rstrip(".")


def range_text(setting: Setting) -> str:
    """' between LO and HI', ' of LO or more' or '': the setting's range, for messages."""
    lo, hi = setting.minimum, setting.maximum
    if lo is not None and hi is not None:
        return f" between {_show(lo)} and {_show(hi)}"
    if lo is not None:
        return f" at least {_show(lo)}"
    return ""


def check_value(setting: Setting, value: Any, base: Path) -> Any:
    """``value`` (as TOML or Python gives it) made the setting's type, or InvalidParameterError."""
    name = setting.key.removeprefix("params.")
    if setting.key.startswith("params.") and name in PARAM_SPECS:
        spec = PARAM_SPECS[name]
        # "auto", "none", "off" (TOML has no null).
        if spec.auto and isinstance(value, str):
            return spec.parse(value)
        if spec.optional and (
            value is None or (isinstance(value, str) and value.strip().lower() == "none")
        ):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "a whole number" if spec.kind is int else "a number"
            raise InvalidParameterError(
                f"{name} must be {kind} {spec.range_text()} (got {_show(value)})"
            )
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
            raise InvalidParameterError(
                f"{name} must be a whole number{range_text(setting)} (got {_show(value)})"
            )
        if (setting.minimum is not None and value < setting.minimum) or (
            setting.maximum is not None and value > setting.maximum
        ):
            raise InvalidParameterError(f"{name} must be{range_text(setting)} (got {value})")
        return value
    if setting.check is not None:
        return setting.check(value)
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise InvalidParameterError(f"{name} must be a non-empty string (got {_show(value)})")
    if setting.choices:
        choice = str(value).strip().lower()
        if choice not in setting.choices:
            raise InvalidParameterError(
                f"{name} must be one of {', '.join(setting.choices)} "
                f"(got {_show(value)}){_suggest(choice, setting.choices)}"
            )
        return choice
    if setting.kind == "url":
        from .server_url import normalize_base_url

        try:
            return normalize_base_url(str(value))
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                f"{name} {bare_message(exc).removeprefix('the base URL ')}"
            ) from None
    if setting.kind == "variable name":
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(value).strip()):
            # The value is not echoed: it may be the key itself, put here by mistake.
            raise InvalidParameterError(
                f"{name} must be the name of an environment variable, such as "
                "MY_SERVER_KEY: the key itself goes in that variable, never in a "
                "file or on the command line"
            )
        return str(value).strip()
    if setting.kind == "path":
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path
    return value


C = TypeVar("C", bound=Config)


def apply_changes(config: C, changes: Mapping[str, Any]) -> C:
    """``config`` with ``changes`` (checked values, by dotted key) on top: ``params.*`` into
    the sampling parameters, ``TABLE.name`` (a text table's entry) into that
    table, the rest as fields."""
    top: dict[str, Any] = {}
    params: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        head, dot, name = key.partition(".")
        if not dot:
            top[key] = value
        elif head == "params":
            params[name] = value
        else:
            tables.setdefault(head, {})[name] = value
    if params:
        top["params"] = config.params.replace(**params)
    for head, entries in tables.items():
        top[head] = {**getattr(config, head), **entries}
    return dataclasses.replace(config, **top)


def suggest(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` when one of ``choices`` is close to ``word``, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


_suggest = suggest


class _FileProblem(Exception):
    """A problem of one key: ``where`` its key path (for the line), ``key`` the setting it
    leaves out (dotted; None: no setting), ``detail`` the known names (terminals only)."""

    def __init__(
        self, message: str, where: tuple[str, ...] = (), *, key: str | None = None, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.where = where
        self.key = key
        self.detail = detail


def read_document(
    data: Mapping[str, Any], base: Path, schema: Schema = SCHEMA
) -> tuple[dict[str, Any], list[_FileProblem]]:
    """Check a parsed file key by key against ``schema``: ``{dotted key: value}`` for the good
    ones, and a problem for each bad one (left out; the others still apply). Bounded by the file
    (at most 1 MiB)."""
    values: dict[str, Any] = {}
    problems: list[_FileProblem] = []

    def check(key: str, item: Any, where: tuple[str, ...]) -> None:
        try:
            values[key] = check_value(schema.by_key[key], item, base)
        except InvalidParameterError as exc:
            problems.append(_FileProblem(bare_message(exc), where, key=key))

    for key, value in data.items():
        if key == "params":
            if not isinstance(value, Mapping):
                problems.append(
                    _FileProblem(
                        f"params must be a table ([params]), not {_show(value)}",
                        ("params",),
                        key="params",
                    )
                )
                continue
            for name, item in value.items():
                if name not in PARAM_KEYS:
                    problems.append(
                        _FileProblem(
                            f"unknown key '{name}' in [params]{_suggest(name, PARAM_KEYS)}",
                            ("params", name),
                            detail=f"known: {', '.join(PARAM_KEYS)}",
                        )
                    )
                    continue
                check(f"params.{name}", item, ("params", name))
        elif key in schema.tables:
            if not isinstance(value, Mapping):
                problems.append(
                    _FileProblem(
                        f"{key} must be a table ([{key}]), not {_show(value)}", (key,), key=key
                    )
                )
                continue
            entry = schema.tables[key].metadata["check"]
            for name, item in value.items():
                try:
                    values[f"{key}.{name}"] = entry(name, item)
                except EntryProblem as exc:
                    # The table's own words, as they are.
                    problems.append(
                        _FileProblem(str(exc), (key, name), key=f"{key}.{name}", detail=exc.detail)
                    )
                except InvalidParameterError as exc:
                    problems.append(
                        _FileProblem(bare_message(exc), (key, name), key=f"{key}.{name}")
                    )
        elif key == "presets":
            problems.extend(_preset_problems(value, base))
        elif key in schema.by_key:
            check(key, value, (key,))
        else:
            hint = (
                f" ({key} belongs in the [params] table)"
                if key in PARAM_KEYS
                else _suggest(key, schema.top_level)
            )
            problems.append(
                _FileProblem(
                    f"unknown key '{key}'{hint}",
                    (key,),
                    detail=f"known: {', '.join(schema.top_level)}",
                )
            )
    return values, problems


def _preset_problems(table: Any, base: Path) -> list[_FileProblem]:
    """The ``[presets.NAME]`` tables' problems, one per bad preset
    (engine/settings/presets.py checks them; the chat and ``run`` read the good ones from
    there)."""
    try:
        from .presets import MAX_PRESETS, PresetProblem, Rules, parse_preset, parse_presets
    except ImportError:  # pragma: no cover - presets are not part of this build
        return [_FileProblem("unknown key 'presets'", ("presets",))]
    problems: list[_FileProblem] = []
    # This file's own rules.
    rules = Rules(lambda key, value, at: check_value(SETTINGS_BY_KEY[key], value, at), PARAM_KEYS)
    # The table itself (a table of tables, not too many).
    try:
        parse_presets(
            {} if isinstance(table, Mapping) and len(table) <= MAX_PRESETS else table, base, rules
        )
    except PresetProblem as exc:
        return [_FileProblem(str(exc), tuple(exc.where), key="presets")]
    for name, value in table.items():
        try:
            parse_preset(name, value, base, rules)
        except PresetProblem as exc:
            problems.append(_FileProblem(str(exc), tuple(exc.where), key=f"presets.{name}"))
    return problems


def value_from_text(setting: Setting, raw: str) -> Any:
    """A setting typed as text (an environment variable)."""
    if setting.key == "params.stop":
        return check_value(setting, [s for s in raw.split("|") if s], Path.cwd())
    if setting.key.startswith("params.") and setting.name in PARAM_SPECS:
        return PARAM_SPECS[setting.name].parse(raw)
    if setting.kind == "true or false":
        word = raw.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
        raise InvalidParameterError(
            f"{setting.name} must be true or false (1/0, yes/no, on/off; got {raw!r})"
        )
    if setting.kind == "whole number":
        try:
            value: Any = int(raw.strip())
        except ValueError:
            raise InvalidParameterError(
                f"{setting.name} must be a whole number{range_text(setting)} (got {raw!r})"
            ) from None
        return check_value(setting, value, Path.cwd())
    return check_value(setting, raw, Path.cwd())
