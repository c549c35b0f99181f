"""llama.cpp's process-wide state and what needs no model: its log routed to Python logging
(never the terminal), the backend initialised once, whether this build can offload to a GPU,
and the grammar parser's verdict on an output format. Loads libllama: imported only in the
engine's process (and by ``vibechat run``, which runs the model itself).

Imports inside functions are deliberate: llama-cpp-python (it loads libllama) is imported only
when the native library is asked about (start-up time)."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
import tempfile
import threading

import llama_cpp as ll

from ..errors import InvalidParameterError
from ..settings.structured import OutputFormat

log = logging.getLogger("vibechat.llama_cpp")

# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5
_LEVELS = {
    0: logging.DEBUG,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}


class LlamaLog:
    """Routes llama.cpp's log to Python logging (never to the terminal) and lets a
    load capture its own lines (errors, "offloaded N/M layers")."""

    def __init__(self) -> None:
        self._buffer = ""
        self._level = logging.INFO
        self._lock = threading.Lock()
        self.captured: list[tuple[int, str]] | None = None
        self._mtmd_installed = False
        # Keep a reference: C holds the pointer.
        self._callback = ll.llama_log_callback(self._on_log)

    def install(self) -> None:
        ll.llama_log_set(self._callback, ctypes.c_void_p(0))

    def install_mtmd(self) -> None:
        """Route the multimodal library's log here too (it has its own, which prints to stderr)."""
        from llama_cpp import mtmd_cpp

        if not self._mtmd_installed:
            mtmd_cpp.mtmd_log_set(self._callback, ctypes.c_void_p(0))
            mtmd_cpp.mtmd_helper_log_set(self._callback, ctypes.c_void_p(0))
            self._mtmd_installed = True

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        try:
            with self._lock:
                if level != 5:
                    self._level = _LEVELS.get(level, logging.INFO)
                self._buffer += text.decode("utf-8", errors="replace")
                while "\n" in self._buffer:
                    line, self._buffer = self._buffer.split("\n", 1)
                    if line.strip():
                        log.log(self._level, "%s", line)
                        if self.captured is not None:
                            self.captured.append((self._level, line))
        except Exception:  # noqa: BLE001 - never raise into C
            pass


_LOG: LlamaLog | None = None
_BACKEND_INIT = threading.Lock()


def ensure_llama_initialised() -> LlamaLog:
    global _LOG
    with _BACKEND_INIT:
        if _LOG is None:
            _LOG = LlamaLog()
            # Replaces llama-cpp-python's own callback (wrong levels, prints to stderr).
            _LOG.install()
            ll.llama_backend_init()
        return _LOG


def gpu_offload_supported() -> bool:
    return bool(ll.llama_supports_gpu_offload())


@functools.lru_cache(maxsize=32)
def grammar_error(gbnf: str, root: str = "root") -> str | None:
    """Why llama.cpp's grammar parser rejects ``gbnf`` (its own words, one line), or None.
    Parsing needs no model: the sampler is made without a vocabulary and freed. The parser
    prints its complaint with ``fprintf(stderr)``, past the log callback: file descriptor 2
    is pointed at a temporary file meanwhile (call this where no other thread draws on the
    terminal: the CLI before loading, the engine's own process)."""
    llama_log = ensure_llama_initialised()
    # Some complaints come through the log callback instead.
    previous = llama_log.captured
    captured = previous if previous is not None else []
    start = len(captured)
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        llama_log.captured = captured
        try:
            os.dup2(sink.fileno(), 2)
            sampler = ll.llama_sampler_init_grammar(
                None, gbnf.encode("utf-8"), root.encode("utf-8")
            )
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            llama_log.captured = previous
        sink.seek(0)
        said = sink.read(65536).decode("utf-8", errors="replace")
    if sampler:
        ll.llama_sampler_free(sampler)
        return None
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    lines += [line.strip() for _level, line in captured[start:]]
    for line in lines:
        if "error parsing grammar:" in line:
            return line.split("error parsing grammar:", 1)[1].strip()
    for line in lines:
        if "grammar" in line or "recursion" in line:
            return line
    return "it does not parse"


def check_output_format(fmt: OutputFormat) -> None:
    """A one-line ``InvalidParameterError`` unless the local engine can use ``fmt``: the schema
    converts to GBNF and llama.cpp's parser takes the grammar. Needs no model."""
    gbnf = fmt.gbnf()
    error = grammar_error(gbnf)
    if error is not None:
        raise InvalidParameterError(f"{fmt.label}: llama.cpp rejects the grammar: {error}.")
