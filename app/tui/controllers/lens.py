"""The token lens in the chat (issue 43): turned on or off for the conversation, opened on a
reply, left.

The lens is on while the conversation's ``logprobs`` parameter is above 0 (its key sets it to
``LENS_DEFAULT``, or back to 0), so it is kept with the conversation as its other sampling
values are, and a reply asked for meanwhile keeps each token's candidates (``ReplyLens``, on its
widget: replies.py while it streams, saved_messages.py read back from the history). Opening the
lens on a reply (the focused one, else the last that has a lens) shows the ``TokenLens`` in the
chat's place: the chat and the input are hidden (nothing in them changes) until Esc brings them
back, with the focus where it was. The widget gets the sliders as they are now (``params``,
from param_changes.py) so its cut lines follow the parameter panel and the nudge keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.widget import Widget

from vibechat.engine.settings.params import LENS_DEFAULT, SamplingParams

from ..conversation.assistant_message import AssistantMessage
from ..reply_lens import ReplyLens
from ..widgets.token_lens import TokenLens
from ..widgets.welcome import key_shown
from .events import LensRead
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers


class Lens:
    """The conversation's token lens: its switch, and the view on one reply (see the module
    docstring)."""

    def __init__(self, host: ChatHost, view: Callable[[], TokenLens]) -> None:
        """``view``: the lens widget (queried when needed: it is composed after this is made)."""
        self.host = host
        self._view = view
        # Where the focus was when the lens opened (it goes back there).
        self._back: Widget | None = None

    def handlers(self) -> Handlers:
        """The messages it answers (the app's ``route`` hands them over)."""
        return {TokenLens.Closed: self.closed, LensRead: self.read}

    @property
    def on(self) -> bool:
        """Replies of this conversation keep their tokens' candidates."""
        return self.host.session.conversation.params.logprobs > 0

    @property
    def is_open(self) -> bool:
        return self._view().has_class("-open")

    def toggle(self) -> None:
        """The lens key: on (``LENS_DEFAULT`` candidates a token) or off, for the conversation,
        said in one line."""
        params = self.host.session.conversation.params
        turned_on = params.logprobs == 0
        self.host.set_params(params.replace(logprobs=LENS_DEFAULT if turned_on else 0))
        key = key_shown(self.host.bound_key_of("open_lens"))
        if turned_on:
            self.host.notify(
                f"Token lens on for this conversation: the next replies keep each token's "
                f"candidates ({key} opens the lens on a reply).",
                timeout=5,
            )
        else:
            self.host.notify("Token lens off: replies keep no candidates.", timeout=4)

    def lens_for(self, params: SamplingParams) -> ReplyLens | None:
        """A new reply's lens (None: the lens is off for the request's ``params``)."""
        if params.logprobs <= 0:
            return None
        return ReplyLens(self.host.config.config.lens_history_bytes)

    def open(self) -> None:
        """The lens on the focused reply, else the last one with candidates. With none and the
        lens off, the lens key turns it on (one key is enough where a terminal keeps F11 for
        its full screen); with none and the lens on, one line says why."""
        reply = self._reply()
        if (reply is None or reply.lens is None) and not self.on:
            self.toggle()
            return
        if reply is None or reply.lens is None:
            self.host.notify(self._why_none(), severity="warning", timeout=6)
            return
        lens = reply.lens
        if not lens.read:
            # A saved reply's steps, read back off the UI thread (thousands of them: a while).
            def read() -> None:
                lens.steps()
                self.host.post_message(LensRead(reply))

            self.host.run_worker(read, thread=True, group="lens", exit_on_error=False)
            return
        self._show(reply)

    def read(self, message: LensRead) -> None:
        """A saved reply's steps were read back: the lens opens on it, if it is still shown."""
        if message.reply.is_attached and message.reply.lens is not None:
            self._show(message.reply)

    def _show(self, reply: AssistantMessage) -> None:
        """The lens on ``reply`` (its steps at hand), in the chat's place."""
        lens = reply.lens
        if lens is None:
            return
        steps = lens.steps()
        if not steps:
            self.host.notify(
                lens.notice or "This reply has no token candidates yet.",
                severity="warning",
                timeout=6,
            )
            return
        footnote = (
            f"{lens.dropped:,} later tokens not kept (lens_history_bytes)" if lens.dropped else ""
        )
        view = self._view()
        if not self.is_open:
            self._back = self.host.focused
        view.params = self.host.session.conversation.params
        self.host.chat.display = False
        self.host.prompt_input.display = False
        view.show(steps, message_id=reply.message_id, footnote=footnote)
        view.focus()

    def _reply(self) -> AssistantMessage | None:
        """The focused reply, else the last reply on screen that has a lens."""
        focused = self.host.focused
        for node in focused.ancestors_with_self if focused is not None else ():
            if isinstance(node, AssistantMessage):
                return node
        replies = [m for m in self.host.chat.messages() if isinstance(m, AssistantMessage)]
        return next((m for m in reversed(replies) if m.lens is not None), None)

    def _why_none(self) -> str:
        """Why no reply can be looked at (the lens is on), and what to do."""
        return "No reply has token candidates yet: send a prompt, then open the lens."

    def closed(self, _message: TokenLens.Closed | None = None) -> None:
        """Esc: the chat and the input back, the focus where it was."""
        if not self.is_open:
            return
        self._view().close()
        self.host.chat.display = True
        self.host.prompt_input.display = True
        back, self._back = self._back, None
        if back is not None and back.is_attached and back.display:
            back.focus()
        else:
            self.host.prompt_input.focus()

    def refocus(self) -> bool:
        """The lens takes the focus back (the parameter panel closed while it is open): False
        when it is not open."""
        if self.is_open:
            self._view().focus()
            return True
        return False

    def show_params(self, params: SamplingParams) -> None:
        """The sliders moved (the panel, a nudge key, /set, a preset): the cut lines follow."""
        self._view().params = params
