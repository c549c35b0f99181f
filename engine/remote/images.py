"""Images for a server's model: a message's images go as OpenAI content parts, each one a
``data:`` URI of the kept copy's bytes (llama-server, vLLM, Ollama and LM Studio all take
that; none of them can read a path on this machine).

A message with images becomes ``[{"type": "text", ...}, {"type": "image_url", ...}, ...]``:
its text first (when it has any), then its images in the order they were attached, as
llama-server's documentation shows it. A message without images stays a plain string, so
nothing changes on the wire for a text chat (and servers that take no content parts keep
working).

The kept copy (engine/attach/store.py) was checked and scaled when it was attached; here it
is only read, bounded by ``MAX_IMAGE_BYTES``, and a copy that is gone (the data folder
cleaned, a conversation from another machine) is a one-line error before anything is sent.

The server's tokenizer is not at hand, so the context meter counts an image as
``IMAGE_TOKENS`` tokens: a rough fixed cost, of the order that common projectors take
(Gemma 3: 256 tokens an image, LLaVA 1.5: 576, Qwen2-VL: a few hundred for a photo scaled
to the side a projector takes).
"""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

from ..errors import GenerationError
from ..sanitize import sanitize
from ..turns.attachments import Attachment
from ..turns.backend import ChatMessage

# The estimate for one image (see the module docstring).
IMAGE_TOKENS = 512
# A kept copy larger than this is not sent (kept copies are scaled: far less).
MAX_IMAGE_BYTES = 32 << 20
# What a data: URI may claim here.
IMAGE_MIMES = ("image/png", "image/jpeg", "image/webp", "image/gif")

# Words in a server's refusal that say its model takes no images: llama-server ("image input
# is not supported - hint: if this is unexpected, you may need to provide the mmproj"), vLLM
# ("... is not a multimodal model"), LM Studio and Ollama ("... does not support images/vision").
REFUSAL_WORDS = ("image", "multimodal", "multi-modal", "vision", "mmproj")


class ImageUnreadable(GenerationError):
    """An image's kept copy is gone or cannot be read: nothing was sent."""


def content(message: ChatMessage) -> str | list[dict[str, Any]]:
    """The message's ``content`` on the wire: its text, or its text and images as parts."""
    images = message.images
    if not images:
        return message.content
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    parts.extend({"type": "image_url", "image_url": {"url": data_uri(image)}} for image in images)
    return parts


def data_uri(image: Attachment) -> str:
    """``data:image/png;base64,...`` of the kept copy's bytes."""
    mime = image.mime if image.mime in IMAGE_MIMES else "image/png"
    return f"data:{mime};base64,{base64.b64encode(read_kept(image)).decode('ascii')}"


def read_kept(image: Attachment) -> bytes:
    """The kept copy's bytes, bounded; a copy that is gone or unreadable is one line naming it
    and the fix."""
    name = sanitize(image.name)[:120] or "an image"
    if not image.path:
        raise ImageUnreadable(
            f"the kept copy of {name} is missing (the attachment could not be found when the "
            "conversation was opened): attach the image again, or start a new conversation."
        )
    try:
        # Opened without blocking and checked on the descriptor: a FIFO put where the copy was
        # cannot hang the reply (the store's folder is private, but the path is read back from
        # disk).
        fd = os.open(image.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ImageUnreadable(
                    f"the kept copy of {name} is not a file ({sanitize(image.path)[:200]}): "
                    "attach the image again."
                )
            data = f.read(MAX_IMAGE_BYTES + 1)
    except FileNotFoundError:
        raise ImageUnreadable(
            f"the kept copy of {name} is gone ({sanitize(image.path)[:200]}): attach the image "
            "again, or start a new conversation."
        ) from None
    except OSError as exc:
        raise ImageUnreadable(
            f"cannot read the kept copy of {name} ({exc.strerror or type(exc).__name__}): check "
            f"{sanitize(image.path)[:200]}, or attach the image again."
        ) from None
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageUnreadable(
            f"the kept copy of {name} is larger than {MAX_IMAGE_BYTES >> 20} MiB, more than "
            "vibechat sends a server: attach a smaller image."
        )
    return data


def refused_images(error: str) -> bool:
    """Whether a server's error says its model takes no images."""
    lowered = error.lower()
    return any(word in lowered for word in REFUSAL_WORDS)


NO_IMAGES_FIX = (
    "the server's model takes no images: start llama-server with --mmproj FILE (or -hf with a "
    "vision model), or pick a vision model (--model)."
)
