"""The config file: one TOML file, one typed model, every setting documented once.

``Config`` is the model; each of its fields carries its documentation (``help``,
environment variable, flag, example) in its metadata, and the sampling
parameters are documented by ``PARAM_SPECS``. ``SETTINGS`` flattens both into one
list that drives validation, the commented template (``template()``), ``vibechat
config show`` and the settings table in docs/USAGE.md (``markdown_table()``).

Precedence: command-line flag > ``VIBECHAT_*`` variable > file > default.
``load_config()`` never raises over a bad file or variable. A mistake is local: a
bad key or value is left out on its own (the rest of the file still applies, so a
typo in ``[params]`` never turns a server set-up into the local model), and every
problem is collected in ``LoadedConfig.problems`` (one line each, naming the file,
line and key, or the variable, with a suggestion for a misspelt name). Only a file
that is not TOML at all (or cannot be read) is left out whole: then the problem says
so, in plain words (``toml_words``). Unknown ``VIBECHAT_*`` variables are named too
(``warnings``: they are ignored, they do not stop a run). Saving
(``update_config()``) edits the file with tomlkit, so the user's comments and
formatting stay as they were, and refuses to touch a file that does not load
cleanly.

Headless and free of side effects at import time (tomlkit is imported when a
file is read).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_text import _duplicate_lines, _line_of, insert_top_level, key_lines  # noqa: F401 - presets.py uses them
from ..errors import ConfigError, InvalidParameterError
from ..files import FileTooLarge, NotARegularFile, UnreadableFile, read_file_text
from .keynames import keys_problem
from .knobs import (
    DEFAULT_REPACK,
    check_repack,
    CONTEXT_STEP,
    DEFAULT_DRAFT_TOKENS,
    DEFAULT_KV_CACHE_TYPE,
    MAX_CONTEXT,
    DEFAULT_PROMPT_FORMAT,
    MAX_DRAFT_TOKENS,
    check_kv_cache_type,
    check_prompt_format,
    check_speculative,
)
from .params import MAX_STOP_STRINGS, PARAM_SPECS, SamplingParams
from ..paths import config_dir, data_dir
from .think_switch import DEFAULT_THINKING, THINKING_MODES, check_thinking

CONFIG_ENV = "VIBECHAT_CONFIG"
CONFIG_NAME = "config.toml"
DEFAULT_THEME = "vibechat-dusk"
FIX = "fix it with 'vibechat config edit'"
WHOLE_FILE_LEFT_OUT = "running on the defaults until it is fixed"
TRUE_WORDS = ("1", "true", "yes", "on")  # a true-or-false setting in an environment variable
FALSE_WORDS = ("0", "false", "no", "off")


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _doc(help: str, *, kind: str, example: str, unset: str = "", env: str | None = None,
         flag: str | None = None, minimum: int | None = None, maximum: int | None = None,
         choices: tuple[str, ...] = (), check: Any = None) -> dict[str, Any]:
    """``check``: for a text setting with fixed choices, the function that validates it
    (returns the canonical value or raises InvalidParameterError naming the choices)."""
    return {"help": help, "kind": kind, "example": example, "unset": unset, "env": env, "flag": flag,
            "minimum": minimum, "maximum": maximum, "choices": choices, "check": check}


BACKENDS = ("llama", "openai")


@dataclass(frozen=True)
class Config:
    """Everything the config file can set; the defaults are the values with no file."""

    model: str | None = field(default=None, metadata=_doc(
        "The model to open: a .gguf path, a name from 'vibechat models list', or a Hugging Face "
        "reference (owner/repo, owner/repo:QUANT); with the openai backend, the server's model id.",
        kind="text", example='"bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"',
        unset="the bundled starter model", env="VIBECHAT_MODEL", flag="--model"))
    system_prompt: str | None = field(default=None, metadata=_doc(
        "The system prompt of every new conversation.",
        kind="text", example='"You are a concise assistant."', unset="none",
        env="VIBECHAT_SYSTEM_PROMPT", flag="--system"))
    context_size: int | None = field(default=None, metadata=_doc(
        f"Context window in tokens; a size that is no multiple of {CONTEXT_STEP} is rounded up to one "
        f"(llama.cpp allocates the context in steps of {CONTEXT_STEP}).",
        kind="whole number", example="4096", unset="the model's, at most 8192",
        env="VIBECHAT_CONTEXT_SIZE", flag="--ctx", minimum=CONTEXT_STEP, maximum=MAX_CONTEXT))
    gpu_layers: int | None = field(default=None, metadata=_doc(
        "Layers to offload to the GPU: -1 all, 0 none (CPU only).",
        kind="whole number", example="0", unset="all, if the build can offload",
        env="VIBECHAT_GPU_LAYERS", flag="--n-gpu-layers", minimum=-1))
    threads: int | None = field(default=None, metadata=_doc(
        "CPU threads for generation.",
        kind="whole number", example="4", unset="the physical performance cores",
        env="VIBECHAT_THREADS", flag="--threads", minimum=1, maximum=1024))
    kv_cache_type: str = field(default=DEFAULT_KV_CACHE_TYPE, metadata=_doc(
        "KV-cache type for keys and values: f16, q8_0 (about half the memory) or q4_0 (about a quarter); "
        "a quantized cache turns flash attention on.",
        kind="text", example='"q8_0"', env="VIBECHAT_KV_CACHE_TYPE", flag="--kv-cache-type",
        check=check_kv_cache_type))
    speculative: str = field(default="off", metadata=_doc(
        "Speculative decoding: off; auto (drafts tokens by finding the last words earlier in the prompt or "
        "reply, as many as pay on this machine, none when drafting does not pay); or prompt-lookup (always "
        "draft_tokens drafts). Helps when the reply repeats the prompt, e.g. editing code.",
        kind="text", example='"auto"', env="VIBECHAT_SPECULATIVE", flag="--draft",
        check=check_speculative))
    draft_tokens: int = field(default=DEFAULT_DRAFT_TOKENS, metadata=_doc(
        "Most tokens drafted per step with speculative decoding (auto adapts below it).",
        kind="whole number", example="10", env="VIBECHAT_DRAFT_TOKENS", flag="--draft-tokens",
        minimum=1, maximum=MAX_DRAFT_TOKENS))
    draft_model: str | None = field(default=None, metadata=_doc(
        "A small model that drafts tokens for the model to check (speculative decoding): any model "
        "reference --model takes. It must share the model's vocabulary (same family); it turns drafting "
        "on (auto, unless speculative says prompt-lookup for a fixed draft length).",
        kind="text", example='"unsloth/gemma-3-270m-it-GGUF:Q4_K_M"', unset="none: drafts come from prompt lookup",
        env="VIBECHAT_DRAFT_MODEL", flag="--draft-model"))
    repack: str = field(default=DEFAULT_REPACK, metadata=_doc(
        "llama.cpp's CPU weight repacking (its extra buffer types: interleaved quant blocks, Intel AMX tiles; "
        "about 30% faster decoding): auto (on, except where this llama.cpp build's AMX kernel crashes: on a CPU "
        "with AMX a one-time probe decides), on, or off.",
        kind="text", example='"off"', env="VIBECHAT_REPACK", flag="--repack", check=check_repack))
    prompt_format: str = field(default=DEFAULT_PROMPT_FORMAT, metadata=_doc(
        "How a local model is prompted: auto (its GGUF's chat template; a base model, or a GGUF with no "
        "template and no sign of chat tuning in its name, as a completion model: a short example "
        "conversation, then the chat as User:/Assistant: lines), completion, template (the GGUF's own, "
        "even for a base model) or a built-in turn format: gemma, chatml, llama3.",
        kind="text", example='"completion"', env="VIBECHAT_PROMPT_FORMAT", flag="--prompt-format",
        check=check_prompt_format))
    theme: str = field(default=DEFAULT_THEME, metadata=_doc(
        "The colour theme (F4 in the chat chooses one and saves it here).",
        kind="text", example='"vibechat-paper"', env="VIBECHAT_THEME"))
    thinking_expanded: bool = field(default=False, metadata=_doc(
        "Show a reasoning model's thinking expanded in the chat (else folded to one line, \"Thought for "
        "12 s\", that Enter or a click opens).",
        kind="true or false", example="true", env="VIBECHAT_THINKING_EXPANDED"))
    save_runs: bool = field(default=True, metadata=_doc(
        "Save each 'vibechat run' (and each line of --prompts-file) in the history, as --no-save does not; "
        "false keeps scripts out of it (--continue and --conversation still add to a saved conversation).",
        kind="true or false", example="false", env="VIBECHAT_SAVE_RUNS"))
    model_titles: bool = field(default=True, metadata=_doc(
        "In the chat, an instruct model (one with a chat template) writes each new conversation's title "
        "after its first reply, while it is idle; false (or a base model): the title comes from the first "
        "exchange's words. A title you give (rename) is always kept.",
        kind="true or false", example="false", env="VIBECHAT_MODEL_TITLES"))
    models_dir: Path | None = field(default=None, metadata=_doc(
        "Where downloaded models go; a relative path is relative to this file's folder.",
        kind="path", example='"~/models/vibechat"', unset="'models' in the data folder",
        env="VIBECHAT_MODELS_DIR"))
    backend: str | None = field(default=None, metadata=_doc(
        "Where replies come from: llama (GGUF files through llama.cpp, on this machine) or openai (a "
        "server with an OpenAI-compatible API at base_url: llama-server, vLLM, Ollama, LM Studio, ...).",
        kind="text", example='"openai"', unset="llama; openai when base_url is set",
        env="VIBECHAT_BACKEND", flag="--backend", choices=BACKENDS))
    base_url: str | None = field(default=None, metadata=_doc(
        "The openai backend's server: its API root, such as http://127.0.0.1:8080/v1 (a bare host "
        "gets /v1).",
        kind="url", example='"http://127.0.0.1:8080/v1"', unset="none", env="VIBECHAT_BASE_URL",
        flag="--base-url"))
    api_key_env: str | None = field(default=None, metadata=_doc(
        "The environment variable that holds the server's API key (the key itself never goes in "
        "this file).",
        kind="variable name", example='"MY_SERVER_KEY"', unset="VIBECHAT_API_KEY, else OPENAI_API_KEY (https only)",
        flag="--api-key-env"))
    timeout: int | None = field(default=None, metadata=_doc(
        "Seconds to wait for the openai backend's server (to connect: at most 10) before giving up.",
        kind="whole number", example="600", unset="300", env="VIBECHAT_TIMEOUT", minimum=1, maximum=86400))
    params: SamplingParams = field(default_factory=SamplingParams, metadata=_doc(
        "Default sampling parameters (the chat saves them here with 'Save parameters as default').",
        kind="table", example=""))
    keys: Mapping[str, str] = field(default_factory=dict, metadata=_doc(
        "Key binding overrides: binding id = \"key\" (several keys: \"f12,ctrl+t\"). Quote ids that "
        "contain a dot. A key is a character, f1-f35 or a name (enter, escape, tab, space, pageup, comma, "
        "question_mark ...), after modifiers joined by + in the order alt, ctrl, hyper, meta, shift, super.",
        kind="table", example='"toggle_params" = "f12"'))


@dataclass(frozen=True)
class Setting:
    """One documented setting; ``key`` is its dotted TOML key (``params.top_k``)."""

    key: str
    kind: str  # "text", "whole number", "number", "path", "list of text"
    help: str
    default: Any
    example: str
    unset: str = ""  # what happens when unset (the default is None)
    env: str | None = None
    flag: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = True  # None (unset) is a valid value
    choices: tuple[str, ...] = ()  # the values a text setting may take (none: any)
    check: Any = None  # a text setting with fixed choices: its validating function

    @property
    def name(self) -> str:
        return self.key.rpartition(".")[2]

    def default_text(self) -> str:
        if isinstance(self.default, bool):  # as TOML writes it
            return "true" if self.default else "false"
        return self.unset if self.default is None and self.unset else _show(self.default)


def _settings() -> tuple[Setting, ...]:
    out: list[Setting] = []
    for f in dataclasses.fields(Config):
        if f.name in ("params", "keys"):
            continue
        m = f.metadata
        default = f.default
        out.append(Setting(f.name, m["kind"], m["help"], default, m["example"], m["unset"], m["env"],
                           m["flag"], m["minimum"], m["maximum"], optional=default is None,
                           choices=m["choices"], check=m["check"]))
    for spec in PARAM_SPECS.values():
        env = "VIBECHAT_" + spec.name.upper()
        example = {"max_tokens": "512", "seed": "42", "repeat_penalty": "1.1"}.get(spec.name, _show(spec.default))
        unset = "auto" if spec.auto else "none" if spec.optional else ""
        out.append(Setting(f"params.{spec.name}", "whole number" if spec.kind is int else "number",
                           spec.help, spec.default, example, unset, env,
                           "--" + spec.name.replace("_", "-"), spec.minimum, spec.maximum,
                           optional=spec.optional))
    out.append(Setting("params.stop", "list of text",
                       f"Stop when the reply contains one of these strings (at most {MAX_STOP_STRINGS}; "
                       "in the variable, separate them with |).",
                       (), '["\\nUser:"]', env="VIBECHAT_STOP", flag="--stop"))
    out.append(Setting("params.thinking", "text",
                       "A reasoning model's thinking: auto (as its chat template does by default), on or off. "
                       "Applies where the template takes a switch (Qwen3's enable_thinking, Granite's thinking; "
                       "gpt-oss: off asks for low reasoning effort); a server is sent chat_template_kwargs "
                       "enable_thinking.",
                       DEFAULT_THINKING, '"off"', env="VIBECHAT_THINKING", flag="--thinking", optional=False,
                       choices=THINKING_MODES, check=check_thinking))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _settings()
SETTINGS_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
TOP_LEVEL = tuple(f.name for f in dataclasses.fields(Config))
PARAM_KEYS = tuple(s.name for s in SETTINGS if s.key.startswith("params."))


def config_path() -> Path:
    """The config file: ``$VIBECHAT_CONFIG``, else ``config.toml`` in the config dir."""
    override = os.environ.get(CONFIG_ENV)
    return Path(override).expanduser() if override else config_dir() / CONFIG_NAME


# ---------------------------------------------------------------- origins
@dataclass(frozen=True)
class Origin:
    """Where a value came from: ``default``, ``file`` (path, line), ``env`` (variable) or ``flag``."""

    kind: str
    name: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file, line {self.line}" if self.line else "file"
        return self.kind if self.kind == "default" else f"{self.kind} {self.name}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"source": self.kind}
        if self.kind == "file":
            data.update(file=self.name, line=self.line)
        elif self.kind == "env":
            data["variable"] = self.name
        elif self.kind == "flag":
            data["flag"] = self.name
        return data


DEFAULT_ORIGIN = Origin("default")


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake in the config file or the environment, and what it leaves out.

    ``str()`` is the line for a terminal (where, what, the known names, the fix);
    ``short`` is the chat's line (the file's name, what, what runs instead). ``key``: the
    dotted setting left out (None: the whole file, or a variable that is no setting).
    ``blocking``: ``vibechat run`` refuses to run with it (an unknown variable, which
    changes nothing, does not block)."""

    where: str  # "config file /x/config.toml, line 2" | "environment variable VIBECHAT_THREADS='many'"
    what: str  # plain words, with a suggestion where there is one
    fix: str = FIX
    short_where: str = ""  # "config.toml line 2" | "VIBECHAT_THREADS"
    effect: str = "not applied"  # what happens meanwhile, for the chat's line
    key: str | None = None
    blocking: bool = True
    detail: str = ""  # for terminals only: "known: a, b, c"

    def __str__(self) -> str:
        detail = f"; {self.detail}" if self.detail else ""
        return f"{self.where}: {self.what}{detail}; {self.fix}"

    @property
    def short(self) -> str:
        return f"{self.short_where or self.where}: {self.what}: {self.effect}"

    @property
    def in_file(self) -> bool:
        """The config file's problem (else a variable's)."""
        return self.where.startswith("config file")


@dataclass(frozen=True)
class LoadedConfig:
    """The effective config and where each value came from.

    ``problems``: every key of the file and every variable left out, and every unknown
    ``VIBECHAT_*`` variable, in that order. ``file_problem``: the file as a whole could not
    be used (not TOML, unreadable): nothing of it applies. ``problem``: the first problem
    that stops ``vibechat run``, as one line (saying how many more there are)."""

    config: Config
    path: Path
    exists: bool = False
    origins: Mapping[str, Origin] = field(default_factory=dict)
    file_problem: str | None = None
    problems: tuple[ConfigProblem, ...] = ()

    def __post_init__(self) -> None:
        if self.file_problem and not self.problems:  # given as text alone
            whole = ConfigProblem(f"config file {self.path}", self.file_problem, short_where=self.path.name,
                                  effect=WHOLE_FILE_LEFT_OUT)
            object.__setattr__(self, "problems", (whole,))

    @property
    def blocking(self) -> tuple[ConfigProblem, ...]:
        return tuple(p for p in self.problems if p.blocking)

    @property
    def warnings(self) -> tuple[ConfigProblem, ...]:
        """Problems that change nothing (an unknown variable, ignored): a run says them and goes on."""
        return tuple(p for p in self.problems if not p.blocking)

    @property
    def problem(self) -> str | None:
        blocking = self.blocking
        if not blocking:
            return None
        first = str(blocking[0])
        more = len(blocking) - 1
        if more:
            first += f" (and {more} more problem{'s' if more > 1 else ''}: 'vibechat config show' lists them)"
        return first

    @property
    def env_problem(self) -> str | None:
        """The first bad ``VIBECHAT_*`` value (left out), or None."""
        return next((str(p) for p in self.problems if p.blocking and not p.in_file), None)

    @property
    def left_out(self) -> tuple[str, ...]:
        """The settings not applied (dotted keys), in order: what the chat names."""
        return tuple(dict.fromkeys(p.key for p in self.problems if p.key))

    def origin(self, key: str) -> Origin:
        return self.origins.get(key, DEFAULT_ORIGIN)

    def value(self, key: str) -> Any:
        """The effective value of a dotted key (``params.top_k``, ``keys.help``)."""
        head, _, rest = key.partition(".")
        if head == "keys":
            return self.config.keys.get(rest)
        if head == "params":
            value = getattr(self.config.params, rest)
            return list(value) if rest == "stop" else value
        return getattr(self.config, head)

    def items(self) -> list[tuple[str, Any, Origin]]:
        """Every setting (and each key override) with its value and origin, in SETTINGS order."""
        rows = [(s.key, self.value(s.key), self.origin(s.key)) for s in SETTINGS]
        rows += [(f"keys.{k}", v, self.origin(f"keys.{k}")) for k, v in sorted(self.config.keys.items())]
        return rows

    def with_flags(self, values: Mapping[str, Any], flags: Mapping[str, str]) -> "LoadedConfig":
        """A copy with command-line values on top (``values`` by dotted key, ``flags`` the
        flag each came from); values are checked as a file's would be."""
        changes: dict[str, Any] = {}
        origins = dict(self.origins)
        for key, value in values.items():
            setting = SETTINGS_BY_KEY[key]
            try:
                changes[key] = _check(setting, value, Path.cwd())
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{flags.get(key, key)}: {_bare(exc)}.") from None
            origins[key] = Origin("flag", flags.get(key, key))
        return dataclasses.replace(self, config=_apply(self.config, changes), origins=origins)


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
    problem = keys_problem(item)
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


def _file_message(path: Path, line: int | None, message: str, column: int | None = None) -> str:
    return f"{_file_where(path, line, column)}: {message}; {FIX}"


def _file_where(path: Path, line: int | None, column: int | None = None) -> str:
    at = f", line {line}" if line else ""
    return f"config file {path}{at}{f', column {column}' if line and column else ''}"


class _Unusable(ConfigError):
    """The file as a whole cannot be used (not TOML, unreadable, too large): ``problem`` says why."""

    def __init__(self, problem: ConfigProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _whole_file(path: Path, message: str, line: int | None = None, column: int | None = None) -> _Unusable:
    short = f"{path.name} line {line}" if line else path.name
    return _Unusable(ConfigProblem(_file_where(path, line, column), message, short_where=short,
                                   effect=WHOLE_FILE_LEFT_OUT))


def _parse_toml(text: str, path: Path) -> Mapping[str, Any]:
    """The file's TOML as plain data; a syntax error raises _Unusable in plain words."""
    import tomlkit

    from .toml_words import plain_syntax_error

    try:
        return tomlkit.parse(text).unwrap()
    except Exception as exc:  # noqa: BLE001 - tomlkit raises ParseError and a few other kinds
        duplicate = re.match(r'Key "(.+)" already exists', str(exc))
        if duplicate:
            name = duplicate.group(1)
            lines = _duplicate_lines(text, name)
            line = lines[1] if lines else getattr(exc, "line", None)
            first = f" (first on line {lines[0]})" if lines else ""
            raise _whole_file(path, f"'{name}' is set twice{first}: keep one", line) from None
        problem = plain_syntax_error(text, exc)
        raise _whole_file(path, problem.message, problem.line, problem.column) from None


def read_config_text(text: str, path: Path, key_ids: Collection[str] | None = None
                     ) -> tuple[dict[str, Any], dict[str, Origin], list[ConfigProblem]]:
    """The values a config file's text sets (by dotted key), their origins, and a problem
    for each key left out (the others apply). A file that is not TOML raises ``ConfigError``
    (one line, in plain words, with the line and column)."""
    data = _parse_toml(text, path)
    lines = key_lines(text)
    values, bad = _read_document(data, path.parent, key_ids)
    problems = []
    for exc in bad:
        line = _line_of(lines, exc.where)
        problems.append(ConfigProblem(_file_where(path, line), str(exc), short_where=f"{path.name} line {line}"
                                      if line else path.name, effect="not applied", key=exc.key,
                                      detail=exc.detail))
    origins = {key: Origin("file", str(path), _line_of(lines, tuple(key.split(".", 1))))
               for key in values}
    return values, origins, problems


def parse_config_text(text: str, path: Path, key_ids: Collection[str] | None = None
                      ) -> tuple[dict[str, Any], dict[str, Origin]]:
    """The values a config file's text sets (by dotted key) and their origins; any problem
    raises ``ConfigError`` with one line naming the file, the line and the key (for
    writers, which never touch a file that does not load cleanly)."""
    values, origins, problems = read_config_text(text, path, key_ids)
    if problems:
        raise ConfigError(str(problems[0]))
    return values, origins


MAX_CONFIG_BYTES = 1 << 20  # a config file is a few KB: anything this large is not one


def _read_text(path: Path) -> str | None:
    """The file's text, or None when there is no file; unreadable or absurdly large raises
    ConfigError."""
    try:  # bounded and by type: a FIFO or /dev/zero as the config is refused at once
        return read_file_text(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise _whole_file(path, f"could not be read: it {exc.reason}; the config must be a regular TOML file") from None
    except FileTooLarge:
        raise _whole_file(path, f"is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a vibechat config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _whole_file(path, f"could not be read ({reason})") from None


def config_file_problems(path: Path | None = None, key_ids: Collection[str] | None = None
                         ) -> list[ConfigProblem]:
    """Every problem of the file (none: it loads cleanly, or does not exist)."""
    path = path or config_path()
    try:
        text = _read_text(path)
        return [] if text is None else read_config_text(text, path, key_ids)[2]
    except _Unusable as exc:
        return [exc.problem]


def check_config_file(path: Path | None = None, key_ids: Collection[str] | None = None) -> str | None:
    """The file's first problem as one line, or None when it loads cleanly (or does not exist)."""
    problems = config_file_problems(path, key_ids)
    return str(problems[0]) if problems else None


# Variables vibechat reads that are not settings (each documented where it is read): an
# unknown VIBECHAT_* variable is named with a suggestion, these are not.
OTHER_VARIABLES = (
    "VIBECHAT_CONFIG",  # the config file (config_path)
    "VIBECHAT_CONFIG_DIR", "VIBECHAT_DATA_DIR", "VIBECHAT_CACHE_DIR", "VIBECHAT_STATE_DIR",  # paths.py
    "VIBECHAT_API_KEY",  # the server's key (openai_backend.KEY_VARIABLES)
    "VIBECHAT_DEBUG",  # logging (app/cli.py)
    "VIBECHAT_TEST_WORKER_CRASH",  # the worker's crash hook, for tests (worker.CRASH_HOOK_ENV)
)
MAX_VARIABLES = 10_000  # the environment is outside data: its loop is bounded


def known_variables() -> tuple[str, ...]:
    """Every ``VIBECHAT_*`` variable vibechat reads: the settings', then the others."""
    return tuple(dict.fromkeys([*(s.env for s in SETTINGS if s.env), *OTHER_VARIABLES]))


def _env_values(environ: Mapping[str, str], api_key_env: str | None = None
                ) -> tuple[dict[str, Any], dict[str, Origin], list[ConfigProblem]]:
    """The settings the variables set, their origins, and a problem for each bad value (left
    out) and each unknown ``VIBECHAT_*`` variable (ignored: it sets nothing)."""
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    problems: list[ConfigProblem] = []
    for setting in SETTINGS:
        raw = environ.get(setting.env or "")
        if not raw:
            continue
        try:
            values[setting.key] = _from_text(setting, raw)
        except InvalidParameterError as exc:
            problems.append(ConfigProblem(f"environment variable {setting.env}={raw!r}", _bare(exc),
                                          "fix or unset it", short_where=f"{setting.env}", effect="ignored",
                                          key=setting.key))
            continue
        origins[setting.key] = Origin("env", setting.env or "")
    known = known_variables()
    for count, name in enumerate(environ):
        if count >= MAX_VARIABLES:
            break
        if name.startswith("VIBECHAT_") and name not in known and name != api_key_env:
            close = difflib.get_close_matches(name[9:], [k[9:] for k in known], n=1, cutoff=0.8)  # past VIBECHAT_
            hint = f" (did you mean VIBECHAT_{close[0]}?)" if close else ""
            problems.append(ConfigProblem(f"environment variable {name}", f"not a vibechat variable{hint}",
                                          "it is ignored: rename or unset it", short_where=name, effect="ignored",
                                          blocking=False))
    return values, origins, problems


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


def load_config(path: Path | None = None, *, environ: Mapping[str, str] | None = None,
                key_ids: Collection[str] | None = None) -> LoadedConfig:
    """The effective config: defaults, then the file, then ``VIBECHAT_*`` variables.

    Never raises over a bad file or variable: a bad key or value is left out on its own
    (the rest applies), a file that is not TOML or cannot be read is left out whole
    (``file_problem``), a bad variable is left out; each is in ``problems``.
    ``key_ids``: the binding ids ``[keys]`` may name (None: any)."""
    path = path or config_path()
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    problems: list[ConfigProblem] = []
    file_problem = None
    exists = False
    try:
        text = _read_text(path)
        exists = text is not None
        if text is not None:
            values, origins, problems = read_config_text(text, path, key_ids)
    except _Unusable as exc:
        exists = path.exists()
        file_problem = str(exc)
        problems = [exc.problem]
    env, env_origins, env_problems = _env_values(environ, values.get("api_key_env"))
    values.update(env)
    origins.update(env_origins)
    return LoadedConfig(_apply(Config(), values), path, exists, origins, file_problem,
                        (*problems, *env_problems))


def configured_models_dir() -> Path | None:
    """``models_dir`` from the config file, or None (unset, no file, a broken file).
    Cheap to call often: the answer is kept until the file changes."""
    path = config_path()
    try:
        st = path.stat()
    except OSError:
        return None
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _models_dir_cache.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    try:  # a bad key elsewhere in the file does not matter here
        values, _, _ = read_config_text(read_file_text(path, MAX_CONFIG_BYTES), path)
        found = values.get("models_dir")
    except (ConfigError, OSError, UnicodeDecodeError, UnreadableFile):  # a FIFO: never blocks
        found = None
    _models_dir_cache[path] = (signature, found)
    return found


_models_dir_cache: dict[Path, tuple[tuple[int, int, int], Path | None]] = {}


def models_dir() -> Path:
    """Models vibechat downloaded or was given: ``VIBECHAT_MODELS_DIR``, else ``models_dir``
    in the config file (a broken file is ignored here), else ``models`` in the data dir.
    Resolved on each call, never at import time."""
    override = os.environ.get("VIBECHAT_MODELS_DIR")
    if override:
        return Path(override).expanduser()
    return configured_models_dir() or data_dir() / "models"


# ------------------------------------------------------------------ saving
def update_config(changes: Mapping[str, Any], path: Path | None = None, *,
                  key_ids: Collection[str] | None = None) -> Path:
    """Set dotted keys (``theme``, ``params.top_k``) in the config file; None removes one.

    Everything else in the file stays byte for byte (tomlkit), an unchanged value keeps
    its spelling, a built-in default is not added (only updated where the file has the
    key), a missing file starts from ``template()``, and the write is atomic. A file
    that does not load cleanly is never touched: ``ConfigError`` says why."""
    import tomlkit

    path = path or config_path()
    text = _read_text(path)
    if text is None:
        text = template(key_ids)
    parse_config_text(text, path, key_ids)  # raises on any problem: never overwrite a broken file
    doc = tomlkit.parse(text)
    new_top: dict[str, Any] = {}
    for key, value in changes.items():
        setting = SETTINGS_BY_KEY.get(key)
        if setting is not None:
            value = _check(setting, value, path.parent)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        head, _, name = key.partition(".")
        container: Any = doc.get(head, {}) if name else doc
        key = name or head
        present = key in container
        if value is None or value == []:
            if present:
                del container[key]
        elif not present and setting is not None and value == _plain_default(setting):
            continue  # the built-in default already: not pinned in the file
        elif not present and not name:
            new_top[key] = value  # placed by hand below: tomlkit would put it under a table's comment
        elif not present or _plain(container[key]) != value:
            if name and head not in doc:
                doc[head] = container = tomlkit.table()
            container[key] = value
    new_text = tomlkit.dumps(doc)
    for key, value in new_top.items():
        new_text = insert_top_level(new_text, key, value)
    parse_config_text(new_text, path, key_ids)
    if new_text != text or not path.exists():
        _write_atomic(path, new_text)
    return path


def _plain_default(setting: Setting) -> Any:
    default = setting.default
    return list(default) if isinstance(default, tuple) else default


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def save_params(params: SamplingParams, path: Path | None = None, *,
                key_ids: Collection[str] | None = None) -> Path:
    """Make ``params`` the defaults (the ``[params]`` table): values the file has are
    updated (unset ones removed), others are added where they differ from the built-in
    defaults."""
    changes: dict[str, Any] = {f"params.{name}": getattr(params, name) for name in PARAM_SPECS}
    changes["params.stop"] = list(params.stop) or None
    changes["params.thinking"] = params.thinking
    return update_config(changes, path, key_ids=key_ids)


def save_theme(theme: str, path: Path | None = None, *, key_ids: Collection[str] | None = None) -> Path:
    return update_config({"theme": theme}, path, key_ids=key_ids)


def _write_atomic(path: Path, text: str) -> None:
    if path.is_symlink():  # a dotfiles checkout: write through the link, keep it a link
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else None
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigError(f"could not save the config file {path}: {exc.strerror or exc}.") from None


def write_template(path: Path | None = None, key_ids: Collection[str] | None = None) -> bool:
    """Create the config file from ``template()`` unless it exists; True when created."""
    path = path or config_path()
    if path.exists():
        return False
    _write_atomic(path, template(key_ids))
    return True


# ------------------------------------------------------------ documentation
def _wrap(text: str, prefix: str = "# ", width: int = 92) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=prefix, subsequent_indent=prefix,
                         break_on_hyphens=False, break_long_words=False) or [prefix.rstrip()]


def _describe(setting: Setting) -> str:
    parts = [setting.help]
    if setting.minimum is not None and setting.maximum is not None:
        parts.append(f"Range {_show(setting.minimum)} to {_show(setting.maximum)}.")
    parts.append(f"Default: {setting.default_text()}.")
    if setting.env:
        parts.append(f"Variable: {setting.env}.")
    if setting.flag:
        parts.append(f"Flag: {setting.flag}.")
    return " ".join(parts)


def template(key_ids: Collection[str] | None = None) -> str:
    """A config file with every setting documented and commented out (it loads as defaults)."""
    out = [
        "# vibechat configuration (TOML). Every setting is optional: a commented-out line shows",
        "# an example; delete the leading '# ' to use it.",
        "# Command-line flags override environment variables, which override this file.",
        "# 'vibechat config show' prints the effective values and where each comes from.",
        "",
    ]
    for setting in SETTINGS:
        if setting.key == "params.temperature":
            out += [*_wrap(Config.__dataclass_fields__["params"].metadata["help"]), "[params]", ""]
        out += _wrap(_describe(setting))
        out += [f"# {setting.name} = {setting.example}", ""]
    keys_doc = Config.__dataclass_fields__["keys"].metadata
    out += _wrap(keys_doc["help"])
    if key_ids:
        out += _wrap("Binding ids: " + ", ".join(sorted(key_ids)) + ".")
    out += ["[keys]", f"# {keys_doc['example']}", ""]
    return "\n".join(out)


def markdown_table() -> str:
    """The settings table of docs/USAGE.md."""
    rows = ["| key | variable | default | what it sets |", "| --- | --- | --- | --- |"]
    for s in SETTINGS:
        help_text = s.help.replace("|", "\\|")
        if s.minimum is not None and s.maximum is not None:
            help_text += f" ({_show(s.minimum)}–{_show(s.maximum)})"
        env = f"`{s.env}`" if s.env else ""
        rows.append(f"| `{s.key}` | {env} | {s.default_text()} | {help_text} |")
    rows.append("| `keys.<id>` | | | " + Config.__dataclass_fields__["keys"].metadata["help"] + " |")
    return "\n".join(rows)
