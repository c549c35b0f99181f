"""How a one-shot reply is written as it streams: its text on stdout (``ReplyPrinter``), a
reasoning model's thinking on stderr (``ThinkingEcho``, ``--show-thinking``), a trimmed
context's notice (``trim_notice``) and a long prompt's reading line (``--stats`` on a
terminal). ``vibechat run`` uses all of them; ``--prompts-file`` (batch.py) the notice and
the thinking."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from vibechat.engine.chat.compaction import CompactionNotice
from vibechat.engine.sanitize import Sanitizer, sanitize
from vibechat.engine.turns.backend import (
    ChatEvent,
    ContextTrimmed,
    LensNotice,
    PromptProgress,
    ThinkingDelta,
    TokenCandidates,
)

from ..progress import ReadingLine
from ..report import ReplyMeter
from .clitools import plain
from .run_request import RunRequest


def trim_notice(
    err: TextIO,
    thinking: ThinkingEcho | None = None,
    lens: list[TokenCandidates] | None = None,
) -> Callable[[ChatEvent], None]:
    """``on_event`` for the one-shot commands: a trimmed context is said on stderr; with
    ``thinking``, the thinking is shown there too (``--show-thinking``); with ``lens``, the
    token lens's steps are kept there (``--logprobs``), and why a reply has none is said."""

    def on_event(event: ChatEvent) -> None:
        if isinstance(event, TokenCandidates):
            if lens is not None:
                lens.append(event)
        elif isinstance(event, LensNotice):
            err.write(f"vibechat: {sanitize(event.reason)}\n")
        elif isinstance(event, ContextTrimmed):
            err.write(
                f"vibechat: left out {event.dropped_messages} old messages to fit the context\n"
            )
        elif isinstance(event, ThinkingDelta) and thinking is not None:
            thinking.feed(event.text)

    return on_event


def compact_notice(err: TextIO, notice: CompactionNotice, where: str = "") -> None:
    """The ``compact`` context policy's notice on stderr: the summary that now stands for the
    old messages (sanitized), or why none does (the oldest messages are left out instead).
    ``where``: which prompt it is about (a prompts file's ``" FILE line N:"``)."""
    if notice.problem:
        err.write(plain(f"vibechat:{where} {notice.problem}") + "\n")
    else:
        err.write(
            f"vibechat:{plain(where)} compacted {notice.replaced} old messages into a summary to "
            "fit the context (the original branch stays in the history):\n"
            f"{sanitize(notice.summary)}\n"
        )
    err.flush()


class ThinkingEcho:
    """``--show-thinking``: a reasoning model's thinking on stderr as it streams, always
    sanitized (``--raw`` is about stdout), between a ``[thinking]`` line and an
    ``[end of thinking]`` line, so it reads apart from the answer on stdout."""

    def __init__(self, err: TextIO, label: str = "") -> None:
        self.err = err
        self.label = label  # e.g. " line 3" (--prompts-file)
        self._sanitizer = Sanitizer()
        self._open = False
        self._at_line_start = True

    def feed(self, text: str) -> None:
        text = self._sanitizer.feed(text)
        if not self._open:
            self._open = True
            self.err.write(f"[thinking{self.label}]\n")
        self._write(text)

    def close(self) -> None:
        """The thinking ended (the answer began, or the reply ended)."""
        if self._open:
            self._write(self._sanitizer.flush())
            end = "" if self._at_line_start else "\n"
            self.err.write(end + f"[end of thinking{self.label}]\n")
            self.err.flush()
            self._open = False

    def _write(self, text: str) -> None:
        if text:
            self.err.write(text)
            self.err.flush()
            self._at_line_start = text.endswith("\n")


class ReplyPrinter:
    """One ``vibechat run`` reply as it streams: ``show`` writes each piece of text to stdout
    (sanitized unless ``--raw``; nothing with ``--json``, whose object comes at the end),
    ``on_event`` shows the thinking, the reading line and the notices on stderr. It keeps
    what was shown and measured (``shown``, ``meter``) for the object of a reply that fails
    midway."""

    def __init__(self, request: RunRequest, out: TextIO, err: TextIO) -> None:
        self.request, self.out = request, out
        # Streamed pieces can split an escape sequence: the sanitizer holds an unfinished one
        # back, so what streams is exactly sanitize(text), the text --json prints.
        self.sanitizer = None if request.raw else Sanitizer()
        self.echo = ThinkingEcho(err) if request.show_thinking else None
        # --stats on a terminal: a long prompt's reading progress, on a line of its own that
        # goes before anything else is written (scripts, --json: nothing).
        reading = request.show_stats and not request.json_output
        self.reading = ReadingLine.for_stream(err) if reading else None
        # What is known of a reply that ends without the backend's stats.
        self.meter = ReplyMeter()
        self.notice = trim_notice(err, self.echo, request.lens_log)
        # The reply so far, for --json when it fails (a crash) mid-reply.
        self.shown: list[str] = []
        # The first write to stdout that failed (not a closed pipe).
        self.stdout_failed: OSError | None = None

    def show(self, text: str) -> None:
        """A piece of the reply's text (``on_text``)."""
        if self.reading is not None:
            self.reading.clear()
        self.meter.piece()
        self.shown.append(text)
        if self.echo is not None:
            self.echo.close()
        if not self.request.json_output:
            try:
                self.out.write(text if self.sanitizer is None else self.sanitizer.feed(text))
                self.out.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                # /dev/full, a full disk: the reply is stopped and saved as such.
                self.stdout_failed = self.stdout_failed or exc
                raise BrokenPipeError from None

    def on_event(self, event: ChatEvent) -> None:
        """Anything else the reply streams: the prompt's reading, thinking, a trimmed context."""
        if isinstance(event, PromptProgress):
            if self.reading is not None:
                self.reading.show(event)
            return
        if self.reading is not None:
            self.reading.clear()
        if isinstance(event, ThinkingDelta):
            self.meter.piece(thinking=True)
        self.notice(event)

    def held_back(self) -> str:
        """The end of an escape sequence the sanitizer held back, to write at the reply's end."""
        if self.sanitizer is None or self.request.json_output:
            return ""
        return self.sanitizer.flush()

    def close(self) -> None:
        """The reply ended (or failed): the reading line cleared, the thinking closed."""
        if self.reading is not None:
            # A reply stopped (or failed) while its prompt was read.
            self.reading.clear()
        if self.echo is not None:
            # A reply that ended while thinking.
            self.echo.close()
