"""Command-line options shared by ``vibechat`` (the TUI) and ``vibechat run``.

Numeric sampling flags are read as text and parsed by the engine's
``PARAM_SPECS``, so a bad value gets the same one-line message everywhere.
``with_flags`` lays the flags over the loaded config (flag > env > file > default).

The engine flags given travel as ``{config key: value}`` (the names of
``EngineSettings`` in engine/settings/knobs.py, ``None`` not given); each flag's name, for
messages and ``config show``, is the one the config's settings table records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

import typer

from vibechat.engine.settings.knobs import CONTEXT_STEP, MAX_CONTEXT

def _number_check(name: str) -> Any:
    """A sampling flag's callback: a value that is not a number at all (``-n abc``) is a
    malformed command line, a usage error (exit 2) in the command's own words, like any
    option of the wrong type; a number out of range is a bad value, said later by
    ``PARAM_SPECS`` (exit 1), as in the config file and ``/set``."""
    def check(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
        if value is not None and not _is_number_or_word(name, value):
            from vibechat.engine.settings.params import PARAM_SPECS

            spec = PARAM_SPECS[name]
            kind = "a whole number" if spec.kind is int else "a number"
            flag = "--" + name.replace("_", "-")
            shown = value if len(value) <= 40 else value[:39] + "…"
            usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
            raise usage_error(f"{flag} must be {kind} {spec.range_text()} (got {shown!r})", ctx=ctx)
        return value
    return check


def _is_number_or_word(name: str, value: str) -> bool:
    """Whether ``value`` is what the flag takes, range aside: a number of its kind or one of
    its words (``auto``, ``none``...)."""
    from vibechat.engine.errors import InvalidParameterError
    from vibechat.engine.settings.params import PARAM_SPECS

    spec = PARAM_SPECS[name]
    try:
        spec.parse(value)
    except InvalidParameterError:
        try:
            int(value.strip()) if spec.kind is int else float(value.strip())
        except ValueError:
            return False
    return True


SAMPLING = "Sampling"
ENGINE = "Model and engine"
REMOTE = "Remote server"

ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", metavar="MODEL", help="A .gguf path or a local model name (default: the bundled starter "
    "model); with --backend openai, the server's model id.", rich_help_panel=ENGINE)]
SystemOpt = Annotated[Optional[str], typer.Option("--system", "-s", metavar="TEXT", help="System prompt.")]
TemperatureOpt = Annotated[Optional[str], typer.Option(
    "--temperature", "-t", callback=_number_check("temperature"),
    metavar="NUMBER", help="0-5; 0 is greedy (default 0.8).", rich_help_panel=SAMPLING)]
TopKOpt = Annotated[Optional[str], typer.Option(
    "--top-k", callback=_number_check("top_k"),
    metavar="N", help="0-1000; 0 disables (default 40).", rich_help_panel=SAMPLING)]
TopPOpt = Annotated[Optional[str], typer.Option(
    "--top-p", callback=_number_check("top_p"),
    metavar="NUMBER", help="0-1; 1 disables (default 0.95).", rich_help_panel=SAMPLING)]
MinPOpt = Annotated[Optional[str], typer.Option(
    "--min-p", callback=_number_check("min_p"),
    metavar="NUMBER", help="0-1; 0 disables (default 0.05).", rich_help_panel=SAMPLING)]
RepeatPenaltyOpt = Annotated[Optional[str], typer.Option(
    "--repeat-penalty", callback=_number_check("repeat_penalty"),
    metavar="NUMBER", help="0.1-5; 1 disables (default 1.0).", rich_help_panel=SAMPLING)]
MaxTokensOpt = Annotated[Optional[str], typer.Option(
    "--max-tokens", "-n", callback=_number_check("max_tokens"),
    metavar="N", help="Most tokens to generate (default: until the model stops).",
    rich_help_panel=SAMPLING)]
SeedOpt = Annotated[Optional[str], typer.Option(
    "--seed", callback=_number_check("seed"),
    metavar="N", help="Seed for reproducible sampling (default: random).", rich_help_panel=SAMPLING)]
StopOpt = Annotated[Optional[list[str]], typer.Option(
    "--stop", metavar="TEXT", help="Stop when the reply contains this text (repeatable; \\n is a newline, \\t a tab).",
    rich_help_panel=SAMPLING)]
ThinkingOpt = Annotated[Optional[str], typer.Option(
    "--thinking", metavar="MODE", help="A reasoning model's thinking: auto (its template's default), on or off; "
    "where the template takes a switch (Qwen3, Granite; gpt-oss: off = low effort) or a server is asked.",
    rich_help_panel=SAMPLING)]
CtxOpt = Annotated[Optional[int], typer.Option(
    "--ctx", metavar="TOKENS", help=f"Context size in tokens, {CONTEXT_STEP}-{MAX_CONTEXT}, rounded up to a multiple of "
    f"{CONTEXT_STEP} (default: the model's, at most 8192).", rich_help_panel=ENGINE)]
GpuLayersOpt = Annotated[Optional[int], typer.Option(
    "--n-gpu-layers", metavar="N",
    help="Layers to offload to the GPU (default: all when the build supports it; -1 = all).",
    rich_help_panel=ENGINE)]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "--threads", metavar="N", help="CPU threads (default: physical performance cores).", rich_help_panel=ENGINE)]
BackendOpt = Annotated[Optional[str], typer.Option(
    "--backend", metavar="NAME",
    help="llama (GGUF files through llama.cpp, the default) or openai (an OpenAI-compatible server).",
    rich_help_panel=REMOTE)]
BaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--base-url", metavar="URL",
    help="The server's API root, e.g. http://127.0.0.1:8080/v1 (implies --backend openai).",
    rich_help_panel=REMOTE)]
ApiKeyEnvOpt = Annotated[Optional[str], typer.Option(
    "--api-key-env", metavar="VAR", help="The environment variable holding the server's API key "
    "(default: VIBECHAT_API_KEY, else OPENAI_API_KEY for https servers).", rich_help_panel=REMOTE)]
KvCacheTypeOpt = Annotated[Optional[str], typer.Option(
    "--kv-cache-type", metavar="TYPE",
    help="KV-cache type: f16 (default), q8_0 or q4_0 (less memory; turns flash attention on).",
    rich_help_panel=ENGINE)]
DraftOpt = Annotated[Optional[str], typer.Option(
    "--draft", metavar="MODE",
    help="Speculative decoding: off (default), auto (drafts from the prompt and reply, only as much as pays) "
         "or prompt-lookup (always --draft-tokens drafts).",
    rich_help_panel=ENGINE)]
DraftTokensOpt = Annotated[Optional[int], typer.Option(
    "--draft-tokens", metavar="N", help="Most tokens drafted per step with --draft auto|prompt-lookup (default 10).",
    rich_help_panel=ENGINE)]
DraftModelOpt = Annotated[Optional[str], typer.Option(
    "--draft-model", metavar="REF",
    help="A small model of the same family that drafts tokens for the model to check (any --model "
         "reference); drafting is auto with it, or the --draft mode given.",
    rich_help_panel=ENGINE)]
RepackOpt = Annotated[Optional[str], typer.Option(
    "--repack", metavar="MODE",
    help="CPU weight repacking: auto (default: on, except where llama.cpp's AMX kernel crashes: see --version), "
    "on or off.",
    rich_help_panel=ENGINE)]
PromptFormatOpt = Annotated[Optional[str], typer.Option(
    "--prompt-format", metavar="FORMAT",
    help="How a local model is prompted: auto (its chat template; a base model as a completion model), "
         "completion, template, gemma, chatml or llama3.",
    rich_help_panel=ENGINE)]
HISTORY = "History"
STRUCTURED = "Structured output"
NoSaveOpt = Annotated[bool, typer.Option(
    "--no-save", help="Do not save this chat in the history.", rich_help_panel=HISTORY)]


EngineFlags = Mapping[str, Any]  # engine flags as typed, by config key (EngineSettings' names)


def engine_flags(**given: Any) -> dict[str, Any]:
    """The engine flags given on the command line, by config key; ``None``: not given."""
    from vibechat.engine.settings.knobs import ENGINE_SETTING_KEYS

    unknown = set(given) - set(ENGINE_SETTING_KEYS)
    if unknown:
        raise TypeError(f"not engine settings: {', '.join(sorted(unknown))}")
    return {key: value for key, value in given.items() if value is not None}


@dataclass
class SamplingChoice:
    """Sampling flags as typed (``None`` = not given)."""

    values: dict[str, str | None] = field(default_factory=dict)
    stop: list[str] | None = None
    thinking: str | None = None  # --thinking: auto, on or off

    def __post_init__(self) -> None:
        if self.stop:  # a shell cannot type a newline in a flag: "\n" stands for one, as in llama-cli
            self.stop = [unescape(s) for s in self.stop]

    def to_params(self, base=None):
        """Validated ``SamplingParams``: ``base`` (or the defaults) with the given flags applied."""
        from vibechat.engine.settings.params import PARAM_SPECS, SamplingParams

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
    from vibechat.engine.settings.config import SETTINGS_BY_KEY, range_text
    from vibechat.engine.errors import InvalidParameterError

    for key, value in values.items():
        setting = SETTINGS_BY_KEY[key]
        if value is None or setting.kind != "whole number":
            continue
        if (setting.minimum is not None and value < setting.minimum) or (
                setting.maximum is not None and value > setting.maximum):
            raise InvalidParameterError(f"{setting.flag or key} must be{range_text(setting)} (got {value}).")


def with_flags(loaded, engine: EngineFlags, sampling: SamplingChoice, system: str | None):
    """``loaded`` (a ``LoadedConfig``) with the command-line flags on top (``engine``: the
    engine flags given, by config key); each value given on the command line is recorded as
    coming from its flag."""
    from vibechat.engine.settings.config import SETTINGS_BY_KEY
    from vibechat.engine.settings.params import PARAM_SPECS

    check_engine_numbers(engine)  # flag errors keep their own wording
    values: dict[str, object] = {}
    flags: dict[str, str] = {}
    for key, value in engine.items():
        if value is not None:
            values[key], flags[key] = value, SETTINGS_BY_KEY[key].flag or key
    if engine.get("base_url") is not None and engine.get("backend") is None:  # --base-url alone means a server
        values["backend"], flags["backend"] = "openai", SETTINGS_BY_KEY["base_url"].flag or "base_url"
    if system is not None:
        values["system_prompt"], flags["system_prompt"] = system, "--system"
    for name, raw in sampling.values.items():
        if raw is not None:  # "--seed none" is given too: it overrides a configured seed
            key = f"params.{name}"
            values[key], flags[key] = PARAM_SPECS[name].parse(raw), "--" + name.replace("_", "-")
    if sampling.stop:
        values["params.stop"], flags["params.stop"] = tuple(sampling.stop), "--stop"
    if sampling.thinking is not None:
        values["params.thinking"], flags["params.thinking"] = sampling.thinking, "--thinking"
    return loaded.with_flags(values, flags)
