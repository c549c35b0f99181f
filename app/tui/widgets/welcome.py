"""What an empty chat says once a model is loaded: which model, how it runs, how it is
prompted, and, for the starter or any other base model, what to expect of it and how to get
a real chat model (a newcomer's first screen).

Pure text (the chat view shows it sanitised, never as markup); the model's name and
quantization come from outside and are made one line by ``model_line``.
"""

from __future__ import annotations

from vibechat.engine.models.starter import RECOMMENDED, is_starter
from vibechat.engine.settings.choices import COMPLETION
from vibechat.engine.turns.backend import ModelInfo

from ..outside import one_line
from .status_bar import model_line

KEYS = (
    "Enter sends · Ctrl+J newline · F1 help · F2 parameters · F3 models · "
    "Ctrl+N new chat · / commands"
)


def recommendations() -> str:
    """Small instruct models by the memory they need, with the reference to pull each."""
    lines = ["Real chat models, by free memory (F3 then d, or: vibechat models pull REF):"]
    lines += [f"  ~{rec.memory_gb:g} GB  {rec.ref}" for rec in RECOMMENDED]
    return "\n".join(lines)


def prompt_note(info: ModelInfo, starter: bool) -> str:
    """How the model is prompted, where that is not simply its own chat template."""
    if starter:
        return (
            "This is the starter: Gemma 3 270M, a tiny base model that was never trained to chat. "
            "vibechat prompts it with a short example conversation, so it answers briefly; "
            "expect toy answers.\n" + recommendations()
        )
    if info.chat_format == COMPLETION:
        return (
            "This GGUF has no chat template: it is prompted as a base (completion) model, "
            "with a short example conversation. An instruct GGUF chats far better.\n"
            + recommendations()
        )
    if info.chat_format not in ("gguf", "server"):
        return (
            f"This GGUF has no chat template: using the built-in {info.chat_format!r} turn format."
        )
    return ""


def welcome_text(info: ModelInfo) -> str:
    """The empty chat's text for ``info``."""
    engine = ""
    if info.kv_cache_bytes:
        engine = f" · {info.kv_cache}"
        if info.flash_attn_forced:
            engine += f" (flash attention on: the {info.kv_cache_type} V cache needs it)"
    if info.speculative != "off":
        engine += f" · {info.speculative} drafting ({info.draft_tokens} tokens)"
    note = prompt_note(info, starter=info.server is None and is_starter(info.path))
    return "\n".join(part for part in (f"{model_line(info)}{engine}", note, KEYS) if part)


# Characters of a title the offer shows.
TITLE_SHOWN = 60


def resume_line(key: str, title: str) -> str:
    """The welcome's offer of the last conversation: its key (``ctrl+r``, as bound) and its
    title (outside text: made one sanitised line, cut)."""
    shown = one_line(title, TITLE_SHOWN) or "untitled"
    return f"{key_shown(key)} reopens your last chat: “{shown}”"


def key_shown(key: str) -> str:
    """A key as the welcome writes keys: ``ctrl+r`` → ``Ctrl+R``, ``f12`` → ``F12`` (the first
    of several)."""
    parts = key.split(",")[0].strip().split("+")
    return "+".join(
        part.upper() if len(part) == 1 or part[1:].isdigit() else part.capitalize()
        for part in parts
    )
