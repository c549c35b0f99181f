"""Tool calls in the chat, on top of engine/chat/tool_turns.py.

When a reply ends asking for tool calls, this controller takes over from the replies
controller: one call at a time, it shows a ``ToolCallBlock``, asks the user (``ToolApprovalScreen``)
unless the tool is allowed already (always, or for this conversation), runs the call in a
worker (Esc cancels it: the call's result says so, and no further reply is asked for), saves
each result after the reply that asked, and once every call is answered starts the next reply
with the results in view, for at most ``rounds`` rounds per prompt (the last one may call none).
Nothing runs without a yes; a denied call is told to the model as its result.

The tools are listed once, in a worker, after the app's first frame (an MCP server may take a
moment to start): a reply begun before that waits for the listing (``when_listed``; bounded by
the servers' start timeout), then is offered them.

Imports inside functions are deliberate: the tool approval dialog loads when a tool call first
asks, not before the chat's first frame.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from textual.widget import Widget

from vibechat.engine.chat.tool_turns import (
    DENIED,
    NOT_RUN_ARGUMENTS,
    NOT_RUN_STOPPED,
    ToolBox,
    outcome_of,
    round_choice,
    save_outcome,
    tool_label,
)
from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.table import Schema
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.backend import GenerationDone, ModelInfo
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

from ...appconfig import APP_SCHEMA
from ..conversation.tool_block import ToolCallBlock
from .events import ToolFinished, ToolsListed, ToolsProblem
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers

log = logging.getLogger("vibechat.tui")


class ToolPolicy(Protocol):
    """Who may run without asking (engine/tools/approval.py's ``ToolApproval``)."""

    def allowed(self, spec: ToolSpec) -> bool: ...
    def allow_for_conversation(self, spec: ToolSpec) -> None: ...
    def new_conversation(self) -> None: ...
    def always_allow(
        self, spec: ToolSpec, path: Path | None = None, *, schema: Schema = ...
    ) -> Path: ...


class ToolRounds:
    def __init__(
        self, host: ChatHost, toolbox: ToolBox | None, policy: ToolPolicy | None, rounds: int = 8
    ) -> None:
        self.host = host
        self.toolbox = toolbox
        self.policy = policy
        self.rounds = rounds
        self.specs: tuple[ToolSpec, ...] = ()
        # The tools are not listed yet (from the start: the listing begins after the first
        # frame); what waits for them (``when_listed``).
        self.listing = toolbox is not None
        self._waiting: list[Callable[[], Awaitable[None]]] = []
        # Tool rounds since the last prompt.
        self.round = 0
        # Calls are being answered.
        self.active = False
        self._calls: list[ToolCall] = []
        self._index = 0
        self._generation = -1
        self._block: ToolCallBlock | None = None
        self._stopped = False
        self._cancel = threading.Event()
        # A comparison's side's round: who asks (``Side A``), where its blocks go, and what
        # follows the round in place of the chat's next reply.
        self._asker: str | None = None
        self._into: Callable[[Widget], Awaitable[Widget]] | None = None
        self._then: Callable[[bool], Awaitable[None]] | None = None
        # The conversation the policy's "this conversation" is.
        self._policy_for: int | None = None
        # The model (its path) the user was told calls no tools.
        self._told_about: str | None = None

    def handlers(self) -> Handlers:
        return {ToolsListed: self.listed, ToolsProblem: self.problem, ToolFinished: self.finished}

    # ------------------------------------------------------------ offering
    def list_tools(self) -> None:
        """In a worker: the tools on offer (servers start here, not on the UI thread)."""
        toolbox = self.toolbox
        if toolbox is None:
            return

        # A server misbehaving later is said when it does.
        hear = getattr(toolbox, "hear_problems", None)
        if hear is not None:
            hear(lambda line: self.host.post_message(ToolsProblem(line)))

        def work() -> None:
            try:
                specs = tuple(toolbox.specs())
            except VibechatError as exc:
                self.host.post_message(ToolsListed((), (str(exc),)))
                return
            # A reply waits for the listing: it ends, whatever happens.
            except Exception as exc:
                log.exception("listing the tools failed")
                self.host.post_message(ToolsListed((), (f"The tools could not be listed: {exc}",)))
                return
            # The servers that could not be used.
            problems = tuple(getattr(toolbox, "problems", lambda: ())())
            self.host.post_message(ToolsListed(specs, problems))

        self.host.run_worker(work, thread=True, group="tools", exit_on_error=False)

    def listed(self, message: ToolsListed) -> None:
        self.specs = tuple(message.specs)
        self.listing = False
        for problem in message.problems:
            self.host.notify(problem, title="Tools", severity="warning", timeout=10)
        self.model_ready(self.host.state.model)
        waiting, self._waiting = self._waiting, []
        for then in waiting:
            self.host.call_later(then)

    def when_listed(self, then: Callable[[], Awaitable[None]]) -> bool:
        """While the tools are being listed: ``then`` is called once they are (True). False
        when they are listed already (or there are none to list): nothing waits."""
        if not self.listing:
            return False
        self._waiting.append(then)
        return True

    def problem(self, message: ToolsProblem) -> None:
        self.host.notify(message.line, title="Tools", severity="warning", timeout=10)

    def model_ready(self, info: ModelInfo | None) -> None:
        """Once per model: tools are configured, but its chat template offers none."""
        if info is None or not self.specs or info.tool_calls or info.path == self._told_about:
            return
        self._told_about = info.path
        self.host.notify(
            f"{info.name}'s chat template has no tool support: it is offered no tools (a Qwen, "
            "Llama 3.1+, Mistral or gpt-oss GGUF, or a server, can call them).",
            title="Tools",
            timeout=10,
            markup=False,
        )

    def new_prompt(self) -> None:
        """A prompt was sent: its replies may call tools for ``rounds`` rounds again."""
        self.round = 0

    def offer(self) -> tuple[tuple[ToolSpec, ...], str]:
        """What the next reply is offered: the tools and the choice (none after the last round)."""
        if not self.specs:
            return (), "auto"
        # "auto": the model decides, the user says yes.
        return self.specs, round_choice(self.round, self.rounds, "auto")

    # ------------------------------------------------------------- a round
    def take_over(
        self,
        done: GenerationDone,
        *,
        asker: str | None = None,
        into: Callable[[Widget], Awaitable[Widget]] | None = None,
        then: Callable[[bool], Awaitable[None]] | None = None,
    ) -> bool:
        """The reply just settled asks for ``done.tool_calls``: answer them, then the next
        reply. False when there is nothing to answer. A comparison's side (``asker``: ``Side
        A``, named in the question) puts its blocks ``into`` its column, and ``then(stopped)``
        follows the round (its continuation, or its end when Esc stopped it) in place of the
        chat's next reply."""
        if not done.tool_calls or self.toolbox is None or self.round >= self.rounds:
            # Calls past the last round: a server that did not take "none".
            return False
        self._asker, self._into, self._then = asker, into, then
        self.active, self._stopped = True, False
        self._calls, self._index = list(done.tool_calls), 0
        self._generation = self.host.session.generation
        self.round += 1
        state = self.host.state
        # Enter queues, Esc stops (the tools).
        state.generating = True
        state.status = "tool calls…"
        self.host.call_later(self._next)
        return True

    def _current(self) -> bool:
        return self.active and self.host.session.is_current(self._generation)

    async def _next(self) -> None:
        if not self._current():
            return
        if self._index >= len(self._calls):
            await self._done()
            return
        call = self._calls[self._index]
        spec = self._spec(call)
        block = ToolCallBlock(call, tool_label(call, spec))
        self._block = block
        await (self._into or self.host.chat.add)(block)
        if self._stopped:
            self._settle(ToolResult(NOT_RUN_STOPPED, True), "⏹ not run: stopped", "stopped")
            return
        if spec is None:
            outcome = outcome_of(
                call,
                None,
                False,
                self.toolbox,  # type: ignore[arg-type]
                self._cancel,
            )
            self._settle(outcome, "⚠ no such tool", "error")
            return
        try:
            call.parsed_arguments()
        except ValueError as exc:
            self._settle(
                ToolResult(f"{NOT_RUN_ARGUMENTS}{exc}.", True), "⚠ arguments not valid", "error"
            )
            return
        conversation = self.host.session.chat.conversation_id
        if self.policy is not None and conversation != self._policy_for:
            # What another conversation allowed is not allowed here.
            self.policy.new_conversation()
            self._policy_for = conversation
        if self.policy is not None and self.policy.allowed(spec):
            self._run(call, spec)
            return
        from ..screens.tool_approval import ToolApprovalScreen

        block.set_status("waiting for your yes…")
        generation = self._generation
        self.host.push_screen(
            ToolApprovalScreen(call, spec, self._asker),
            lambda answer: self._answered(generation, call, spec, answer),
        )

    def _spec(self, call: ToolCall) -> ToolSpec | None:
        return next((spec for spec in self.specs if spec.name == call.name), None)

    def _answered(
        self, generation: int, call: ToolCall, spec: ToolSpec, answer: str | None
    ) -> None:
        if generation != self._generation or not self._current():
            return
        if answer in ("conversation", "always") and self.policy is not None:
            try:
                if answer == "always":
                    written = self.policy.always_allow(
                        spec, self.host.config.path, schema=APP_SCHEMA
                    )
                    self.host.notify(
                        f"{spec.qualified} runs without asking from now on (allowed_tools in "
                        f"{written}).",
                        timeout=5,
                        markup=False,
                    )
                else:
                    self.policy.allow_for_conversation(spec)
            # The config could not be saved: allowed this once.
            except VibechatError as exc:
                self.host.notify(str(exc), severity="warning", markup=False)
        if self._stopped:
            self._settle(ToolResult(NOT_RUN_STOPPED, True), "⏹ not run: stopped", "stopped")
        elif answer in (None, "deny"):
            self._settle(ToolResult(DENIED, True), "✗ denied", "stopped")
        else:
            self._run(call, spec)

    def _run(self, call: ToolCall, spec: ToolSpec) -> None:
        assert self._block is not None and self.toolbox is not None
        self._block.set_status("running… Esc cancels")
        self.host.state.status = f"running {spec.qualified}…"
        self._cancel.clear()
        toolbox, cancel, generation, index = (
            self.toolbox,
            self._cancel,
            self._generation,
            self._index,
        )

        def work() -> None:
            try:
                outcome = outcome_of(call, spec, True, toolbox, cancel)
            # A tool's failure is its result, never a crash.
            except Exception as exc:
                log.exception("tool call failed")
                outcome = ToolResult(f"The tool failed: {exc}", True)
            self.host.post_message(ToolFinished(generation, index, outcome))

        self.host.run_worker(work, thread=True, group="tool-call", exit_on_error=False)

    def finished(self, message: ToolFinished) -> None:
        if (
            message.generation != self._generation
            or message.index != self._index
            or not self._current()
        ):
            return
        outcome = message.outcome
        assert isinstance(outcome, ToolResult)
        if self._stopped:
            state, kind = "⏹ cancelled", "stopped"
        elif outcome.is_error:
            state, kind = "⚠ failed", "error"
        else:
            state, kind = "✓ done", None
        self._settle(outcome, state, kind)

    def _settle(self, outcome: ToolResult, state: str, kind: str | None) -> None:
        """The call's result: saved after the reply that asked for it, shown, then the next call."""
        call, block = self._calls[self._index], self._block
        save_outcome(self.host.session, call, self._spec(call), outcome)
        self.host.chats.changed()
        if block is not None:
            block.message_id = (
                self.host.session.chat.leaf if self.host.session.chat.saving else None
            )
            block.set_result(outcome.text, state, kind)
        self._index += 1
        self.host.call_later(self._next)

    async def _done(self) -> None:
        """Every call answered: the model answers again with the results (unless stopped)."""
        self.active = False
        state = self.host.state
        state.generating = False
        state.status = state.at_rest
        then, self._then, self._into, self._asker = self._then, None, None, None
        if self._stopped:
            self.host.prompt_input.unqueue()
        if then is not None:
            await then(self._stopped)
            return
        if self._stopped:
            return
        await self.host.replies.start()

    # ------------------------------------------------------------- stopping
    def stop(self) -> None:
        """Esc: the running call is cancelled, the others are not run, no reply follows."""
        if self.active:
            self._stopped = True
            self._cancel.set()
            if self._block is not None and self._index < len(self._calls):
                self._block.set_status("cancelling…")

    def abandon(self) -> None:
        """A new chat, another conversation: the round is left. Its calls' results so far stay
        saved, and each call not answered yet gets one that says so (a server refuses a
        conversation with a call unanswered, should it be continued later)."""
        if not self.active:
            return
        self._cancel.set()
        self.active = False
        for call in self._calls[self._index :]:
            save_outcome(
                self.host.session,
                call,
                self._spec(call),
                ToolResult("Not run: the user left the conversation.", True),
            )
        self._index = len(self._calls)
