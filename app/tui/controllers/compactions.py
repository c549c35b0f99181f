"""Compaction and pins in the chat (issue 45): ``/compact [instructions]`` (and Ctrl+X on a
message: up to it) asks the model for a summary in a worker, shows it in a dialog to accept or
edit (``screens/summary.py``), and on accept the conversation goes on from a new branch that
starts with it (engine/chat/compaction.py; the original stays, ← on the summary shows it): the
conversation is read again on that branch, whose prefix the KV cache evaluates once and keeps as
a snapshot. Ctrl+U on a message pins or unpins it (never left out to fit the context)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vibechat.engine.chat.compaction import Compaction
from vibechat.engine.errors import VibechatError
from vibechat.engine.turns.backend import ContextTrimmed

from ..conversation.messages import ChatMessageWidget
from ..screens.summary import SummaryScreen
from .events import ReplyCompacted, SummaryReady
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers


class Compactions:
    """``/compact``, its dialog and what accepting does; pins."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {
            ChatMessageWidget.PinRequested: self.pin,
            ChatMessageWidget.CompactRequested: self.compact_here,
            SummaryReady: self.summary_ready,
            ReplyCompacted: self.on_compacted,
        }

    def command(self, arg: str) -> None:
        """``/compact [instructions]``: the whole conversation."""
        self.start(arg, None)

    def compact_here(self, message: ChatMessageWidget.CompactRequested) -> None:
        """Ctrl+X on a message: the conversation up to it (its turn included)."""
        index = self.host.session.chat.turn_of(message.message_id)
        if index is None:
            self.host.notify(
                "Only a message the model is sent can be compacted up to.", severity="warning"
            )
            return
        self.start("", index)

    def start(self, instructions: str, upto: int | None) -> None:
        """Ask the model for the summary in a worker (``SummaryReady`` when it comes)."""
        host, session = self.host, self.host.session
        if host.state.generating:
            host.notify(
                "Still answering: press Esc to stop the reply, then compact.",
                severity="warning",
                timeout=4,
            )
            return
        if not host.state.model_ready:
            host.notify("The model is not loaded yet: compact once it is.", severity="warning")
            return
        generation = session.generation

        def work() -> None:
            try:
                compaction = session.compact(
                    instructions, upto, stop_requested=lambda: not session.is_current(generation)
                )
            except VibechatError as exc:
                host.post_message(SummaryReady(generation, None, str(exc)))
            else:
                host.post_message(SummaryReady(generation, compaction))

        host.state.status = "summarising…"
        host.notify("Asking the model for a summary of the conversation…", timeout=3)
        host.run_worker(work, thread=True, group="compact", exit_on_error=False)

    def summary_ready(self, message: SummaryReady) -> None:
        """The summary came: the dialog asks (nothing is replaced before the user's yes)."""
        host = self.host
        if host.state.status == "summarising…":
            host.state.status = "ready"
        if not host.session.is_current(message.generation):
            return
        compaction = message.compaction
        if compaction is None:
            host.notify(message.error, severity="error", timeout=8)
            return
        host.push_screen(
            SummaryScreen(compaction.summary, compaction.kept),
            lambda text: self._answered(compaction, text),
        )

    async def _answered(self, compaction: Compaction, text: str | None) -> None:
        """Accepted (the text as edited): the new branch; cancelled: nothing replaced."""
        host, session = self.host, self.host.session
        if text is None:
            host.notify("Compaction cancelled: nothing was replaced.", timeout=3)
            return
        try:
            ids = session.accept_compaction(compaction, text)
        except VibechatError as exc:
            host.notify(str(exc), severity="error", timeout=8)
            return
        conversation_id = session.chat.conversation_id
        if ids and conversation_id is not None:
            # Read again on the new branch; its prefix goes into the KV cache once.
            host.chats.reopen(conversation_id)
        else:
            # Not saved (--no-save): the messages stay on screen, the summary below them.
            await host.chat.add(
                ChatMessageWidget(
                    "note",
                    session.conversation.summary or "",
                    label="Summary (compacted)",
                    status="the model reads it in place of the messages above",
                )
            )
        host.notify(
            f"Compacted {compaction.kept} messages into a summary: the conversation goes on "
            "from it (the original branch stays: ← on the summary).",
            timeout=5,
        )

    def pin(self, message: ChatMessageWidget.PinRequested) -> None:
        """Pin (or unpin) a message of the branch on screen, and say so beside its label."""
        host, chat = self.host, self.host.session.chat
        index = chat.turn_of(message.message_id)
        if index is None or not chat.set_pinned(index, message.pinned):
            host.notify("Only a message the model is sent can be pinned.", severity="warning")
            return
        for widget in host.chat.messages():
            if widget.message_id == message.message_id:
                widget.set_pinned(message.pinned)
        host.notify(
            "Pinned: this message is never left out to fit the context."
            if message.pinned
            else "Unpinned.",
            timeout=3,
        )

    async def on_compacted(self, message: ReplyCompacted) -> None:
        """The compact policy summarised the conversation before a reply: the summary shown
        above the reply (or why none was made, in one line)."""
        host, notice = self.host, message.notice
        if notice.problem:
            host.notify(notice.problem, severity="warning", timeout=8)
            return
        host.notify(
            f"Compacted {notice.replaced} messages into a summary to fit the context (the "
            "original branch stays in the history).",
            timeout=5,
        )
        if not host.session.is_current(message.generation):
            return
        shown = host.chat.messages()
        widget = ChatMessageWidget(
            "note",
            notice.summary,
            label="Summary (compacted to fit the context)",
            status=f"stands for the {notice.replaced} messages above; the model reads it instead",
        )
        # The prompt on screen is now its copy on the new branch (Ctrl+L edits that one).
        turns = host.session.conversation.turns
        users = [i for i, turn in enumerate(turns) if turn.role == "user"]
        if users and len(shown) > 1 and shown[-2].role == "user":
            shown[-2].message_id = host.session.chat.row_of(users[-1])
        # Above the reply it was made for (the newest message).
        await host.chat.mount(widget, before=shown[-1] if shown else None)


async def mark_left_out(host: ChatHost, reply: ChatMessageWidget, event: ContextTrimmed) -> None:
    """A marker in the conversation where the messages left out to fit the context end (after
    the last of them on screen; above the ``reply`` when none is): the model does not see what
    is above it, save pinned messages."""
    session = host.session
    rows = {session.chat.row_of(i) for i in session.left_out_turns}
    shown = [w for w in host.chat.messages() if w.message_id and w.message_id in rows]
    text = (
        f"↑ Left out to fit the {event.context_size:,}-token context: the model was not sent "
        f"the {event.dropped_messages} oldest messages above this line (pinned ones, Ctrl+U, "
        "stay). /compact replaces them with a summary; context_policy compact does it by itself."
    )
    marker = ChatMessageWidget("note", text, label="Left out")
    if shown:
        await host.chat.mount(marker, after=shown[-1])
    else:
        await host.chat.mount(marker, before=reply)
