"""What one ``vibechat run`` asks: ``RunRequest``, filled by the ``run`` command (cli.py) from
its options and read by each part of the run: ``run.execute`` (the reply),
``run_output`` (how it is written) and ``run_result`` (its end and exit status)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vibechat.engine.chat.tool_turns import ToolBox
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import TokenCandidates
from vibechat.engine.turns.tool_calls import ToolSpec


@dataclass
class RunRequest:
    """One prompt to answer, and how: the parameters, the output's options (``--json``,
    ``--stats``, ``--raw``, ``--show-thinking``), the tools offered and the attachments; plus
    what the run records as it goes (the tool calls, whether ``--json``'s object is out)."""

    prompt: str
    system: str | None
    params: SamplingParams
    json_output: bool = False
    show_stats: bool = False
    raw: bool = False
    # A reasoning model's thinking on stderr, as it streams.
    show_thinking: bool = False
    # Tools (engine/chat/tool_turns.py): what the model is offered, and which calls run (run
    # never asks: only those ``allow_tool`` allows, from --allow-tool; the rest are denied, one
    # stderr line each).
    tools: ToolBox | None = None
    allow_tool: Callable[[ToolSpec], bool] | None = None
    tool_choice: str = "auto"
    tool_rounds: int = 8
    # vibechat --verbose: say what is only worth knowing when asked (no tool support)
    verbose: bool = False
    # --image / --file, read and kept (read_attachments).
    attachments: tuple[Attachment, ...] = ()
    # piped stdin joined before the prompt given (run_input.Prompt): --json's "stdin"
    stdin_chars: int | None = None
    # What a prompt that would overflow the context does (the context_policy setting).
    context_policy: str = "trim"
    # --compact: summarise the continued conversation (``prompt``: the instructions) instead
    # of answering a prompt.
    compact: bool = False
    # --json's "tool_calls": each call as it went (its tool, arguments, whether it ran, its
    # result, cut)
    tool_log: list[dict[str, object]] = field(default_factory=list, init=False)
    # --logprobs N: the token lens's steps, as they came (--json's "logprobs").
    lens_log: list[TokenCandidates] = field(default_factory=list, init=False)
    # --json's "compacted_from" and "left_out_messages" (ChatSession's, after the reply).
    compacted_from: dict[str, object] | None = field(default=None, init=False)
    left_out: list[dict[str, object]] = field(default_factory=list, init=False)
    # --json: the object is on stdout already.
    printed: bool = field(default=False, init=False)
