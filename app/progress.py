"""Progress on the command line. Downloads: a Rich progress bar on a terminal, plain
lines (at most one every few seconds) when output goes to a file or a pipe.
``pull_with_progress`` downloads a model that way (``models pull``, a Hub ``--model`` given
to ``run`` or to the chat before its screen opens). A long prompt's reading (``run --stats``):
``ReadingLine``, one line on a terminal's stderr, rewritten in place.

Imports inside functions are deliberate: Rich's progress bars, typer and the model store load
only when a download shows its progress (start-up time)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

# Rich is imported only when a bar is shown; the downloader when it runs.
if TYPE_CHECKING:
    from types import TracebackType

    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

    from vibechat.engine.models.download import Progress
    from vibechat.engine.models.local_model import LocalModel
    from vibechat.engine.turns.backend import PromptProgress


def human_size(n: float) -> str:
    """A file's or a download's size, in decimal units as the Hub gives them (engine/sizes.py)."""
    from vibechat.engine.sizes import human_bytes

    return human_bytes(n, si=True)


def human_time(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_line(p: Progress) -> str:
    shard = f" (file {p.file_index}/{p.file_count})" if p.file_count > 1 else ""
    return (
        f"{p.fraction:6.1%}  {human_size(p.done)} / {human_size(p.total)}  "
        f"{human_size(p.speed)}/s  ETA {human_time(p.eta)}{shard}"
    )


class CliProgress:
    """Use as a context manager; pass ``update`` as the downloader's ``on_progress``."""

    PLAIN_EVERY = 5.0  # seconds between plain lines

    def __init__(self, title: str, stream: TextIO | None = None, fancy: bool | None = None) -> None:
        from vibechat.engine.sanitize import sanitize

        self.title = sanitize(str(title))
        self.stream = stream or sys.stderr
        self.fancy = (self.stream.isatty() and sys.stdout.isatty()) if fancy is None else fancy
        self._rich: RichProgress | None = None
        self._task: TaskID | None = None
        self._last_plain = 0.0
        self._last: Progress | None = None

    def __enter__(self) -> CliProgress:
        if self.fancy:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as RichProgress

            # The title names Hub repos and files: sanitised, and never read as Rich markup.
            bar = RichProgress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            bar.__enter__()
            self._task = bar.add_task(self.title, total=None)
            self._rich = bar
        else:
            self.stream.write(f"{self.title}\n")
            self.stream.flush()
        return self

    def update(self, p: Progress) -> None:
        self._last = p
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, completed=p.done, total=p.total)
            return
        now = time.monotonic()
        if now - self._last_plain >= self.PLAIN_EVERY or p.done >= p.total:
            self._last_plain = now
            self.stream.write(progress_line(p) + "\n")
            self.stream.flush()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich is not None:
            self._rich.__exit__(exc_type, exc, tb)


class ReadingLine:
    """``run --stats`` on a terminal: how far a long prompt's reading came (``PromptProgress``),
    on one line of ``stream`` rewritten in place (``\\r``), cleared before anything else is
    written there or on stdout (the reply's text, its thinking, an error). Only made where
    ``stream`` is a terminal (``for_stream``): scripts reading stderr get no noise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        # The line's length on screen (0: none shown).
        self._cells = 0

    @classmethod
    def for_stream(cls, stream: TextIO) -> ReadingLine | None:
        """A ``ReadingLine`` on ``stream`` when it is a terminal, else None."""
        try:
            return cls(stream) if stream.isatty() else None
        except (AttributeError, ValueError):
            # No isatty, or a closed stream.
            return None

    def show(self, progress: PromptProgress) -> None:
        from .report import reading_line

        line = reading_line(progress)
        self.stream.write("\r" + line + " " * max(0, self._cells - len(line)))
        self.stream.flush()
        self._cells = len(line)

    def clear(self) -> None:
        """The line goes (the cursor back at its start), if one is shown."""
        if self._cells:
            self.stream.write("\r" + " " * self._cells + "\r")
            self.stream.flush()
            self._cells = 0


def pull_with_progress(ref_text: str, revision: str | None = None) -> LocalModel:
    """Download ``ref_text`` with progress on stderr; returns the registered model.
    Ctrl-C stops it (resumable) and exits with 130."""
    import typer

    from vibechat.engine.errors import ModelRefError
    from vibechat.engine.models.store import pull
    from vibechat.engine.settings.refs import parse_hub_ref

    ref = parse_hub_ref(ref_text)
    if ref is None:
        raise ModelRefError(
            f"{ref_text!r} is not a Hugging Face reference: use owner/repo, owner/repo:QUANT "
            "or owner/repo/file.gguf."
        )
    reporter: list[CliProgress] = []

    def on_listing(listing, option) -> None:
        shards = f", {len(option.files)} files" if len(option.files) > 1 else ""
        projector = listing.projector_for(option)
        # A vision model's projector comes with it: its name (from the Hub) and size are said.
        also = (
            f" + projector {projector.path} ({human_size(projector.size)})"
            if projector is not None
            else ""
        )
        reporter.append(
            CliProgress(
                f"Downloading {ref.repo} {option.label} ({human_size(option.size)}{shards}){also}"
            )
        )
        reporter[0].__enter__()

    try:
        model = pull(
            ref,
            revision=revision,
            on_listing=on_listing,
            on_progress=lambda p: reporter[0].update(p) if reporter else None,
        )
    except KeyboardInterrupt:
        typer.echo("vibechat: download stopped; run the same command again to resume.", err=True)
        raise typer.Exit(130) from None
    finally:
        if reporter:
            reporter[0].__exit__(None, None, None)
    return model
