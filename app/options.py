"""Command-line options shared by ``vibechat`` (the TUI) and ``vibechat run``, built from the
settings table (engine/settings/table.py ``SETTINGS``): each setting with a flag is one option
(``setting_option``: its flag, short alias, metavar, line and panel are the table's), and
``setting_options`` gives a command all of them as one ``SettingFlags`` parameter.

Numeric sampling flags are read as text and parsed by the engine's
``PARAM_SPECS``, so a bad value gets the same one-line message everywhere.
``with_flags`` lays the flags over the loaded config (flag > env > file > default).

The engine flags given travel as ``{config key: value}`` (the names of
``EngineSettings`` in engine/settings/knobs.py, ``None`` not given); each flag's name, for
messages and ``config show``, is the one the config's settings table records.

Imports inside functions are deliberate: the config checks load only when an option's value is
checked (start-up time).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import typer

from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.settings.knobs import ENGINE_SETTING_KEYS
from vibechat.engine.settings.params import PARAM_SPECS, SamplingParams
from vibechat.engine.settings.setting import ENGINE as ENGINE_GROUP
from vibechat.engine.settings.setting import REMOTE as REMOTE_GROUP
from vibechat.engine.settings.setting import SAMPLING as SAMPLING_GROUP
from vibechat.engine.settings.setting import Setting
from vibechat.engine.settings.table import SETTINGS, SETTINGS_BY_KEY


def _number_check(name: str) -> Any:
    """A sampling flag's callback: a value that is not a number at all (``-n abc``) is a
    malformed command line, a usage error (exit 2) in the command's own words, like any
    option of the wrong type; a number out of range is a bad value, said later by
    ``PARAM_SPECS`` (exit 1), as in the config file and ``/set``."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
        if value is not None and not _is_number_or_word(name, value):
            spec = PARAM_SPECS[name]
            kind = "a whole number" if spec.kind is int else "a number"
            flag = SETTINGS_BY_KEY[f"params.{name}"].flag
            shown = value if len(value) <= 40 else value[:39] + "…"
            usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
            raise usage_error(f"{flag} must be {kind} {spec.range_text()} (got {shown!r})", ctx=ctx)
        return value

    return check


def _is_number_or_word(name: str, value: str) -> bool:
    """Whether ``value`` is what the flag takes, range aside: a number of its kind or one of
    its words (``auto``, ``none``...)."""

    spec = PARAM_SPECS[name]
    try:
        spec.parse(value)
    except InvalidParameterError:
        try:
            int(value.strip()) if spec.kind is int else float(value.strip())
        except ValueError:
            return False
    return True


PANELS = {
    SAMPLING_GROUP: "Sampling",
    ENGINE_GROUP: "Model and engine",
    REMOTE_GROUP: "Remote server",
}
SAMPLING, ENGINE, REMOTE = (PANELS[g] for g in (SAMPLING_GROUP, ENGINE_GROUP, REMOTE_GROUP))


def setting_option(key: str) -> Any:
    """The typer option of the setting ``key`` (dotted), built from its row of the settings
    table: its flag and short alias, metavar, the flag's line and panel. A sampling number is
    read as text and parsed by ``PARAM_SPECS`` (one message everywhere); ``--stop`` repeats."""
    setting = SETTINGS_BY_KEY[key]
    assert setting.flag, f"{key} has no flag"
    names = [setting.flag, *([setting.short] if setting.short else [])]
    extra: dict[str, Any] = {}
    if setting.group:
        extra["rich_help_panel"] = PANELS[setting.group]
    kind: Any = str
    if key == "params.stop":
        kind = list[str]
    elif key.startswith("params.") and setting.name in PARAM_SPECS:
        extra["callback"] = _number_check(setting.name)
    elif setting.kind == "whole number":
        kind = int
    return Annotated[
        kind | None, typer.Option(*names, metavar=setting.metavar, help=setting.flag_help, **extra)
    ]


def option_name(setting: Setting) -> str:
    """The command's parameter for a setting's flag: the config key (``params.``'s bare name;
    ``system`` for the system prompt, as the commands always called it)."""
    return "system" if setting.key == "system_prompt" else setting.name


def flagged_settings() -> list[Setting]:
    """The settings that have a flag, in the help pages' order: the model, the system prompt,
    then sampling, the engine and the remote server, each in the table's order."""
    flagged = [s for s in SETTINGS if s.flag]
    first = [SETTINGS_BY_KEY["model"], SETTINGS_BY_KEY["system_prompt"]]
    rest = [s for s in flagged if s not in first]
    order = {SAMPLING_GROUP: 0, ENGINE_GROUP: 1, REMOTE_GROUP: 2}
    return first + sorted(rest, key=lambda s: order.get(s.group or "", 3))


HISTORY = "History"
STRUCTURED = "Structured output"
NoSaveOpt = Annotated[
    bool,
    typer.Option(
        "--no-save", help="Do not save this chat in the history.", rich_help_panel=HISTORY
    ),
]


# Engine flags as typed, by config key (EngineSettings' names).
EngineFlags = Mapping[str, Any]


def engine_flags(**given: Any) -> dict[str, Any]:
    """The engine flags given on the command line, by config key; ``None``: not given."""

    unknown = set(given) - set(ENGINE_SETTING_KEYS)
    if unknown:
        raise TypeError(f"not engine settings: {', '.join(sorted(unknown))}")
    return {key: value for key, value in given.items() if value is not None}


@dataclass
class SamplingChoice:
    """Sampling flags as typed (``None`` = not given)."""

    values: dict[str, str | None] = field(default_factory=dict)
    stop: list[str] | None = None
    # --thinking (--think): auto, on, off, low, medium or high.
    thinking: str | None = None

    def __post_init__(self) -> None:
        # A shell cannot type a newline in a flag: "\n" stands for one, as in llama-cli.
        if self.stop:
            self.stop = [unescape(s) for s in self.stop]

    def to_params(self, base=None):
        """Validated ``SamplingParams``: ``base`` (or the defaults) with the given flags applied."""
        changes: dict[str, object] = {}
        for name, raw in self.values.items():
            if raw is not None:
                changes[name] = PARAM_SPECS[name].parse(raw)
        if self.stop:
            changes["stop"] = tuple(self.stop)
        if self.thinking is not None:
            changes["thinking"] = self.thinking
        base = base or SamplingParams()
        return base.replace(**changes)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape(text: str) -> str:
    """``\\n``, ``\\t``, ``\\r`` and ``\\\\`` in a flag's text as the characters they name;
    any other backslash stays as typed."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def check_engine_numbers(values: EngineFlags) -> None:
    """Each whole number (engine settings by config key) within its setting's range, named
    by its flag."""
    from vibechat.engine.settings.config_check import range_text

    for key, value in values.items():
        setting = SETTINGS_BY_KEY[key]
        if value is None or setting.kind != "whole number":
            continue
        if (setting.minimum is not None and value < setting.minimum) or (
            setting.maximum is not None and value > setting.maximum
        ):
            raise InvalidParameterError(
                f"{setting.flag or key} must be{range_text(setting)} (got {value})."
            )


def with_flags(loaded, engine: EngineFlags, sampling: SamplingChoice, system: str | None):
    """``loaded`` (a ``LoadedConfig``) with the command-line flags on top (``engine``: the
    engine flags given, by config key); each value given on the command line is recorded as
    coming from its flag."""
    # Flag errors keep their own wording.
    check_engine_numbers(engine)
    values: dict[str, object] = {}
    flags: dict[str, str] = {}
    for key, value in engine.items():
        if value is not None:
            values[key], flags[key] = value, SETTINGS_BY_KEY[key].flag or key
    # --base-url alone means a server.
    if engine.get("base_url") is not None and engine.get("backend") is None:
        values["backend"], flags["backend"] = (
            "openai",
            SETTINGS_BY_KEY["base_url"].flag or "base_url",
        )
    if system is not None:
        values["system_prompt"] = system
    for name, raw in sampling.values.items():
        # "--seed none" is given too: it overrides a configured seed.
        if raw is not None:
            values[f"params.{name}"] = PARAM_SPECS[name].parse(raw)
    if sampling.stop:
        values["params.stop"] = tuple(sampling.stop)
    if sampling.thinking is not None:
        values["params.thinking"] = sampling.thinking
    # Each value is said to come from its flag, as the table names it.
    for key in values:
        flags.setdefault(key, SETTINGS_BY_KEY[key].flag or key)
    return loaded.with_flags(values, flags)


@dataclass(frozen=True)
class SettingFlags:
    """Every setting's flag as given on the command line, in one value: ``engine`` (the engine
    flags given, by config key), ``sampling`` (as typed) and ``system`` (``--system``)."""

    engine: Mapping[str, Any] = field(default_factory=dict)
    sampling: SamplingChoice = field(default_factory=SamplingChoice)
    system: str | None = None

    NONE: ClassVar[SettingFlags]  # nothing given

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> SettingFlags:
        """The flags from the options ``setting_options`` added, by parameter name."""

        engine = engine_flags(**{k: given[k] for k in ENGINE_SETTING_KEYS if k in given})
        values = {name: given.get(name) for name in PARAM_SPECS}
        sampling = SamplingChoice(
            values=values, stop=given.get("stop"), thinking=given.get("thinking")
        )
        return cls(engine, sampling, given.get("system"))

    def as_tuple(self) -> tuple[Mapping[str, Any], SamplingChoice, str | None]:
        """``(engine, sampling, system)``: what ``with_flags`` takes after the config."""
        return self.engine, self.sampling, self.system

    def apply(self, loaded):
        """``loaded`` (a ``LoadedConfig``) with these flags on top (``with_flags``)."""
        return with_flags(loaded, self.engine, self.sampling, self.system)


SettingFlags.NONE = SettingFlags()


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command one option per setting with a flag, built from the settings table,
    where its parameter annotated ``SettingFlags`` stands; the command is called with one
    ``SettingFlags`` there. Put it under ``@app.command()``: typer reads the signature made here."""
    signature = inspect.signature(command)
    hints = typing.get_type_hints(command, include_extras=True)
    placeholder = next(name for name in signature.parameters if hints.get(name) is SettingFlags)
    added = [
        inspect.Parameter(
            option_name(s),
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=setting_option(s.key),
        )
        for s in flagged_settings()
    ]
    names = {p.name for p in added}
    clash = names & (set(signature.parameters) - {placeholder})
    if clash:
        raise TypeError(
            f"{command.__name__} already has parameters named {', '.join(sorted(clash))}"
        )
    params: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        # Annotations resolved (not strings): typer reads them as they are.
        p = p.replace(annotation=hints.get(p.name, p.annotation))
        if p.name == placeholder:
            params += added
        else:
            params.append(
                p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                if p.kind is p.POSITIONAL_OR_KEYWORD
                and params
                and params[-1].kind is inspect.Parameter.KEYWORD_ONLY
                else p
            )

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in names if name in kwargs}
        kwargs[placeholder] = SettingFlags.of(given)
        return command(*args, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


# `vibechat run`'s attachments (app/commands/run_input.py reads them before the model loads).
ATTACHMENTS = "Attachments"
ImageOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        metavar="PATH",
        help="Attach an image (PNG, JPEG, GIF, WebP, BMP) to the prompt, for a vision model "
        "(repeatable). A local model needs its projector (--mmproj); a server's model must "
        "take images.",
        rich_help_panel=ATTACHMENTS,
    ),
]
FileOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--file",
        metavar="PATH",
        help="Attach a text file to the prompt (repeatable): the model is given its name and "
        "text, before the prompt (bounded: longer files are cut, with a note).",
        rich_help_panel=ATTACHMENTS,
    ),
]
