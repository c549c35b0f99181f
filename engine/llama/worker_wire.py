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

Both sides are vibechat, same version, same interpreter: pickle is the format, never read from
anyone else.
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

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
