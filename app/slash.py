"""Slash commands typed in the chat input, for people coming from ``ollama run``.

Parsing is pure: ``parse()`` turns a line into a ``SlashCommand`` (or ``None`` for
a normal message), ``parse_set()`` what ``/set`` asks for (ollama's spellings
included: ``/set parameter num_predict 200``); the app decides what each does.
``shown()`` writes a parameter's value for people (``auto``, ``random``, ``none``,
never a Python repr).

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vibechat.engine.settings.params import PARAM_SPECS


def set_help() -> str:
    """``/set``'s line of help: every parameter by name (engine/settings/params.py, then the stop
    strings and the thinking switch) and Ollama's own names for them."""
    names = ", ".join([*PARAM_SPECS, "stop", "thinking"])
    ollama = "".join(f" and {name}" for name in ollama_names())
    return (
        f"/set NAME VALUE: change a parameter ({names}; ollama's /set parameter NAME "
        f"VALUE{ollama} work too); /set system TEXT; /set context_policy trim|compact|stop; "
        "/set alone lists them"
    )


def ollama_names() -> dict[str, str]:
    """Ollama's names for our parameters where they differ (``ParamSpec.ollama``): theirs to
    ours."""
    return {spec.ollama: spec.name for spec in PARAM_SPECS.values() if spec.ollama}


COMMANDS: dict[str, str] = {
    "/set": set_help(),
    "/show": "/show info|parameters|system|template: the model (file, quantization, context, "
    "where it runs, prompt format) and the parameters; /show alone is /show info",
    "/load": "/load MODEL|PATH: load another model by name (vibechat models list) or a .gguf "
    "file's path (a new conversation starts; a server: another of its model ids); /load alone "
    "opens F3",
    "/format": "/format json|FILE|off: make the next replies JSON (json), follow a JSON Schema or "
    "a .gbnf grammar (FILE, or inline JSON); off clears it; /format alone shows it",
    "/think": "/think on|off|low|medium|high|auto: switch a reasoning model's thinking on or "
    "off, or set its effort, for the next replies, where its template takes a switch (auto: as "
    "the template does by default); /think budget N|off: end each reply's thinking after N "
    "tokens; /think alone shows both",
    "/preset": "/preset NAME: apply a preset from the config file (system prompt, parameters, "
    "thinking, format; its model loads as with /load); /preset alone opens the list; "
    "/preset save NAME keeps this set-up",
    "/compact": "/compact [INSTRUCTIONS]: the model summarises the conversation (with your "
    "instructions); you accept or edit the summary, and the conversation goes on from a new "
    "branch that starts with it (the original stays; Ctrl+X on a message: up to it)",
    "/compare": "/compare SPEC: answer the next prompt twice, side by side: A with this chat's "
    "settings, B with SPEC on top (temperature=1.2, preset:precise, system=TEXT, model:NAME, "
    "base-url=URL; A_SPEC vs B_SPEC sets both); /compare again [SPEC]: the last prompt again; "
    "/compare blind SPEC hides which is which until the pick; /compare off disarms",
    "/system": "/system TEXT: set the system prompt; /system alone shows it, /system clear "
    "removes it",
    "/save": "/save: (ollama's) nothing to do: conversations are saved as you go (Ctrl+B lists "
    "them); Ctrl+S in F2 saves the parameters as your defaults",
    "/clear": "/clear: clear the conversation (same as /new)",
    "/new": "/new: start a new conversation (Ctrl+N)",
    "/stats": "/stats: show the last reply's statistics",
    "/help": "/help: list the commands and key bindings (F1)",
    "/bye": "/bye: quit",
}
# The attachment commands (app/tui/controllers/attachments.py handles them).
ATTACH_COMMANDS: dict[str, str] = {
    "/image": "/image PATH: attach an image to the next prompt (PNG, JPEG, GIF, WebP, BMP; "
    "for a vision model)",
    "/file": "/file PATH: attach a text file to the next prompt (its text goes to the model "
    "with its name)",
    "/detach": "/detach [N|all]: remove the last attachment waiting to be sent (N: the Nth; "
    "all: every one)",
}
ALIASES = {"/quit": "/bye", "/exit": "/bye", "/?": "/help", "/reset": "/new"}
# What /save says: ollama saves a session as a new model; here nothing is ever unsaved.
SAVE_NOTE = (
    "Nothing to save: this conversation is saved as you go (Ctrl+B lists your conversations, "
    "'vibechat history export ID' writes one to a file). To keep these parameters as your "
    "defaults, press Ctrl+S in the parameter panel (F2)."
)


@dataclass(frozen=True)
class SlashCommand:
    """A slash command typed: ``name`` canonical (an alias resolved, e.g. ``/set``), ``arg``
    the rest of the line, stripped."""

    name: str
    arg: str

    @property
    def known(self) -> bool:
        return self.name in COMMANDS


def parse(line: str) -> SlashCommand | None:
    """A slash command, or None when ``line`` is a message for the model.

    A line starting with ``//`` is a message that starts with ``/`` (escape)."""
    text = line.strip()
    if not text.startswith("/") or text.startswith("//"):
        return None
    head, _, rest = text.partition(" ")
    name = head.lower()
    name = ALIASES.get(name, name)
    return SlashCommand(name=name, arg=rest.strip())


def unescape(line: str) -> str:
    """``//text`` sends ``/text`` to the model."""
    stripped = line.lstrip()
    return stripped[1:] if stripped.startswith("//") else line


def suggestion(name: str) -> str:
    """The one-line message for an unknown command."""
    close = (
        [c for c in (*COMMANDS, *ATTACH_COMMANDS) if c.startswith(name[:3])]
        if len(name) > 1
        else []
    )
    hint = f" Did you mean {close[0]}?" if close else ""
    return (
        f"Unknown command {name}.{hint} Type /help for the list; start with // to send a "
        "message beginning with /."
    )


# --- /set -------------------------------------------------------------------------------------

# Settings that are not sampling parameters: what to do instead (ollama takes them in /set).
ENGINE_SETTINGS = {
    "num_ctx": "The context size is an engine setting, fixed when the model loads: start the "
    "chat with --ctx N, or set context_size in the config file (vibechat config edit).",
    "num_gpu": "GPU layers are an engine setting: the GPU layers slider in the parameter panel "
    "(F2), --n-gpu-layers N, or gpu_layers in the config file (vibechat config edit).",
    "num_thread": "CPU threads are an engine setting: start the chat with --threads N, or set "
    "threads in the config file (vibechat config edit).",
    "repeat_last_n": "vibechat's repeat penalty looks back over a fixed window of recent tokens; "
    "/set repeat_penalty VALUE sets how strongly.",
}
# ollama's /set switches: the parameter they set, or what vibechat does instead.
SWITCHES: dict[str, tuple[str, str] | str] = {
    "noformat": ("format", "off"),
    "think": ("thinking", "on"),
    "nothink": ("thinking", "off"),
    "verbose": "vibechat always shows each reply's speed in the status bar; /stats shows its "
    "statistics in full.",
    "quiet": "vibechat always shows each reply's speed in the status bar (nothing is printed "
    "into the chat).",
    "wordwrap": "vibechat always wraps replies to the window.",
    "nowordwrap": "vibechat always wraps replies to the window.",
    "history": "Up and Down in an empty input always recall earlier prompts; chats are saved "
    "unless vibechat was started with --no-save.",
    "nohistory": "To keep this chat out of the history, start vibechat with --no-save.",
}
SET_USAGE = (
    "/set NAME VALUE (or /set parameter NAME VALUE), e.g. /set temperature 0.5; "
    "/set system TEXT; /set alone lists the parameters."
)


@dataclass(frozen=True)
class SetRequest:
    """What ``/set ARG`` asks for. ``kind``: ``list`` (show the parameters), ``param``
    (``name`` = ``value``, names ours), ``system`` (``value`` the prompt), ``info`` (nothing
    to set: ``value`` says why and what to do instead)."""

    kind: str
    name: str = ""
    value: str = ""


def parse_set(arg: str) -> SetRequest:
    """``/set``'s argument, in vibechat's spelling (``NAME VALUE``) or ollama's
    (``parameter NAME VALUE``, ``system TEXT``, ``num_predict``, ``think``...)."""
    head, _, rest = arg.strip().partition(" ")
    head, rest = head.lower(), rest.strip()
    if not head:
        return SetRequest("list")
    if head == "system":
        return SetRequest("system", value=rest)
    ollama = head == "parameter"
    if ollama:
        if not rest:
            return SetRequest("list")
        head, _, rest = rest.partition(" ")
        head, rest = head.lower(), rest.strip()
    key = head.replace("-", "_")
    key = ollama_names().get(key, key)
    if key in ENGINE_SETTINGS:
        return SetRequest("info", value=ENGINE_SETTINGS[key])
    switch = SWITCHES.get(key)
    if not ollama and not rest and switch is not None:
        return (
            SetRequest("info", value=switch)
            if isinstance(switch, str)
            else SetRequest("param", *switch)
        )
    if ollama and key == "stop" and "|" not in rest:
        # Ollama's /set parameter stop A B C: one stop string a word.
        rest = "|".join(rest.split())
    return SetRequest("param", key, rest)


def shown(name: str, value: Any) -> str:
    """A parameter's value for people: ``auto`` (None: the model's default), ``random`` (a
    seed of None), ``none`` (no stop strings), ``free text`` (no reply format), numbers as
    typed (``0.8``, not ``0.80000001``). Stop strings are quoted, line breaks as ``\\n``."""
    if name in ("format", "output_format"):
        return getattr(value, "label", None) or "free text"
    spec = PARAM_SPECS.get(name)
    # Auto, no limit, off, random, or the number (engine/settings/params.py).
    if spec is not None:
        return spec.show(value)
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return " | ".join(_quoted(str(v)) for v in value) if value else "none"
    return str(value)


def _quoted(text: str) -> str:
    return (
        '"'
        + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace('"', '\\"')
        + '"'
    )


def param_rows(params: Any) -> list[tuple[str, str]]:
    """Every parameter of ``params`` (``SamplingParams``) and its value for people, in the
    order of ``/set``'s list."""
    rows = [
        (name, shown(name, value))
        for name, value in params.to_dict().items()
        if name not in ("output_format", "thinking", "think_budget")
    ]
    # The budget beside the thinking, also when off (to_dict leaves it out then).
    rows.append(("think_budget", shown("think_budget", params.think_budget)))
    rows.append(("thinking", shown("thinking", params.thinking)))
    rows.append(("format", shown("format", params.output_format)))
    return rows
