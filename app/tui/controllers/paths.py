"""Another path from a token of a reply (issue 43, point 3): the token lens offers a step's
candidates (``PathChosen`` from the lens's view); picking another one, or typing a replacement,
continues the reply from there as a new version of it, its sibling (‹ 2/2 ›: ← on it switches
back), streamed as a regenerated reply is. The original stays saved as it was. The engine reuses
the prompt and the reply's tokens before the step from its KV cache, so only the new token and
what follows are evaluated (engine/llama/paths.py).

What cannot be done is said in one line and nothing changes: a reply still streaming, a reply
not on the branch on screen, a reply without a saved lens (the lens was off) or whose lens was
cut before the step, a step or a candidate that is not one, a server's model (the engine's token
ids are needed), a prefix that no longer fits the context."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from vibechat.engine.errors import VibechatError
from vibechat.engine.turns.backend import ReplyPrefix
from vibechat.engine.turns.lens_steps import PATH_NEEDS_LOCAL, path_overflow, path_prefix

from ..conversation.assistant_message import AssistantMessage
from ..widgets.token_lens import TokenLens
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers

STILL_ANSWERING = "Still answering: press Esc to stop the reply, then take another path."


class Paths:
    """Continues a reply from another candidate of one of its tokens, as its sibling."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        """The messages it answers (the app's ``route`` hands them over)."""
        return {TokenLens.PathChosen: self.chosen}

    async def chosen(self, message: TokenLens.PathChosen) -> None:
        """The lens picked another candidate (or a typed token) on a reply's step: the reply
        goes on from there as its new version; the lens closes so the new version is seen
        streaming. When it cannot, the lens stays open and one line says why."""
        if await self.take_path(message.message_id, message.index, message.token_id, message.data):
            self.host.post_message(TokenLens.Closed())

    async def take_path(self, message_id: int, index: int, token_id: int, data: bytes) -> bool:
        """Reply ``message_id`` (a saved reply's id) goes on from its step ``index`` (0 = its
        first generated token, thinking included) with the candidate ``token_id`` (-1: ``data``,
        typed text as UTF-8) as a new sibling version, streamed on screen. False, said in one
        line, when it cannot: nothing changed."""
        host = self.host
        if host.state.generating:
            self._refuse(STILL_ANSWERING)
            return False
        widget = self._on_screen(message_id)
        try:
            prefix = self._prefix(widget, message_id, index, token_id, data)
            overflow = await self._overflow(message_id, prefix)
        except VibechatError as exc:
            self._refuse(str(exc))
            return False
        if overflow:
            self._refuse(overflow)
            return False
        # A reply asked for while the prompt was counted goes first.
        if host.state.generating:
            self._refuse(STILL_ANSWERING)
            return False
        if widget is None or not await host.replies.catch_up():
            return False
        if not host.session.chat.take_reply(message_id):
            self._refuse("That reply is no longer on the branch on screen.")
            return False
        for other in [widget, *host.replies.after(widget)]:
            await other.remove()
        await host.replies.start(prefix)
        return True

    def _on_screen(self, message_id: int) -> AssistantMessage | None:
        """The reply ``message_id`` on screen, if it is there."""
        return next(
            (
                w
                for w in self.host.chat.messages()
                if isinstance(w, AssistantMessage) and w.message_id == message_id
            ),
            None,
        )

    def _prefix(
        self,
        widget: AssistantMessage | None,
        message_id: int,
        index: int,
        token_id: int,
        data: bytes,
    ) -> ReplyPrefix:
        """The prefix the new version goes on from, from the reply's saved lens; a
        ``VibechatError`` (one line) when the path cannot be taken."""
        host = self.host
        session = host.session
        if widget is None or session.chat.turns_before(message_id) is None:
            raise VibechatError(
                "That reply is not on the branch on screen: show it (← / → on its version), "
                "then take another path."
            )
        if host.history is None or session.chat.conversation_id is None:
            raise VibechatError(
                "This chat is not saved (--no-history), so no reply's lens is kept: another "
                "path needs the saved lens."
            )
        info = session.info
        if info is None:
            raise VibechatError("The model is still loading: take another path once it is ready.")
        if info.server:
            raise VibechatError(PATH_NEEDS_LOCAL)
        stored = host.history.message(message_id)
        saved = stored.logprobs if stored is not None else None
        return path_prefix(saved, index, token_id, data)

    async def _overflow(self, message_id: int, prefix: ReplyPrefix) -> str:
        """Why the prompt and the prefix leave no room in the context ("" when they do): the
        prompt counted by the engine, off the UI thread; typed text counted by its bytes (a
        token holds at least one)."""
        session = self.host.session
        info = session.info
        turns = session.chat.turns_before(message_id)
        if info is None or turns is None:
            return ""
        thinking = session.conversation.params.thinking

        def count() -> int | None:
            with session.engine_lock:
                return session.backend.count_tokens(turns, thinking)

        n_prompt = await asyncio.to_thread(count)
        if n_prompt is None:
            return ""
        n_path = len(prefix.token_ids) + len(prefix.data)
        return path_overflow(n_prompt, n_path, info.context_size)

    def _refuse(self, line: str) -> None:
        """One line (the engine's start in lower case: a sentence here), as a warning."""
        self.host.notify(line[:1].upper() + line[1:], severity="warning", timeout=6)
