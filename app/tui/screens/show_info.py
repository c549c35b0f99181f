"""What ``/show`` says (``info``, ``parameters``, ``system``, ``template``): pure text,
one label and value a line, for a note in the chat (shown sanitised, never as markup).

Outside text (the model's name, the file's path, GGUF metadata, a server's URL) is put
on one line and bounded here; the note sanitises it again as it is shown.
"""

from __future__ import annotations

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import describe_switch
from vibechat.engine.turns.backend import ModelInfo, prompt_format_line

from ... import columns, slash
from ...progress import human_size
from ..outside import one_line

# Characters of a chat template /show template prints at most.
TEMPLATE_SHOWN = 6000


Rows = list[tuple[str, columns.Value]]


def table(rows: Rows) -> str:
    """``label  value`` lines, the values aligned (a value's own lines too); a value of parts
    on lines of about ``columns.PARTS`` characters (broken between parts)."""
    return "\n".join(columns.rows(rows))


def prompt_format(info: ModelInfo) -> str:
    """How the model is prompted, in the words ``vibechat show`` and ``run --json`` use
    (``prompt_format_line``); its own chat template can be printed."""
    line = one_line(prompt_format_line(info.chat_format, info.chat_format_reason))
    return f"{line}; /show template prints it" if info.chat_format == "gguf" else line


def params_line(params: SamplingParams) -> list[str]:
    """The parameters as ``name value`` parts (shown on lines of about ``columns.PARTS``)."""
    return [f"{name} {value}" for name, value in slash.param_rows(params)]


def info_text(info: ModelInfo | None, params: SamplingParams, system: str | None) -> str:
    """``/show info``: the model, its context, where it runs, its prompt format, and the
    conversation's parameters and system prompt."""
    heading, rows = info_rows(info, params, system)
    return heading + table(rows)


def info_rows(
    info: ModelInfo | None, params: SamplingParams, system: str | None
) -> tuple[str, Rows]:
    """``/show info`` as a heading line (or "") and its rows (``info_text``)."""
    if info is None:
        return "No model is loaded yet.\n", [("parameters", params_line(params))]
    rows: Rows = [("model", one_line(info.name))]
    if info.server:
        rows.append(
            (
                "server",
                f"{one_line(info.server)} ({one_line(info.backend)}; it loads and runs the model)",
            )
        )
    else:
        rows.append(("file", f"{one_line(info.path, limit=None)} · {human_size(info.file_size)}"))
    shape = [one_line(x) for x in (info.architecture, info.quantization) if x]
    if info.n_layers:
        shape.append(f"{info.n_layers} layers")
    if shape:
        rows.append(("architecture", " · ".join(shape)))
    rows.append(("context", _context(info)))
    if not info.server:
        rows.append(("runs on", _runs_on(info)))
        # Whether /image works here: the projector a vision model sees images through.
        rows.append(
            (
                "images",
                f"through {one_line(info.projector)}"
                if info.projector
                else "none (a vision model takes them with its projector: --mmproj FILE)",
            )
        )
    rows.append(("prompt format", prompt_format(info)))
    if info.server:
        rows.append(
            (
                "thinking",
                f"{params.thinking} (the server's template decides; /think on|off asks it)",
            )
        )
    elif info.thinking_switch:
        rows.append(
            (
                "thinking",
                f"{params.thinking}, through {describe_switch(info.thinking_switch)} (/think)",
            )
        )
    rows.append(("parameters", params_line(params)))
    rows.append(("system", _system(system)))
    return "", rows


def _context(info: ModelInfo) -> str:
    if not info.context_size:
        text = "not reported by the server"
    else:
        text = f"{info.context_size:,} tokens"
    if info.trained_context:
        text += f" (trained on {info.trained_context:,})"
    return text


def _runs_on(info: ModelInfo) -> str:
    parts = [one_line(info.device)]
    if info.n_threads:
        parts.append(f"{info.n_threads} thread" + ("" if info.n_threads == 1 else "s"))
    if info.kv_cache_bytes:
        parts.append(info.kv_cache + (" (flash attention on)" if info.flash_attn else ""))
    if info.speculative != "off":
        draft = f" with {one_line(info.draft_model)}" if info.draft_model else ""
        parts.append(f"{info.speculative} drafting{draft} ({info.draft_tokens} tokens)")
    return " · ".join(parts)


def _system(system: str | None) -> str:
    return one_line(system, limit=120) if system else "none (/set system TEXT sets one)"


def parameters_text(params: SamplingParams) -> str:
    """``/set`` alone, ``/show parameters``: one parameter a line, its value for people."""
    return "Parameters (/set NAME VALUE changes one):\n" + table(
        [(f"  {name}", value) for name, value in slash.param_rows(params)]
    )


def system_text(system: str | None) -> str:
    return (
        f"System prompt: {system}" if system else "System prompt: none (/set system TEXT sets one)."
    )


def template_text(info: ModelInfo | None, template: str | None) -> str:
    """``/show template``: the file's chat template (``template``, read from the GGUF), or
    how the model is prompted when it has none."""
    if info is None:
        return "No model is loaded yet."
    if info.chat_format != "gguf" or not template:
        return f"Prompt format: {prompt_format(info)}."
    cut = len(template) > TEMPLATE_SHOWN
    shown = template[:TEMPLATE_SHOWN] + (
        "\n… (cut: /show template shows the first "
        f"{TEMPLATE_SHOWN:,} of {len(template):,} characters)"
        if cut
        else ""
    )
    return f"Chat template of {one_line(info.name)}:\n{shown}"
