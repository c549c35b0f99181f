"""The settings table: every setting once, with its name, type, default, flag, variable, config
key and help. ``Config`` is what the config file can set: the engine's settings
(``EngineSettings``, engine/settings/knobs.py, whose fields carry their rows) and the chat's own;
the sampling parameters are documented by ``PARAM_SPECS`` (params.py) and their flags' lines
here (``PARAM_FLAGS``). ``SETTINGS`` flattens them into one list that drives the config file's
checks (config.py), the ``VIBECHAT_*`` variables, the commented template and the docs' table
(config_save.py), ``vibechat config show``, and the command-line flags (app/options.py).

The chat's own settings that only the app reads (``theme``, ``thinking_expanded``, ``keys``)
are rows here because they are keys of the one file; app/appconfig.py owns what they mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .knobs import EngineSettings
from .params import MAX_STOP_STRINGS, PARAM_SPECS, SamplingParams
from .setting import SAMPLING, Setting, doc, show
from .think_switch import DEFAULT_THINKING, THINKING_MODES, check_thinking

DEFAULT_THEME = "vibechat-dusk"

# The sampling flags' lines on the help page: (short alias, metavar, line).
PARAM_FLAGS: dict[str, tuple[str | None, str, str]] = {
    "temperature": ("-t", "NUMBER", "0-5; 0 is greedy (default 0.8)."),
    "top_k": (None, "N", "0-1000; 0 disables (default 40)."),
    "top_p": (None, "NUMBER", "0-1; 1 disables (default 0.95)."),
    "min_p": (None, "NUMBER", "0-1; 0 disables (default 0.05)."),
    "repeat_penalty": (None, "NUMBER", "0.1-5; 1 disables (default 1.0)."),
    "max_tokens": ("-n", "N", "Most tokens to generate (default: until the model stops)."),
    "seed": (None, "N", "Seed for reproducible sampling (default: random)."),
    "stop": (None, "TEXT", "Stop when the reply contains this text (repeatable; \\n is a newline, \\t a tab)."),
    "thinking": (None, "MODE", "A reasoning model's thinking: auto (its template's default), on or off; "
                 "where the template takes a switch (Qwen3, Granite; gpt-oss: off = low effort) or a server is "
                 "asked."),
}


@dataclass(frozen=True)
class Config(EngineSettings):
    """Everything the config file can set; the defaults are the values with no file. The
    engine's settings come first (``EngineSettings``), then the chat's own."""

    system_prompt: str | None = field(default=None, metadata=doc(
        "The system prompt of every new conversation.",
        kind="text", example='"You are a concise assistant."', unset="none",
        env="VIBECHAT_SYSTEM_PROMPT", flag="--system", short="-s", metavar="TEXT", flag_help="System prompt."))
    theme: str = field(default=DEFAULT_THEME, metadata=doc(
        "The colour theme (F4 in the chat chooses one and saves it here).",
        kind="text", example='"vibechat-paper"', env="VIBECHAT_THEME"))
    thinking_expanded: bool = field(default=False, metadata=doc(
        "Show a reasoning model's thinking expanded in the chat (else folded to one line, \"Thought for "
        "12 s\", that Enter or a click opens).",
        kind="true or false", example="true", env="VIBECHAT_THINKING_EXPANDED"))
    save_runs: bool = field(default=True, metadata=doc(
        "Save each 'vibechat run' (and each line of --prompts-file) in the history, as --no-save does not; "
        "false keeps scripts out of it (--continue and --conversation still add to a saved conversation).",
        kind="true or false", example="false", env="VIBECHAT_SAVE_RUNS"))
    model_titles: bool = field(default=True, metadata=doc(
        "In the chat, an instruct model (one with a chat template) writes each new conversation's title "
        "after its first reply, while it is idle; false (or a base model): the title comes from the first "
        "exchange's words. A title you give (rename) is always kept.",
        kind="true or false", example="false", env="VIBECHAT_MODEL_TITLES"))
    models_dir: Path | None = field(default=None, metadata=doc(
        "Where downloaded models go; a relative path is relative to this file's folder.",
        kind="path", example='"~/models/vibechat"', unset="'models' in the data folder",
        env="VIBECHAT_MODELS_DIR"))
    params: SamplingParams = field(default_factory=SamplingParams, metadata=doc(
        "Default sampling parameters (the chat saves them here with 'Save parameters as default').",
        kind="table", example=""))
    keys: Mapping[str, str] = field(default_factory=dict, metadata=doc(
        "Key binding overrides: binding id = \"key\" (several keys: \"f12,ctrl+t\"). Quote ids that "
        "contain a dot. A key is a character, f1-f35 or a name (enter, escape, tab, space, pageup, comma, "
        "question_mark ...), after modifiers joined by + in the order alt, ctrl, hyper, meta, shift, super.",
        kind="table", example='"toggle_params" = "f12"'))




def _settings() -> tuple[Setting, ...]:
    out: list[Setting] = []
    engine = {f.name for f in dataclasses.fields(EngineSettings)}
    for f in dataclasses.fields(Config):
        if f.name in ("params", "keys"):
            continue
        m = f.metadata
        default = f.default
        out.append(Setting(f.name, m["kind"], m["help"], default, m["example"], m["unset"], m["env"],
                           m["flag"], m["minimum"], m["maximum"], optional=default is None,
                           choices=m["choices"], check=m["check"], short=m["short"], metavar=m["metavar"],
                           flag_help=m["flag_help"], group=m["group"], engine=f.name in engine))
    for spec in PARAM_SPECS.values():
        env = "VIBECHAT_" + spec.name.upper()
        example = {"max_tokens": "512", "seed": "42", "repeat_penalty": "1.1"}.get(spec.name, show(spec.default))
        unset = "auto" if spec.auto else "none" if spec.optional else ""
        short, metavar, flag_help = PARAM_FLAGS[spec.name]
        out.append(Setting(f"params.{spec.name}", "whole number" if spec.kind is int else "number",
                           spec.help, spec.default, example, unset, env,
                           "--" + spec.name.replace("_", "-"), spec.minimum, spec.maximum,
                           optional=spec.optional, short=short, metavar=metavar, flag_help=flag_help,
                           group=SAMPLING))
    out.append(Setting("params.stop", "list of text",
                       f"Stop when the reply contains one of these strings (at most {MAX_STOP_STRINGS}; "
                       "in the variable, separate them with |).",
                       (), '["\\nUser:"]', env="VIBECHAT_STOP", flag="--stop", metavar=PARAM_FLAGS["stop"][1],
                       flag_help=PARAM_FLAGS["stop"][2], group=SAMPLING))
    out.append(Setting("params.thinking", "text",
                       "A reasoning model's thinking: auto (as its chat template does by default), on or off. "
                       "Applies where the template takes a switch (Qwen3's enable_thinking, Granite's thinking; "
                       "gpt-oss: off asks for low reasoning effort); a server is sent chat_template_kwargs "
                       "enable_thinking.",
                       DEFAULT_THINKING, '"off"', env="VIBECHAT_THINKING", flag="--thinking", optional=False,
                       choices=THINKING_MODES, check=check_thinking,
                       metavar=PARAM_FLAGS["thinking"][1], flag_help=PARAM_FLAGS["thinking"][2], group=SAMPLING))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _settings()
SETTINGS_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
TOP_LEVEL = tuple(f.name for f in dataclasses.fields(Config))
PARAM_KEYS = tuple(s.name for s in SETTINGS if s.key.startswith("params."))
