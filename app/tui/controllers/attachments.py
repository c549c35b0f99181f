"""Attaching files to the next prompt: ``/image PATH``, ``/file PATH`` and ``/detach [N|all]``,
a pasted path's offer (the input's), the tray of what is pending (``AttachmentTray``), and a
queued prompt's attachments.

Reading a file is blocking (a 40-megapixel JPEG decodes for a while, a network mount may
hang): it runs in a thread worker (engine/attach: ``read_attachment`` checks, scales and keeps
one private copy), which posts ``Read`` or ``Refused`` back; a bad file is one notice, nothing
else changes (the input keeps its text, the tray what it had). The replies controller takes
what is pending when a prompt is sent (``pending``, then ``take`` once the prompt is saved);
a prompt queued while a reply is on its way takes the tray's attachments with it
(``hold_for_queue``), and gives them back if it is given back unsent.

Imports inside functions are deliberate: attachment reading and storage load only when a file is
attached (start-up time: Pillow).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from textual.message import Message

from vibechat.engine.errors import VibechatError
from vibechat.engine.turns.attachments import Attachment

from ...slash import ATTACH_COMMANDS
from .. import outside
from ..widgets.attachment_tray import MAX_PENDING, AttachmentTray
from ..widgets.prompt_input import PromptInput

if TYPE_CHECKING:
    from vibechat.engine.attach.store import AttachmentStore

    from .host import ChatHost, Handlers

log = logging.getLogger("vibechat.tui")

# The slash commands this controller runs (/image, /file, /detach), declared with the other slash
# commands (app/slash.py) and listed with them in F1's help.
COMMANDS = ATTACH_COMMANDS


class Read(Message):
    """A worker read and kept an attachment."""

    def __init__(self, attachment: Attachment) -> None:
        super().__init__()
        self.attachment = attachment


class Refused(Message):
    """A worker could not read the file: ``error`` says why and what to do, in one line."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def path_argument(arg: str) -> str:
    """The path a command names as it is typed: a pasted one's quotes, ``file://`` and escaped
    spaces undone (``looks_like_path``), else the text itself without surrounding quotes."""
    from vibechat.engine.attach.reading import looks_like_path

    found = looks_like_path(arg)
    if found is not None:
        return str(found)
    text = arg.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


class Attachments:
    def __init__(self, host: ChatHost, tray: Callable[[], AttachmentTray]) -> None:
        self.host = host
        # Gives the app's tray (above the input).
        self._tray = tray
        self._store: AttachmentStore | None = None
        # The queued prompt's attachments.
        self.queued: tuple[Attachment, ...] = ()
        # How many files are being read now.
        self.reading = 0

    @property
    def tray(self) -> AttachmentTray:
        return self._tray()

    @property
    def pending(self) -> tuple[Attachment, ...]:
        """What the next prompt carries (still in the tray)."""
        return self.tray.attachments

    def handlers(self) -> Handlers:
        return {
            Read: self.on_read,
            Refused: self.on_refused,
            AttachmentTray.Changed: self.on_changed,
            AttachmentTray.RemoveRequested: self.on_remove,
            PromptInput.PathOffered: self.on_offer,
            PromptInput.AttachAccepted: self.on_accept,
        }

    def store(self) -> AttachmentStore:
        if self._store is None:
            from vibechat.engine.attach.store import AttachmentStore

            self._store = AttachmentStore.default()
        return self._store

    # ---------------------------------------------------------------- commands
    async def command(self, name: str, arg: str) -> None:
        """``/image PATH``, ``/file PATH``, ``/detach [N|all]``."""
        if name == "/detach":
            await self.detach(arg)
            return
        kind: Literal["image", "file"] = "image" if name == "/image" else "file"
        if not arg.strip():
            self.host.notify(
                f"{name} needs a path: {COMMANDS[name].split(': ', 1)[0]}, e.g. {name} "
                f"~/{'photo.png' if kind == 'image' else 'notes.md'}",
                severity="warning",
                timeout=6,
            )
            return
        if kind == "image" and self._refuses_images():
            return
        self.attach(path_argument(arg), kind)

    def _refuses_images(self) -> bool:
        """The loaded model is known to take no images: said in one line, with the fix, and True
        (an image is refused where it is attached, not at Enter). Before a model is loaded,
        images are accepted and checked when the prompt is sent."""
        model = self.host.state.model
        if model is None or model.takes_images:
            return False
        self.host.notify(
            f"{outside.one_line(model.name)} takes no images: load a vision model (F3) with its "
            "projector (--mmproj FILE) to attach one.",
            severity="error",
            timeout=8,
        )
        return True

    def attach(self, path: str | Path, kind: Literal["image", "file"] | None) -> None:
        """Read ``path`` in a worker (``kind`` None: whichever it is); the tray shows it once
        kept."""
        if len(self.pending) + self.reading >= MAX_PENDING:
            self.host.notify(
                f"A prompt carries {MAX_PENDING} attachments at most: "
                "send it, or /detach one first.",
                severity="warning",
                timeout=6,
            )
            return
        store, post = self.store(), self.host.post_message
        self.reading += 1

        def read() -> None:
            from vibechat.engine.attach.reading import read_attachment

            try:
                attachment = read_attachment(path, store, kind=kind)
            except VibechatError as exc:
                post(Refused(outside.one_line(str(exc), limit=None)))
            # Never crash the chat over a file.
            except Exception as exc:
                log.exception("reading an attachment failed")
                post(
                    Refused(
                        f"{outside.one_line(str(path))}: could not be read "
                        f"({type(exc).__name__}: {outside.one_line(str(exc))})"
                    )
                )
            else:
                post(Read(attachment))

        self.host.run_worker(read, thread=True, group="attach", exit_on_error=False)

    async def on_read(self, message: Read) -> None:
        self.reading = max(0, self.reading - 1)
        a = message.attachment
        # A pasted path, or the model changed while it was read.
        if a.is_image and self._refuses_images():
            return
        if not await self.tray.add(a):
            self.host.notify(f"{outside.one_line(a.name)} is attached already.", timeout=3)
            return
        note = f" ({outside.one_line(a.note)})" if a.note else ""
        self.host.notify(
            f"Attached {outside.one_line(a.label(), limit=None)}{note}: "
            "it goes with your next prompt.",
            timeout=3,
        )

    def on_refused(self, message: Refused) -> None:
        self.reading = max(0, self.reading - 1)
        self.host.notify(message.error, severity="error", timeout=8)

    async def detach(self, arg: str) -> None:
        pending = self.pending
        if not pending:
            self.host.notify(
                "Nothing is attached: /image PATH or /file PATH attaches a file.", timeout=4
            )
            return
        what = arg.strip().lower()
        if what == "all":
            await self.tray.take()
            self.host.notify(
                f"Removed {len(pending)} attachment{'s' if len(pending) > 1 else ''}.", timeout=3
            )
            return
        if what and not (what.isdigit() and 1 <= int(what) <= len(pending)):
            self.host.notify(
                f"/detach {outside.one_line(arg, limit=20)}: which? "
                f"A number from 1 to {len(pending)}, or all (/detach alone: the last).",
                severity="warning",
                timeout=6,
            )
            return
        gone = await self.tray.drop(int(what) - 1 if what else len(pending) - 1)
        if gone is not None:
            self.host.notify(f"Removed {outside.one_line(gone.name)}.", timeout=3)

    async def on_remove(self, message: AttachmentTray.RemoveRequested) -> None:
        gone = await self.tray.drop(message.index)
        if gone is not None and not self.pending:
            self.host.prompt_input.focus()

    def on_changed(self, message: AttachmentTray.Changed) -> None:
        self.host.prompt_input.has_attachments = message.count > 0

    # ------------------------------------------------------------ a pasted path
    def on_offer(self, message: PromptInput.PathOffered) -> None:
        from vibechat.engine.attach.reading import display_name

        self.tray.offer(display_name(message.path) if message.path is not None else None)

    def on_accept(self, message: PromptInput.AttachAccepted) -> None:
        self.attach(message.path, None)

    # ------------------------------------------------------ sending and queueing
    async def take(self) -> tuple[Attachment, ...]:
        """What is pending, out of the tray: it went with a prompt."""
        return await self.tray.take()

    async def give_back(self, attachments: tuple[Attachment, ...]) -> None:
        """Attachments back to the tray (an edited prompt's, a refused queued prompt's)."""
        if attachments:
            await self.tray.give_back(attachments)

    async def hold_for_queue(self) -> None:
        """A prompt was queued: the tray's attachments go with it."""
        self.queued = (*self.queued, *await self.tray.take())

    def take_queued(self) -> tuple[Attachment, ...]:
        """The queued prompt's attachments, as it is sent (synchronously: before the queue's
        ``None`` lands and gives them back)."""
        taken, self.queued = self.queued, ()
        return taken

    async def queue_left(self) -> None:
        """The queue emptied: a prompt given back unsent brings its attachments back."""
        await self.give_back(self.take_queued())
