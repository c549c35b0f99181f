"""A session's hold on its saved conversation's writer lock (engine/chat/convlock.py): taken
before a turn is added, with the turns other vibechats saved since taken in, and let go once
the reply is saved or the turn left. engine/chat/session.py's ``ChatSession`` keeps one."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .chatlog import ChatLog
from .convlock import WAIT_LIMIT, ConversationBusy, ConversationLock
from .database import HistoryError
from .records import StoredMessage

log = logging.getLogger("vibechat.session")

BUSY = (
    "another vibechat is adding to this conversation right now (vibechat run?): "
    "send again once it has finished."
)


class ConversationWriter:
    """One writer per conversation, for one session: the lock it holds (None: none held)."""

    def __init__(self) -> None:
        self._lock: ConversationLock | None = None

    def catch_up(
        self,
        chat: ChatLog,
        *,
        wait: bool = False,
        limit: float = WAIT_LIMIT,
        on_wait: Callable[[], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> list[StoredMessage]:
        """Before a turn is added (a prompt sent, a reply regenerated, a prompt taken back):
        take the saved conversation's writer lock (engine/chat/convlock.py) and take in the turns
        other vibechats saved since ``chat`` read it, so the model is sent what the history
        holds, in its order. Returns those turns (for a screen to show).

        ``wait``: wait for another writer (``vibechat run``: up to ``limit`` seconds, ``on_wait()``
        once when the wait begins, ``stop_requested()`` ends it with KeyboardInterrupt); else
        only try (the chat, whose interface must not freeze): :class:`ConversationBusy` when
        another vibechat is writing to it. The lock is held until the reply is saved (or the
        turn left: :meth:`release`). A conversation not saved (yet) has nothing to catch up."""
        history, cid = chat.history, chat.conversation_id
        if history is None or cid is None:
            return []
        if self._lock is None or self._lock.conversation_id != cid:
            self.release()
            lock = history.writer_lock(cid)
            if wait:
                lock.acquire(limit=limit, on_wait=on_wait, stop_requested=stop_requested)
            elif not lock.try_acquire():
                raise ConversationBusy(BUSY)
            self._lock = lock
        try:
            return chat.take_in(history.messages_after(cid, chat.seen))
        except HistoryError as exc:
            # Reading failed: the turn goes on with what this session knows.
            log.warning("could not read the conversation's new turns: %s", exc)
            return []

    def release(self) -> None:
        """Let other vibechats add to the conversation again (the reply is saved, or left)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def claim(self, chat: ChatLog) -> None:
        """A reply begins: a conversation saved just now (its first prompt) is locked too, so that
        a ``run --continue`` picking it as the latest waits for this reply. Only tried: nobody
        else can be writing to a conversation this new but such a run."""
        if self._lock is None and chat.history is not None and chat.conversation_id is not None:
            lock = chat.history.writer_lock(chat.conversation_id)
            if lock.try_acquire():
                self._lock = lock
