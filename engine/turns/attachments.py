"""What a message carries besides its text: images (sent to a vision model as images) and text
files (inlined into the message, with their name, before it reaches any backend).

An ``Attachment`` is plain data. Reading the user's file, checking it and keeping one private
copy of it is engine/attach/'s work; the copy's ``path`` is what the engine process (and the
remote backend, for a ``data:`` URI) reads. ``Conversation.messages()`` (engine/chat) hands the
backends messages whose files are already inlined (``inline_files``): a backend only ever acts
on ``ChatMessage.images``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AttachmentKind = Literal["image", "file"]

# A text file is inlined up to this many characters; the rest is cut with a note saying so.
FILE_TEXT_LIMIT = 100_000


@dataclass(frozen=True)
class Attachment:
    """One attached file, as kept (engine/attach/store.py).

    ``name``: the file's own name, sanitised, no folders (what the chat and the model are told);
    ``digest``: the SHA-256 of the kept copy's bytes, its content address; ``mime``: the kept
    copy's type (``image/png``, ``image/jpeg``, ``text/plain``); ``size``: the kept copy's bytes;
    ``width``/``height``: an image's pixels as kept (0 for a file); ``path``: where the kept copy
    lies on this machine; ``text``: a file's text as the model is given it (bounded by
    ``FILE_TEXT_LIMIT``, "" for an image); ``note``: what reading changed, said once to the user
    (``"scaled from 4,000×3,000"``, ``"cut at 100,000 characters"``), "" when nothing.
    """

    kind: AttachmentKind
    name: str
    digest: str
    mime: str
    size: int
    path: str
    width: int = 0
    height: int = 0
    text: str = ""
    note: str = ""

    @property
    def is_image(self) -> bool:
        return self.kind == "image"

    def label(self) -> str:
        """One line for the chat and exports: ``photo.png · 640×480 · 212 KB`` /
        ``notes.md · 3.1 KB``."""
        size = _size(self.size)
        if self.is_image:
            return f"{self.name} · {self.width}×{self.height} · {size}"
        return f"{self.name} · {size}"


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} KB"
    return f"{n / 1_000_000:.1f} MB"


def file_block(attachment: Attachment) -> str:
    """A text file as the model is given it: its name, then its text fenced (a fence longer than
    any run of backticks inside it, so the file cannot close it)."""
    text = attachment.text
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    cut = f"\n[{attachment.note}]" if attachment.note else ""
    return f"File: {attachment.name}\n{fence}\n{text}\n{fence}{cut}"


def model_text(content: str, attachments: tuple[Attachment, ...]) -> str:
    """The message's text with its files inlined before it (images are not text: they stay out)."""
    blocks = [file_block(a) for a in attachments if not a.is_image]
    if not blocks:
        return content
    return "\n\n".join([*blocks, content]) if content else "\n\n".join(blocks)
