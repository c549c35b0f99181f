"""One writer at a time per saved conversation, across processes.

Two vibechats adding to one conversation at once (four ``run --continue`` from a script,
or a ``run --continue`` while the chat has it open) each read the conversation, send it
to a model and save the reply: without a rule, the history ends up holding turns in an
order no model ever saw. The rule: whoever adds a turn holds the conversation's writer
lock from reading the conversation to saving the reply. ``vibechat run`` waits for it
(bounded: :data:`WAIT_LIMIT`), so scripts queue; the chat only tries it, so its interface
never freezes (it says so and keeps the prompt).

The lock is an advisory ``flock`` on a small file per conversation in a ``locks`` folder
beside the database (owner-only: 0700 folder, 0600 files, opened without following a
symbolic link). The kernel drops a ``flock`` when its process ends, however it ends, so a
crash never leaves a conversation locked; the files stay behind (a few bytes each), since
removing a lock file that another process may have just opened would let two writers in.

Where ``fcntl`` does not exist (Windows) there is no lock: every acquire succeeds, as
before this module existed (vibechat's one-writer promise is for POSIX systems).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

try:
    import fcntl
except ImportError:
    # Windows: no flock; acquiring always succeeds (see the module docstring).
    fcntl = None  # type: ignore[assignment]

from ..errors import VibechatError

# Seconds a ``run`` waits for another writer before giving up (10 minutes).
WAIT_LIMIT = 600.0
# Seconds between tries while waiting: flock has no timeout of its own.
POLL = 0.1


class ConversationBusy(VibechatError):
    """Another vibechat is writing to the conversation (and did not finish in time)."""


class ConversationLock:
    """The writer lock of conversation ``conversation_id`` in the history at ``database``.
    Not reentrant; :meth:`release` is idempotent. One object per holder."""

    def __init__(self, database: Path, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.path = database.parent / "locks" / f"{database.name}.{conversation_id}.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; False when another process holds it. A lock file
        that cannot be created (a read-only data folder) counts as free: nothing can be
        saved there either, and the save says so in its own words."""
        if self._fd is not None:
            return True
        if fcntl is None:
            return True
        fd = self._open()
        if fd is None:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire(
        self,
        *,
        limit: float = WAIT_LIMIT,
        on_wait: Callable[[], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        """Take the lock, waiting for another holder up to ``limit`` seconds: ``on_wait()`` is
        called once when the wait begins (to say so); ``stop_requested()`` turning true (Ctrl-C)
        ends the wait with KeyboardInterrupt. Past the limit: :class:`ConversationBusy`."""
        if self.try_acquire():
            return
        if on_wait is not None:
            on_wait()
        deadline = time.monotonic() + limit
        while not self.try_acquire():
            if stop_requested is not None and stop_requested():
                raise KeyboardInterrupt
            if time.monotonic() >= deadline:
                raise ConversationBusy(
                    f"another vibechat kept writing to conversation {self.conversation_id} for "
                    f"{limit / 60:g} minutes: try again when it has finished (is a chat still "
                    "answering in it?)."
                )
            time.sleep(POLL)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            # Closing the descriptor drops the flock.
            os.close(fd)

    def _open(self) -> int | None:
        folder = self.path.parent
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            flags = (
                os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            )
            return os.open(self.path, flags, 0o600)
        except OSError:
            return None

    def __enter__(self) -> ConversationLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()
