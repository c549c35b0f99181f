"""The settings table: every setting once, with its name, type, default, flag, variable, config
key and help. ``Config`` is what the config file can set for the engine and ``vibechat run``: the
engine's settings (``EngineSettings``, engine/settings/knobs.py, whose fields carry their rows) and
a few of the file's own; the sampling parameters' rows are made from their one declaration
(``PARAM_SPECS``, params.py), the stop strings' and the thinking switch's are written here.

A ``Schema`` flattens a ``Config`` class into one list of rows that drives the config file's
checks (config_check.py), the ``VIBECHAT_*`` variables, the commented template and the docs'
table (config_doc.py), ``vibechat config show``, and the command-line flags (app/options.py).
The app declares its own settings (app/appconfig.py) as fields of a subclass of ``Config``
and loads the file with that class's schema; the engine never names them. A subclass may add
a table of text entries (``text_table``: name = "text", each entry checked by the function its
field carries).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from .knobs import EngineSettings
from .params import LENS_HISTORY_BYTES, MAX_STOP_STRINGS, PARAM_SPECS, SamplingParams
from .setting import SAMPLING, Setting, doc, show
from .think_switch import DEFAULT_THINKING, THINKING_MODES, check_thinking
from .tool_checks import (
    BUILTIN_TOOL_NAMES,
    TOOL_CHOICES,
    check_builtin_tools,
    check_tool_choice,
    check_tool_folders,
    check_tool_patterns,
)


def param_flag_help(name: str) -> str:
    """A sampling parameter's flag line: its words (``ParamSpec.flag_words``, with its range),
    then its default, all from its one declaration."""
    spec = PARAM_SPECS[name]
    return f"{spec.flag_words.format(range=spec.span())} (default {spec.default_text()})."


@dataclass(frozen=True)
class Config(EngineSettings):
    """What the config file can set for the engine and ``vibechat run``; the defaults are the
    values with no file. The engine's settings come first (``EngineSettings``), then the file's
    own. The app's settings are a subclass's fields (app/appconfig.py ``AppConfig``)."""

    system_prompt: str | None = field(
        default=None,
        metadata=doc(
            "The system prompt of every new conversation.",
            kind="text",
            example='"You are a concise assistant."',
            unset="none",
            env="VIBECHAT_SYSTEM_PROMPT",
            flag="--system",
            short="-s",
            metavar="TEXT",
            flag_help="System prompt.",
        ),
    )
    save_runs: bool = field(
        default=True,
        metadata=doc(
            "Save each 'vibechat run' (and each line of --prompts-file) in the history, as "
            "--no-save does not; false keeps scripts out of it (--continue and --conversation "
            "still add to a saved conversation).",
            kind="true or false",
            example="false",
            env="VIBECHAT_SAVE_RUNS",
        ),
    )
    model_titles: bool = field(
        default=True,
        metadata=doc(
            "In the chat, an instruct model (one with a chat template) writes each new "
            "conversation's title after its first reply, while it is idle; false (or a base "
            "model): the title is your first prompt's first line, never the reply's words. A "
            "title you give (rename) is always kept.",
            kind="true or false",
            example="false",
            env="VIBECHAT_MODEL_TITLES",
        ),
    )
    models_dir: Path | None = field(
        default=None,
        metadata=doc(
            "Where downloaded models go; a relative path is relative to this file's folder.",
            kind="path",
            example='"~/models/vibechat"',
            unset="'models' in the data folder",
            env="VIBECHAT_MODELS_DIR",
        ),
    )
    builtin_tools: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            f"The built-in tools the model is offered ({', '.join(BUILTIN_TOOL_NAMES)}); none "
            "until named here. Each call still asks first (or needs --allow-tool in "
            "'vibechat run'). In the variable, separate them with commas.",
            kind="list of text",
            example='["current_time", "read_file", "list_folder"]',
            env="VIBECHAT_BUILTIN_TOOLS",
            check=check_builtin_tools,
        ),
    )
    tool_folders: tuple[Path, ...] = field(
        default=(),
        metadata=doc(
            "The folders read_file and list_folder may read (with what is below "
            "them; absolute paths, ~ allowed); none: they read nothing. In the "
            "variable, separate them as in PATH.",
            kind="list of paths",
            example='["~/notes"]',
            env="VIBECHAT_TOOL_FOLDERS",
            check=check_tool_folders,
        ),
    )
    allowed_tools: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Tools that run without asking: SERVER/NAME, SERVER/* (all of a server's "
            "tools), builtin/NAME; the chat's 'Always allow' adds to it. In the "
            "variable, separate them with commas.",
            kind="list of text",
            example='["time/get_current_time", "builtin/current_time"]',
            env="VIBECHAT_ALLOWED_TOOLS",
            check=check_tool_patterns,
        ),
    )
    tool_choice: str = field(
        default="auto",
        metadata=doc(
            "Whether a reply is offered the configured tools: auto (the model decides), none (no "
            "tools are offered: the chat starts no MCP server and says nothing of tools; a "
            "preset's tool_choice does it for one model), or required ('vibechat run' only: the "
            "model must call one first). run --tool-choice overrides it.",
            kind="text",
            example='"none"',
            env="VIBECHAT_TOOL_CHOICE",
            choices=TOOL_CHOICES,
            check=check_tool_choice,
        ),
    )
    tool_timeout: int = field(
        default=60,
        metadata=doc(
            "Seconds a tool call may run before it is stopped (the model is told).",
            kind="whole number",
            example="120",
            env="VIBECHAT_TOOL_TIMEOUT",
            minimum=1,
            maximum=3600,
        ),
    )
    lens_history_bytes: int = field(
        default=LENS_HISTORY_BYTES,
        metadata=doc(
            "Bytes of a reply's token-lens candidates (--logprobs, the chat's lens) kept in the "
            "history with it; the tokens past it are not kept (the saved reply counts them as "
            "'truncated'); 0 keeps none.",
            kind="whole number",
            example="500000",
            env="VIBECHAT_LENS_HISTORY_BYTES",
            minimum=0,
            maximum=64_000_000,
        ),
    )
    tool_rounds: int = field(
        default=8,
        metadata=doc(
            "Rounds of tool calls one reply may make before it must answer in words.",
            kind="whole number",
            example="4",
            env="VIBECHAT_TOOL_ROUNDS",
            minimum=1,
            maximum=64,
        ),
    )
    tool_result_limit: int = field(
        default=32_000,
        metadata=doc(
            "Characters of a tool's result the model is given; a longer one "
            "is cut, with a note saying so.",
            kind="whole number",
            example="8000",
            env="VIBECHAT_TOOL_RESULT_LIMIT",
            minimum=1000,
            maximum=64_000,
        ),
    )
    params: SamplingParams = field(
        default_factory=SamplingParams,
        metadata=doc(
            "Default sampling parameters (the chat saves them here with "
            "'Save parameters as default').",
            kind="table",
            example="",
        ),
    )


EntryCheck = Callable[[str, Any], str]
"""A text table's entry check: ``check(name, value)`` gives the entry's value, or raises
``EntryProblem`` naming what is wrong (the engine adds the file, the line and the fix)."""


class EntryProblem(InvalidParameterError):
    """A text table's entry that cannot be used: the message, and ``detail`` (the known names,
    shown on terminals only)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


# The kind of a text table's field (``text_table``).
TEXT_TABLE = "table of text"


def text_table(
    help: str, *, example: str, check: EntryCheck, entry: str = "name", entries: str = ""
) -> dict[str, Any]:
    """The metadata of a table of text entries (``name = "text"``, as the app's key overrides):
    a ``Mapping[str, str]`` field whose entries ``check`` makes (any name, any value is the
    check's to refuse). ``config show`` has a row per entry the file sets (``TABLE.name``), the
    docs' table one for them all (``TABLE.<entry>``); ``entries``: a sentence the template
    adds, naming the entries there may be."""
    return {
        **doc(help, kind=TEXT_TABLE, example=example),
        "check": check,
        "entry": entry,
        "entries": entries,
    }


def _scalar_row(f: dataclasses.Field[Any], engine: bool) -> Setting:
    m = f.metadata
    default = f.default
    return Setting(
        f.name,
        m["kind"],
        m["help"],
        default,
        m["example"],
        m["unset"],
        m["env"],
        m["flag"],
        m["minimum"],
        m["maximum"],
        optional=default is None,
        choices=m["choices"],
        check=m["check"],
        short=m["short"],
        metavar=m["metavar"],
        flag_help=m["flag_help"],
        group=m["group"],
        engine=engine,
    )


def _param_rows() -> list[Setting]:
    out: list[Setting] = []
    for spec in PARAM_SPECS.values():
        env = "VIBECHAT_" + spec.name.upper()
        example = spec.example or show(spec.default)
        unset = "auto" if spec.auto else "none" if spec.optional else ""
        out.append(
            Setting(
                f"params.{spec.name}",
                "whole number" if spec.kind is int else "number",
                spec.help,
                spec.default,
                example,
                unset,
                env,
                spec.flag,
                spec.minimum,
                spec.maximum,
                optional=spec.optional,
                short=spec.short,
                metavar=spec.metavar,
                flag_help=param_flag_help(spec.name),
                group=SAMPLING,
            )
        )
    out.append(
        Setting(
            "params.stop",
            "list of text",
            f"Stop when the reply contains one of these strings (at most {MAX_STOP_STRINGS}; "
            "in the variable, separate them with |).",
            (),
            '["\\nUser:"]',
            env="VIBECHAT_STOP",
            flag="--stop",
            metavar="TEXT",
            flag_help=(
                "Stop when the reply contains this text (repeatable; \\n is a newline, \\t a tab)."
            ),
            group=SAMPLING,
        )
    )
    out.append(
        Setting(
            "params.thinking",
            "text",
            "A reasoning model's thinking: auto (as its chat template does by default), on or "
            "off. Applies where the template takes a switch (Qwen3's enable_thinking, Granite's "
            "thinking; gpt-oss: off asks for low reasoning effort); a server is sent "
            "chat_template_kwargs enable_thinking.",
            DEFAULT_THINKING,
            '"off"',
            env="VIBECHAT_THINKING",
            flag="--thinking",
            optional=False,
            choices=THINKING_MODES,
            check=check_thinking,
            metavar="MODE",
            flag_help=(
                "A reasoning model's thinking: auto (its template's default), on or "
                "off; where the template takes a switch (Qwen3, Granite; gpt-oss: off = "
                "low effort) or a server is asked."
            ),
            group=SAMPLING,
        )
    )
    return out


@dataclass(frozen=True, eq=False)
class Schema:
    """A config class's settings table: what one config file may hold, in the order the
    template, the docs' table and ``config show`` list it.

    ``settings``: a row per setting (the top-level ones, then ``[params]``'s); ``tables``: the
    text tables' fields (``keys``), by name, each with its entry check; ``top_level``: every
    top-level key, tables included. Built by ``Schema.of``; the engine's own is ``SCHEMA``."""

    config: type[Config]
    settings: tuple[Setting, ...]
    tables: Mapping[str, dataclasses.Field[Any]]
    top_level: tuple[str, ...]

    @classmethod
    def of(cls, config: type[Config], after: str = "system_prompt") -> Schema:
        """The table of ``config`` (``Config`` or a subclass). A subclass's own settings are
        listed right after ``after`` (the file's settings stay together, whoever declares them),
        its text tables last, after ``[params]``."""
        base = {f.name for f in dataclasses.fields(Config)}
        engine = {f.name for f in dataclasses.fields(EngineSettings)}
        fields = dataclasses.fields(config)
        own = [f for f in fields if f.name not in base and f.metadata.get("kind") != TEXT_TABLE]
        scalars: list[dataclasses.Field[Any]] = []
        for f in fields:
            if f.name in base and f.name != "params":
                scalars.append(f)
                if f.name == after:
                    scalars += own
        # ``after`` is no setting: the subclass's come last.
        if len(scalars) == len(base) - 1:
            scalars += own
        tables = {f.name: f for f in fields if f.metadata.get("kind") == TEXT_TABLE}
        settings = (*(_scalar_row(f, f.name in engine) for f in scalars), *_param_rows())
        return cls(config, settings, tables, (*(f.name for f in scalars), "params", *tables))

    def __repr__(self) -> str:
        return f"Schema({self.config.__name__})"

    @functools.cached_property
    def by_key(self) -> dict[str, Setting]:
        return {s.key: s for s in self.settings}

    @functools.cached_property
    def param_keys(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.settings if s.key.startswith("params."))


SCHEMA = Schema.of(Config)
SETTINGS: tuple[Setting, ...] = SCHEMA.settings
SETTINGS_BY_KEY: dict[str, Setting] = SCHEMA.by_key
TOP_LEVEL = SCHEMA.top_level
PARAM_KEYS = SCHEMA.param_keys
