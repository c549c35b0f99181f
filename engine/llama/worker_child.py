"""The engine process: ``python -m vibechat.engine.llama.worker_child``, started by
``WorkerBackend`` (engine/llama/worker.py). It holds one ``LlamaCppBackend`` (and its KV cache)
between requests, serves them one at a time on its main thread, and acts on a cancel at once
from its request reader thread; its stdout is the protocol's (engine/llama/worker_wire.py).

Imports inside functions are deliberate: the engine process loads llama-cpp-python and the
backend after it has set up its crash handling (faulthandler) and its pipe.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import queue
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import GenerationError
from ..settings.params import SamplingParams
from ..turns.backend import ChatMessage, ReplyPrefix, TextDelta, ThinkingDelta
from .worker_wire import read_frame, write_frame

# Test-only: "STAGE:SIGNAL" (STAGE: load; prompt: a stream's or a prefill's start; reply: a
# stream's first piece of text, once it was sent) makes every child started while it is set
# send itself SIGNAL at that stage ("STAGE:hang": hang there). Read by the child only.
CRASH_HOOK_ENV = "VIBECHAT_TEST_WORKER_CRASH"

# Reply pieces closer together than this travel in one message. The chat draws a reply at most
# 15 times a second (2-3 while the model uses every core), so 40 ms costs no visible delay, and
# at ~90 tokens/s it sends 4x fewer messages than one per token (each a wake-up of two threads
# in the chat's process, on the model's cores). The first piece of a reply goes at once.
FLUSH_S = 0.04
# A load's progress goes to the chat at most once a whole percent (what its status bar shows)
# and this often: llama.cpp calls back ~240 times for the starter, mostly within a second, and
# each is a message the chat's event loop handles before the model's ``ready``.
PROGRESS_S = 0.05


class _ProgressThrottle:
    """Passes a load's progress on when its percentage changed and ``PROGRESS_S`` went by since
    the last one passed; the first and the end (1.0) always pass, so the chat sees the load
    start and finish."""

    def __init__(
        self, send: Callable[[float], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._send = send
        self._clock = clock
        # The percentage last passed on.
        self._shown: int | None = None
        self._at = 0.0

    def __call__(self, fraction: float) -> None:
        percent, now = int(fraction * 100), self._clock()
        if self._shown is not None and (
            percent == self._shown or fraction < 1.0 and now - self._at < PROGRESS_S
        ):
            return
        self._shown, self._at = percent, now
        self._send(fraction)


class _Control:
    """The child's cancel state, shared by its reader thread (which cancels) and its main
    thread (which runs one request at a time). A cancel for request N is asserted again
    until N has ended: the backend clears its flag when a request starts, and the cancel
    may arrive before that."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: Any = None
        self.cancel_upto = 0
        self.done = 0
        self._asserting = False

    def cancel(self, rid: int) -> None:
        with self.lock:
            if rid <= self.done:
                return
            self.cancel_upto = max(self.cancel_upto, rid)
            if self.backend is not None:
                self.backend.cancel()
            if self._asserting:
                return
            self._asserting = True
        threading.Thread(target=self._assert_cancel, daemon=True).start()

    def _assert_cancel(self) -> None:
        while True:
            with self.lock:
                if self.done >= self.cancel_upto:
                    self._asserting = False
                    return
                if self.backend is not None:
                    self.backend.cancel()
            time.sleep(0.005)

    def cancel_side(self, rid: int, side: Any) -> None:
        """Stop side ``side`` of request ``rid`` (a pair of replies), if it still runs."""
        with self.lock:
            if rid > self.done and self.backend is not None:
                self.backend.cancel_side(side)

    def cancelled(self, rid: int) -> bool:
        with self.lock:
            return self.cancel_upto >= rid

    def finished(self, rid: int) -> None:
        with self.lock:
            self.done = max(self.done, rid)


class _ForwardLogs(logging.Handler):
    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        super().__init__(logging.DEBUG)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send(("log", record.name, record.levelno, record.getMessage()))
        except Exception:  # noqa: BLE001 - never raise into llama.cpp's log callback
            pass


def _crash_hook(stage: str) -> None:
    """Test-only (CRASH_HOOK_ENV): end this process at ``stage`` with a signal ("reply:SIGABRT")
    or an exit status ("reply:exit3"), stop it ("reply:SIGSTOP": it stays stopped), hang it
    ("reply:hang": its main thread never returns, its request reader goes on), or slow it
    ("reply:slow1.7": 1.7 s more for each piece of the reply, as a big model's steps)."""
    hook = os.environ.get(CRASH_HOOK_ENV, "")
    if not hook:
        return
    at, _, name = hook.partition(":")
    if at == stage:
        if name.startswith("exit"):
            os._exit(int(name[4:]))
        if name == "hang":
            # Until the parent ends this process.
            threading.Event().wait()
        # "reply:slow1.7": each piece takes that long (a slow model's step).
        if name.startswith("slow"):
            time.sleep(float(name[4:]))
            return
        os.kill(os.getpid(), getattr(signal, name or "SIGSEGV"))
        # The signal ends us.
        time.sleep(10)


def import_bindings_only() -> None:
    """Import ``llama_cpp`` as its bindings alone, with the rest of the package on first use.

    The package's ``__init__`` is ``from .llama_cpp import *`` (the ctypes bindings, which is
    all the engine calls) and ``from .llama import *`` (the high-level ``Llama``, which imports
    numpy, jinja2 and the chat formats): 0.14 s of this process's start on a 355 µs host
    against 0.02 s for the bindings, on the way to every model load. Here the package is made
    as its ``__init__`` would make it, from its bindings; any other name (``Llama``,
    ``LlamaGrammar``) loads ``llama_cpp.llama`` when it is first asked for, and submodules
    (``llama_cpp.llama_grammar``) import as usual. Done once, before anything imports
    ``llama_cpp``; if it was imported already, or is not installed, nothing changes."""

    if "llama_cpp" in sys.modules:
        return
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    package = types.ModuleType("llama_cpp")
    package.__spec__ = spec
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = "llama_cpp"

    def __getattr__(name: str) -> Any:
        """The high-level half of ``__init__``, on first use."""
        if name.startswith("__"):
            raise AttributeError(name)
        submodule = sys.modules.get(f"llama_cpp.{name}")
        if submodule is not None:
            # ``import llama_cpp.x as y`` while x itself still imports.
            return submodule
        high = importlib.import_module("llama_cpp.llama")
        for key, value in vars(high).items():
            if not key.startswith("_"):
                package.__dict__.setdefault(key, value)
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'llama_cpp' has no attribute {name!r}") from None

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules["llama_cpp"] = package
    try:
        import llama_cpp.llama_cpp as bindings
    except Exception:  # noqa: BLE001
        # A build that does not load: the usual import says why, as before.
        for name in [n for n in sys.modules if n == "llama_cpp" or n.startswith("llama_cpp.")]:
            del sys.modules[name]
        return
    names = getattr(bindings, "__all__", None) or [
        k for k in vars(bindings) if not k.startswith("_")
    ]
    for key in names:
        package.__dict__[key] = getattr(bindings, key)
    # The repack probe's key and the crash report use ``__version__ = "0.3.36"`` in ``__init__``.
    try:
        source = Path(str(spec.origin)).read_text("utf-8")
        found = re.search(r"^__version__\s*=\s*[\"']([^\"']{1,40})[\"']", source, re.M)
    except (OSError, UnicodeDecodeError):
        found = None
    if found:
        package.__dict__["__version__"] = found.group(1)


def child_main() -> int:
    import faulthandler

    # The protocol gets a private copy of stdout; fd 1 then points at stderr (the parent's
    # pipe), so native code printing to stdout cannot break a frame.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # A Python traceback on SIGSEGV/SIGABRT, for the crash report ...
    faulthandler.enable(sys.stderr)
    # ... and where every thread is, before a hung one is ended (worker.py).
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp = sys.stdin.buffer
    write_lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with write_lock:
            write_frame(out, msg)

    control = _Control()
    requests: queue.Queue[Any] = queue.Queue()

    def read_requests() -> None:
        try:
            while True:
                msg = read_frame(inp)
                if msg is None:
                    break
                if msg[0] == "cancel":
                    control.cancel(msg[1])
                    # For the parent's watchdog: this process is alive.
                    send(("cancelling", msg[1]))
                elif msg[0] == "cancel_side":
                    control.cancel_side(msg[1], msg[2])
                else:
                    requests.put(msg)
        except Exception:  # noqa: BLE001
            pass
        # The parent is gone (or closed us): stop what runs, and exit soon whatever happens.
        control.cancel(1 << 62)
        requests.put(None)
        threading.Timer(5.0, os._exit, args=(0,)).start()

    threading.Thread(target=read_requests, daemon=True, name="vibechat-worker-requests").start()

    engine_log = logging.getLogger("vibechat")
    engine_log.setLevel(logging.DEBUG)
    engine_log.propagate = False
    engine_log.addHandler(_ForwardLogs(send))

    # Before the first request: a process the chat started ahead of its settings (worker_ahead.py)
    # imports llama-cpp-python's bindings and the backend while the chat picks the model.
    import_bindings_only()
    from .llamacpp import LlamaCppBackend

    first = requests.get()
    if first is None or first[0] != "init":
        return 0
    # The log level the parent keeps (worker.py).
    engine_log.setLevel(first[2] if len(first) > 2 else logging.DEBUG)
    backend = LlamaCppBackend(first[1])
    # Taken after a reply's answer went out (below), off its path.
    backend.defer_snapshots = True
    with control.lock:
        control.backend = backend
    # A cancel stops what runs at once from now on: the parent's watchdog times it.
    send(("ready",))
    while True:
        msg = requests.get()
        if msg is None or msg[0] == "close":
            break
        kind, rid, *args = msg
        try:
            if kind == "load" and control.cancelled(rid):
                # Cancelled while this process started.
                from ..errors import LoadCancelled

                raise LoadCancelled(f"loading {Path(str(first[1].model_path)).name} was cancelled.")
            result = _serve(backend, kind, rid, args, send)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as an answer
            control.finished(rid)
            send(("error", rid, type(exc).__name__, str(exc)))
        else:
            control.finished(rid)
            send(("result", rid, result))
        if kind in ("stream", "prefill", "pair"):
            _keep_snapshot(backend)
    backend.close()
    return 0


def _keep_snapshot(backend: Any) -> None:
    """The KV snapshot of what the request left in the cache (engine/llama/kv_snapshots.py),
    once its answer is out; never fails the engine."""
    try:
        backend.keep_snapshot()
    except Exception:
        # A snapshot is an optimisation.
        logging.getLogger("vibechat.kv_snapshots").exception("taking a KV snapshot failed")


def _serve(
    backend: Any, kind: str, rid: int, args: list[Any], send: Callable[[tuple[Any, ...]], None]
) -> Any:
    if kind == "load":
        _crash_hook("load")
        return backend.load(on_progress=_ProgressThrottle(lambda value: send(("progress", value))))
    if kind == "reset":
        backend.reset()
        return None
    if kind == "count":
        return backend.count_tokens(*args[:2])  # messages, thinking
    if kind == "check_format":
        # Needs no model: llama.cpp's parser alone (stderr is ours here).
        from .native import check_output_format

        check_output_format(args[0])
        return None
    if kind == "prefill":
        _crash_hook("prompt")
        # Messages, thinking, and (from this version on) the tools.
        return backend.prefill(*args[:3])
    if kind == "stream":
        # Messages, params, and (from this version on) the tools and the tool choice, and a
        # reply prefix (another path: engine/llama/paths.py; None: none).
        _stream(
            backend,
            args[0],
            args[1],
            send,
            tuple(args[2]) if len(args) > 2 else (),
            args[3] if len(args) > 3 else "auto",
            args[4] if len(args) > 4 else None,
        )
        return None
    if kind == "pair":
        _crash_hook("prompt")
        # Two replies at once (engine/llama/pairing.py): each SideEvent as it comes.
        pair = backend.stream_pair(args[0], args[1])
        try:
            for event in pair:
                send(("event", event))
        finally:
            pair.close()
        return None
    raise GenerationError(f"unknown engine request {kind!r}")


def _stream(
    backend: Any,
    messages: list[ChatMessage],
    params: SamplingParams,
    send: Callable[[tuple[Any, ...]], None],
    tools: tuple[Any, ...] = (),
    tool_choice: str = "auto",
    prefix: ReplyPrefix | None = None,
) -> None:
    pending: list[str] = []
    # The kind of the pieces joined ("delta" or "thinking"): one kind at a time.
    pending_kind = "delta"
    tokens = 0
    # The last delta's count of generated tokens (the status bar's live count).
    generated = 0
    last = 0.0
    clock = time.perf_counter
    _crash_hook("prompt")
    stream = (
        backend.stream_chat(messages, params, tools=tools, tool_choice=tool_choice, prefix=prefix)
        if tools or prefix is not None
        else backend.stream_chat(messages, params)
    )
    try:
        for event in stream:
            kind = (
                "delta"
                if type(event) is TextDelta
                else "thinking"
                if type(event) is ThinkingDelta
                else None
            )
            if kind is not None:
                if pending and kind != pending_kind:
                    send((pending_kind, "".join(pending), tokens, generated))
                    pending.clear()
                pending_kind = kind
                pending.append(event.text)
                tokens += 1
                generated = event.tokens
                now = clock()
                if now - last >= FLUSH_S:
                    send((kind, "".join(pending), tokens, generated))
                    pending.clear()
                    last = now
                    # Mid-reply: the parent has text to keep.
                    _crash_hook("reply")
                continue
            if pending:
                send((pending_kind, "".join(pending), tokens, generated))
                pending.clear()
            send(("event", event))
    finally:
        stream.close()
        if pending:
            send((pending_kind, "".join(pending), tokens, generated))


if __name__ == "__main__":
    sys.exit(child_main())
