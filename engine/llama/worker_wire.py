"""The wire between the chat's process and its engine process (engine/llama/worker.py, the parent;
engine/llama/worker_child.py, the child): length-prefixed pickles, one frame per message.

* The child's stdin carries the parent's requests: ``init`` (the options, and the lowest
  level of log records the parent keeps), then ``load``, ``stream``, ``reset``, ``prefill``,
  ``count``, ``check_format`` (one at a time, each with an id), ``cancel`` (acted on at once
  by the child's request reader and acknowledged with ``cancelling``, never queued behind the
  running request) and ``close``.
* The child's stdout (a private copy of it: fd 1 itself then points at stderr, so nothing
  native can write into the protocol) carries the answers: ``ready``, ``log`` records, load
  ``progress``, the reply's text (``delta``) and its thinking (``thinking``), the other
  ``event``s, and a ``result`` or an ``error`` per request.
* The child's stderr (stray native output, Python's fault handler) is no protocol: the parent
  drains it into the crash report's tail and the ``vibechat.llama_cpp`` logger.
* An ``error`` carries the exception's class name and message: the parent raises it again as
  the same class when it is one of vibechat's (``rebuild_error``).

Both sides are vibechat, same version, same interpreter: pickle is the format, never read from
anyone else.
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

from .. import errors
from ..errors import GenerationError, VibechatError
from . import vision_errors

_HEADER = struct.Struct(">I")


def write_frame(stream: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next object, or None at the end of the stream (the other side is gone)."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    data = _read_exact(stream, _HEADER.unpack(header)[0])
    return None if data is None else pickle.loads(data)


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    parts: list[bytes] = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def rebuild_error(name: str, message: str) -> Exception:
    """The exception an ``error`` frame names, as the same class when it is one of
    engine/errors.py's (or the vision path's, engine/llama/vision_errors.py)."""

    cls = getattr(errors, name, None) or getattr(vision_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, VibechatError):
        try:
            return cls(message)
        except TypeError:
            return GenerationError(message)
    return GenerationError(f"the engine failed: {name}: {message}")
