"""One engine process as the parent holds it: started (``python -m
vibechat.engine.llama.worker_child``, in its own session so the terminal's signals do not reach
it), its protocol pipe read into an inbox by one thread, its stderr drained by another into the
crash report's tail and the ``vibechat.llama_cpp`` logger (never the terminal), and frames written
to its stdin (worker_wire.py says what travels). engine/llama/worker.py drives it."""

from __future__ import annotations

import collections
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from .worker_process import Heard, close_quietly
from .worker_wire import read_frame, write_frame

log = logging.getLogger("vibechat.llama_cpp")

# The lines of each pipe a crash report keeps.
LOG_TAIL = 50


def forwarded_log_level() -> int:
    """The lowest level of the engine process's log records worth sending here: INFO (the
    crash report keeps the last INFO-and-above lines), DEBUG only when this process logs it
    (``--verbose``, VIBECHAT_DEBUG, or any ``vibechat.*`` logger set lower). A load writes ~1,300
    DEBUG lines of llama.cpp's: sent as frames, each was pickled there and unpickled here, on
    the chat's start, to be dropped."""
    loggers = [
        logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if name.startswith("vibechat.") and isinstance(logger, logging.Logger)
    ]
    return min(
        logging.INFO,
        logging.getLogger("vibechat").getEffectiveLevel(),
        *(logger.getEffectiveLevel() for logger in loggers),
    )


def spawn() -> subprocess.Popen[bytes]:
    """A new engine process, its three pipes open, nothing read or written yet."""
    cmd = [sys.executable, "-m", "vibechat.engine.llama.worker_child"]
    kwargs: dict[str, Any] = {}
    if os.name == "posix":
        # Ctrl-C / Ctrl-Z in the terminal are the chat's.
        kwargs["start_new_session"] = True
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        **kwargs,
    )


class EnginePipes:
    """The pipes of one started engine process: its answers in ``inbox`` (ended by ``("eof",)``
    when its protocol pipe ends), what it said in ``heard`` (for the watchdog), the last lines of
    its log and of its stderr in ``tail`` and ``stderr_tail`` (for a crash report). Each process
    gets its own: an old one's reader may still append to its own while a new one starts."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.heard = Heard()
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self._write_lock = threading.Lock()
        threading.Thread(
            target=read_protocol,
            args=(proc, self.inbox, self.tail, self.heard),
            daemon=True,
            name="vibechat-worker-reader",
        ).start()
        self.stderr_reader = threading.Thread(
            target=read_stderr,
            args=(proc, self.stderr_tail),
            daemon=True,
            name="vibechat-worker-stderr",
        )
        self.stderr_reader.start()

    def send(self, msg: tuple[Any, ...]) -> bool:
        """Write one frame to the process (any thread); False when it is gone."""
        if self.proc.stdin is None:
            return False
        with self._write_lock:
            try:
                write_frame(self.proc.stdin, msg)
                return True
            except (OSError, ValueError):
                # The child is gone: its answer pipe says so.
                return False


def read_protocol(
    proc: subprocess.Popen[bytes],
    inbox: queue.Queue[Any],
    tail: collections.deque[str],
    heard: Heard,
) -> None:
    """Read the process's frames until its pipe ends (a thread's work): its log records go to
    logging (INFO and above to ``tail`` too), what it says about its state to ``heard``, the
    rest to ``inbox``, and ``("eof",)`` last."""
    assert proc.stdout is not None
    try:
        while True:
            try:
                msg = read_frame(proc.stdout)
            except Exception as exc:  # noqa: BLE001 - a torn frame: the child died mid-write
                log.debug("worker protocol: %s", exc)
                msg = None
            if msg is None:
                break
            if msg[0] == "log":
                _, name, level, text = msg
                # llama.cpp's DEBUG lines (graph details) would crowd the report
                if level >= logging.INFO:
                    tail.append(f"{logging.getLevelName(level)} {text}")
                logging.getLogger(name).log(level, "%s", text)
                continue
            if msg[0] == "ready":
                heard.note(ready=True)
                continue
            if msg[0] == "cancelling":
                heard.note(acked=msg[1])
                continue
            if msg[0] in ("result", "error"):
                heard.note(ended=msg[1])
            elif msg[0] in ("delta", "thinking"):
                heard.note_piece(time.monotonic())
            inbox.put(msg)
    finally:
        heard.note(gone=True)
        inbox.put(("eof",))
        close_quietly(proc.stdout)


def read_stderr(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
    """Drain the process's stderr (a thread's work): each line to ``tail`` and the log."""
    assert proc.stderr is not None
    try:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                tail.append(line)
                log.warning("engine process: %s", line)
    except (OSError, ValueError):
        pass
    finally:
        close_quietly(proc.stderr)
