"""Tools on the local engine: whether a reply is offered them, and how it ends.

A model is offered tools only where its chat template reads them and speaks a call format
vibechat recognises (engine/turns/tool_formats.py: Hermes/Qwen ``<tool_call>``, Llama 3.1+,
Mistral ``[TOOL_CALLS]``, gpt-oss's harmony); then the tools go to the template, llama.cpp's
grammar sampler shapes the call (engine/llama/tool_grammar.py: lazy from the call's opening
marker for ``auto``, from the first token for ``required``; one call per reply, then the
model's turn ends, as llama-server's default) so its arguments always parse,
and the decode loop's ``Emitter`` holds a call's text back from the reply and hands the calls
over at the end. A model whose template has no tools answers without them (a log line says
so); the session's caller sees no calls.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from ..errors import InvalidParameterError
from ..settings.structured import OutputFormat
from ..settings.tool_checks import TOOL_CHOICES
from ..turns.backend import FinishReason
from ..turns.chat_template import ChatTemplate
from ..turns.tool_calls import ToolCall, ToolSpec
from ..turns.tool_formats import ToolFormat

log = logging.getLogger("vibechat.llama_cpp")


def reply_tools(
    template: ChatTemplate,
    tools: Sequence[ToolSpec],
    choice: str,
    output_format: OutputFormat | None,
) -> tuple[ToolFormat | None, tuple[ToolSpec, ...]]:
    """The call format and the tools the template lists: no format (no call shaped or read)
    for tool choice ``none``, and neither for no tools or a template without tool support. An output
    format (``--json-schema``, a
    grammar) and tools cannot shape one reply both: refused in one line."""
    if choice not in TOOL_CHOICES:
        raise InvalidParameterError(
            f"tool choice {choice!r} is not one of {', '.join(TOOL_CHOICES)}."
        )
    if not tools:
        return None, ()
    fmt = template.tool_format
    if fmt is None:
        log.info("%s has no tool support: the reply is offered no tools", template.name)
        return None, ()
    # Tools listed as before (the prompt keeps the prefix the calls were made with), not called.
    if choice == "none":
        return None, tuple(tools)
    if output_format is not None:
        raise InvalidParameterError(
            "a reply cannot both follow an output format (--json-schema, --grammar, "
            "/format) and call tools: drop the format, or use tool choice none."
        )
    # One call per reply, as llama-server does unless asked for parallel calls: a small model
    # offered "one or more" writes the same call again and again until a limit cuts it.
    return dataclasses.replace(fmt, max_calls=1), tuple(tools)


def tool_calls_finish(finish: FinishReason, calls: Sequence[ToolCall]) -> FinishReason:
    """A reply that ended by itself with calls ends asking for them ("tool_calls"); one cut
    by a limit or stopped keeps its reason (a half-written call is no call to run)."""
    return "tool_calls" if calls and finish == "stop" else finish
