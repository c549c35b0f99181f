"""Presets: named set-ups in the config file, as LM Studio's presets and Ollama's Modelfiles.

A preset is a ``[presets.NAME]`` table: a model, a system prompt, sampling parameters
(``[presets.NAME.params]``, the keys ``[params]`` takes), thinking, an output format and a
context size, each optional::

    [presets.coder]
    model = "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"
    system = "You are a terse senior engineer."
    thinking = "off"
    format = "json"
    [presets.coder.params]
    temperature = 0.2

Each value is checked by the config's own rules (``Rules``, handed in: a preset's
``temperature`` obeys exactly what ``[params]`` does); engine/settings/config.py checks the file's
``presets`` table through ``parse_preset`` (a bad preset is reported in one line naming the
file, the line, the preset and the key), and engine/settings/preset_file.py reads them one by one,
so that one bad preset leaves the others usable.

Precedence with ``--preset NAME``: flags > preset > ``VIBECHAT_*`` variables > file >
defaults: a preset named on purpose outranks the standing defaults, never a flag typed
beside it (``preset_file.apply_to_loaded``).

An Ollama Modelfile becomes a preset's table in engine/settings/modelfile.py.

Headless and free of config: engine/settings/config.py imports this module.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, VibechatError
from ..sanitize import sanitize
from .params import PARAM_SPECS, SamplingParams
from .structured import OutputFormat

# A config file holds a few; the loop over the table is bounded all the same.
MAX_PRESETS = 100
# A bare TOML key: [presets.NAME] needs no quotes.
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A preset's keys (besides params) and the config setting whose rules check each.
SETTING_OF = {
    "model": "model",
    "system": "system_prompt",
    "thinking": "params.thinking",
    "context_size": "context_size",
    "tool_choice": "tool_choice",
    "context_policy": "context_policy",
}
PRESET_KEYS = (
    "model",
    "system",
    "thinking",
    "format",
    "context_size",
    "tool_choice",
    "context_policy",
    "params",
)
FORMAT_OFF = ("off", "none", "free", "text")


class PresetProblem(ValueError):
    """A preset that cannot be used: the message (``preset 'NAME': ...``) and where in the
    file (a key path, for the line number)."""

    def __init__(self, message: str, where: tuple[str, ...]) -> None:
        super().__init__(message)
        self.where = where


@dataclass(frozen=True)
class Rules:
    """The config's own rules, handed in by its callers: engine/settings/config.py imports this
    module (to check the file's ``presets`` table), so this one cannot import it.

    ``check(key, value, base)``: ``value`` for the setting ``key`` (dotted: ``params.top_k``,
    ``system_prompt``), checked as the config file's would be (raises
    ``InvalidParameterError``); ``param_keys``: the keys ``[params]`` takes."""

    check: Callable[[str, Any, Path], Any]
    param_keys: Sequence[str]


def spelled(value: Any) -> str:
    """A value as the config file spells it, for messages."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "a table" if isinstance(value, Mapping) else str(value)


def _bare(exc: Exception) -> str:
    return str(exc).rstrip(".")


@dataclass(frozen=True)
class Preset:
    """One checked preset. ``None``: the preset leaves that setting as it is; ``system`` ""
    removes the system prompt; ``format`` is as written (``json``, ``off``, inline JSON
    Schema text, or a schema or grammar file's path, made absolute against the config
    file's folder) and read when the preset is applied."""

    name: str
    model: str | None = None
    system: str | None = None
    context_size: int | None = None
    # "none": this preset's model is offered no tools.
    tool_choice: str | None = None
    # What a prompt that would overflow the context does (trim, compact, stop).
    context_policy: str | None = None
    format: str | None = None
    # By [params] key, checked; thinking included.
    params: Mapping[str, Any] = field(default_factory=dict)

    def output_format(self) -> OutputFormat | None:
        """The format the preset asks for (None: free text); only where ``format`` is set.
        Raises ``InvalidParameterError`` naming the preset (a schema file gone, say)."""
        assert self.format is not None
        if self.format.strip().lower() in FORMAT_OFF:
            return None
        try:
            return OutputFormat.parse(self.format)
        except VibechatError as exc:
            raise InvalidParameterError(f"preset '{self.name}': format: {_bare(exc)}.") from None

    def settings(self) -> dict[str, Any]:
        """What the preset sets, by dotted config key (``params.output_format`` for the format)."""
        values: dict[str, Any] = {f"params.{name}": value for name, value in self.params.items()}
        if self.model is not None:
            values["model"] = self.model
        if self.system is not None:
            values["system_prompt"] = self.system or None
        if self.context_size is not None:
            values["context_size"] = self.context_size
        if self.tool_choice is not None:
            values["tool_choice"] = self.tool_choice
        if self.context_policy is not None:
            values["context_policy"] = self.context_policy
        if self.format is not None:
            values["params.output_format"] = self.output_format()
        return values

    def over(self, params: SamplingParams) -> SamplingParams:
        """``params`` with the preset's parameters, thinking and format on top (the chat's
        ``/preset``): what the preset leaves out stays as it was."""
        changes = {
            key.removeprefix("params."): value
            for key, value in self.settings().items()
            if key.startswith("params.")
        }
        return params.replace(**changes) if changes else params

    def to_table(self) -> dict[str, Any]:
        """The preset as its TOML table (what ``update_config`` writes)."""
        table: dict[str, Any] = {}
        for key in PRESET_KEYS[:-1]:
            value = self.params.get("thinking") if key == "thinking" else getattr(self, key)
            if value is not None:
                table[key] = value
        params = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in self.params.items()
            if k != "thinking" and v is not None
        }
        if params:
            table["params"] = params
        return table

    def summary(self) -> str:
        """The parameters in one line: ``temperature 0.2, top_k 40, thinking off, format json``."""
        parts = []
        for name, value in self.params.items():
            spec = PARAM_SPECS.get(name)
            shown = (
                spec.show(value)
                if spec is not None
                else (" | ".join(value) if isinstance(value, tuple) else str(value))
            )
            parts.append(f"{name} {shown}")
        if self.format is not None:
            parts.append(f"format {self.format if len(self.format) <= 24 else 'schema (inline)'}")
        if self.context_size is not None:
            parts.append(f"context {self.context_size}")
        if self.tool_choice is not None:
            parts.append(f"tool_choice {self.tool_choice}")
        if self.context_policy is not None:
            parts.append(f"context_policy {self.context_policy}")
        return ", ".join(parts)


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _checked(
    rules: Rules, preset: str, key: str, value: Any, base: Path, where: tuple[str, ...]
) -> Any:
    """``value`` checked by the config setting ``key``'s rules (the same as the file's)."""
    try:
        return rules.check(key, value, base)
    except InvalidParameterError as exc:
        raise PresetProblem(f"preset '{preset}': {_bare(exc)}", where) from None


def _format_text(preset: str, value: Any, base: Path, where: tuple[str, ...]) -> str:
    """A preset's ``format``: json, off, inline JSON (a schema: parsed now), or a file's path
    (absolute against the config's folder; read when the preset is applied)."""
    if not isinstance(value, str) or not value.strip():
        raise PresetProblem(
            f'preset \'{preset}\': format must be "json", "off", a JSON Schema (inline JSON or '
            f"a file) or a .gbnf grammar file (got {spelled(value)})",
            where,
        )
    raw = value.strip()
    if raw.lower() == "json" or raw.lower() in FORMAT_OFF:
        return raw.lower()
    if raw.startswith("{"):
        try:
            OutputFormat.parse(raw)
        except VibechatError as exc:
            raise PresetProblem(f"preset '{preset}': format: {_bare(exc)}", where) from None
        return raw
    path = Path(raw).expanduser()
    return str(path if path.is_absolute() else base / path)


def parse_preset(name: str, table: Any, base: Path, rules: Rules) -> Preset:
    """One ``[presets.NAME]`` table, checked by the config's ``rules``; raises ``PresetProblem``
    (one line, naming the preset and the key). ``base``: the config file's folder (relative
    paths)."""
    where: tuple[str, ...] = ("presets", name)
    if not NAME_RE.fullmatch(name):
        raise PresetProblem(
            f"preset name {spelled(sanitize(name)[:70])} is not usable: use "
            "letters, digits, - and _ (at most 64)",
            where,
        )
    if not isinstance(table, Mapping):
        raise PresetProblem(
            f"presets.{name} must be a table ([presets.{name}]), not {spelled(table)}", where
        )
    fields: dict[str, Any] = {}
    params: dict[str, Any] = {}
    for key, value in table.items():
        at = (*where, key)
        if key == "params":
            if not isinstance(value, Mapping):
                raise PresetProblem(
                    f"preset '{name}': params must be a table ([presets.{name}.params]), "
                    f"not {spelled(value)}",
                    at,
                )
            for param, item in value.items():
                if param not in rules.param_keys:
                    raise PresetProblem(
                        f"preset '{name}': unknown key '{param}' in "
                        f"[presets.{name}.params]{_suggest(param, rules.param_keys)}; "
                        f"known: {', '.join(rules.param_keys)}",
                        (*at, param),
                    )
                if param == "thinking" and "thinking" in params:
                    raise PresetProblem(
                        f"preset '{name}': thinking is set twice (thinking and params.thinking): "
                        "keep one",
                        (*at, param),
                    )
                params[param] = _checked(rules, name, f"params.{param}", item, base, (*at, param))
        elif key == "format":
            fields["format"] = _format_text(name, value, base, at)
        elif key == "system" and value == "":
            # No system prompt at all.
            fields["system"] = ""
        elif key in SETTING_OF:
            checked = _checked(rules, name, SETTING_OF[key], value, base, at)
            if key == "thinking":
                if "thinking" in params:
                    raise PresetProblem(
                        f"preset '{name}': thinking is set twice (thinking and params.thinking): "
                        "keep one",
                        at,
                    )
                params["thinking"] = checked
            else:
                fields[key] = checked
        else:
            hint = (
                f" ({key} belongs in the [presets.{name}.params] table)"
                if key in rules.param_keys
                else _suggest(key, PRESET_KEYS)
            )
            raise PresetProblem(
                f"preset '{name}': unknown key '{key}'{hint}; known: {', '.join(PRESET_KEYS)}", at
            )
    return Preset(name=name, params=params, **fields)


def parse_presets(table: Any, base: Path, rules: Rules) -> dict[str, Preset]:
    """The ``presets`` table, checked (the config loader's hook); the first problem raises
    ``PresetProblem``."""
    if not isinstance(table, Mapping):
        raise PresetProblem(
            f"presets must be a table of presets ([presets.NAME]), not {spelled(table)}",
            ("presets",),
        )
    if len(table) > MAX_PRESETS:
        raise PresetProblem(
            f"presets holds {len(table)} presets, more than {MAX_PRESETS}: keep fewer", ("presets",)
        )
    return {name: parse_preset(name, value, base, rules) for name, value in table.items()}
