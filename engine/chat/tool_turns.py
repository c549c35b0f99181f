"""A reply that calls tools: the model asks for calls, each is allowed or not (nothing runs
without a yes: ``decide``), run, and its result saved as a ``tool`` message after the reply
that asked; then the model answers again with the results in view, for at most ``rounds``
rounds (the last one may call none, so it answers in words).

``ToolBox`` is what offers and runs the tools (engine/tools/: MCP servers and the built-in
ones); this module only sequences a reply's rounds through the ``ChatSession``, so ``vibechat
run`` and the chat (which asks the user in a dialog, in its own order) save alike. A denied
call, an unknown tool or arguments that do not parse become the call's result, in words the
model can act on: it is told, never left waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Protocol

from ..tools.results import ToolResult
from ..turns.tool_calls import ToolCall, ToolSpec

if TYPE_CHECKING:
    from ..settings.params import SamplingParams
    from ..turns.backend import ChatEvent
    from .compaction import CompactionNotice
    from .session import ChatSession
    from .turn import Answer

DENIED = "The user did not allow this call. Do not call it again unless they ask for it."
NOT_RUN_STOPPED = "Not run: the user stopped the reply."
# Calls run from one reply, at most (the rest are answered "not run").
MAX_CALLS = 16
# What the model is told of a call whose arguments were refused: the reason follows.
NOT_RUN_ARGUMENTS = "The call was not run: "
# Characters of a result kept for the model, at most (the tool's own bound is usually lower).
MAX_RESULT_CHARS = 64_000


class ToolBox(Protocol):
    """The tools a reply is offered, and running one (engine/tools/)."""

    def specs(self) -> Sequence[ToolSpec]:
        """The tools to offer (may start servers: blocks)."""

    def run(
        self, call: ToolCall, spec: ToolSpec | None = None, cancel: threading.Event | None = None
    ) -> ToolResult:
        """Run one allowed call (blocks, bounded by the call's timeout; ``cancel`` stops it)."""


def outcome_of(
    call: ToolCall, spec: ToolSpec | None, allowed: bool, toolbox: ToolBox, cancel: threading.Event
) -> ToolResult:
    """One call's result: an unknown tool, a denied call or arguments that do not parse are
    results too (the model is told); otherwise the tool runs."""
    if spec is None:
        return ToolResult(f"There is no tool named {call.name[:80]!r}.", True)
    if not allowed:
        return ToolResult(DENIED, True)
    try:
        call.parsed_arguments()
    except ValueError as exc:
        return ToolResult(f"{NOT_RUN_ARGUMENTS}{exc}.", True)
    outcome = toolbox.run(call, spec, cancel)
    if len(outcome.text) > MAX_RESULT_CHARS:
        cut = outcome.text[:MAX_RESULT_CHARS]
        return ToolResult(
            f"{cut}\n[cut: the result was {len(outcome.text):,} characters; the first "
            f"{MAX_RESULT_CHARS:,} are shown]",
            outcome.is_error,
        )
    return outcome


def tool_label(call: ToolCall, spec: ToolSpec | None) -> str:
    """The tool a call names, as the user names it: SERVER/NAME (``unknown/NAME`` for none)."""
    return spec.qualified if spec is not None else f"unknown/{call.name[:80]}"


def save_outcome(
    session: ChatSession, call: ToolCall, spec: ToolSpec | None, outcome: ToolResult
) -> None:
    """The call's result joins the conversation after the reply that asked for it (saved)."""
    session.chat.add_tool_result(call.id, tool_label(call, spec), outcome.text)


def round_choice(round_: int, rounds: int, tool_choice: str) -> str:
    """The tool choice of a reply's ``round_``-th round (0: the prompt's first reply): "required"
    forces the first call only, and the last round may call none, so it answers in words (the
    tools stay listed: the prompt keeps its prefix)."""
    if round_ >= rounds or tool_choice == "none":
        return "none"
    return tool_choice if round_ == 0 else "auto"


def _watched(
    run: Callable[[], ToolResult],
    cancel: threading.Event,
    stop_requested: Callable[[], bool] | None,
) -> ToolResult:
    """``run()``, with ``cancel`` set as soon as ``stop_requested()`` turns true (Ctrl-C in
    ``vibechat run``): a call then ends at once, not at its timeout."""
    if stop_requested is None:
        return run()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            if stop_requested():
                cancel.set()
                return

    watcher = threading.Thread(target=watch, daemon=True, name="vibechat-tool-watch")
    watcher.start()
    try:
        return run()
    finally:
        done.set()
        watcher.join()


def answer_with_tools(
    session: ChatSession,
    toolbox: ToolBox,
    decide: Callable[[ToolCall, ToolSpec], bool],
    *,
    rounds: int,
    tool_choice: str = "auto",
    params: SamplingParams | None = None,
    on_text: Callable[[str], object] | None = None,
    on_event: Callable[[ChatEvent], object] | None = None,
    on_call: Callable[[ToolCall, ToolSpec | None, bool, ToolResult], object] | None = None,
    stop_requested: Callable[[], bool] | None = None,
    on_compact: Callable[[CompactionNotice], object] | None = None,
) -> Answer:
    """Answer the conversation's last prompt, running the tool calls ``decide`` allows, for at
    most ``rounds`` rounds of calls (blocks: ``vibechat run``). ``on_call`` hears of each call
    once settled (allowed or not, and its outcome); ``on_compact``, of a compaction the context
    policy made before a reply. Returns the last reply's ``Answer``."""
    offered = tuple(toolbox.specs()) if tool_choice != "none" else ()
    by_name = {spec.name: spec for spec in offered}
    cancel = threading.Event()
    for round_ in range(max(0, rounds) + 1):
        choice = round_choice(round_, rounds, tool_choice) if offered else "auto"
        answer = session.answer(
            params,
            on_text=on_text,
            on_event=on_event,
            stop_requested=stop_requested,
            tools=offered,
            tool_choice=choice,
            on_compact=on_compact,
        )
        done = answer.done
        if (
            answer.interrupted
            or answer.pipe_closed
            or not done.tool_calls
            or choice == "none"
            or not offered
        ):
            return answer
        stopped = False
        for index, call in enumerate(done.tool_calls):
            spec = by_name.get(call.name)
            # Every call gets a result (servers refuse a conversation with a call unanswered).
            if stopped or index >= MAX_CALLS:
                allowed = False
                outcome = ToolResult(
                    NOT_RUN_STOPPED
                    if stopped
                    else f"Not run: at most {MAX_CALLS} calls run per reply.",
                    True,
                )
            else:
                allowed = spec is not None and decide(call, spec)
                outcome = _watched(
                    partial(outcome_of, call, spec, allowed, toolbox, cancel),
                    cancel,
                    stop_requested,
                )
            save_outcome(session, call, spec, outcome)
            if on_call is not None:
                on_call(call, spec, allowed, outcome)
            stopped = stopped or (stop_requested is not None and bool(stop_requested()))
        if stopped:
            return answer
    return answer
