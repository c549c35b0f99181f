"""Cutting a growing Markdown reply into segments, so each render touches only a
bounded live tail.

A clean cut is made after a blank line outside a code fence, before a line that
surely starts a new block: both sides are complete Markdown documents and render
exactly as the whole would (the widget adds the blank line Rich puts between two
blocks: markdown_segment.py). A blank line is no clean cut before an indented line
(an indented code block, or a list item's next paragraph, goes on across it), nor,
inside a list, before a list item (a loose list goes on, its items apart). Replies do
not always offer one (a long code block, a model that never leaves a blank
line), and a tail that only grows would make every render slower than the last.
So past ``force_at`` characters the segmenter forces a cut: after a line break,
inside a code block by closing the fence and re-opening it in the next segment,
or, as a last resort, at a space. Forced cuts are recorded; when the reply ends,
each run of segments joined by forced cuts is merged back into one and rendered
once, so the finished reply shows no seams.

Pure Python, no Textual: the widget asks what to render.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCES = ("```", "~~~")
_LIST_ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
# A line still arriving that may become one.
_LIST_ITEM_START = re.compile(r"(?:[-*+]|\d{1,9}[.)]?)$")


@dataclass
class Segment:
    """A piece of the reply: ``start`` and ``end``, the offsets of its text in the reply;
    ``prefix``, a fence opener repeated on top (the segment starts inside a code block);
    ``suffix``, a fence closer added below (the segment was cut inside a code block);
    ``forced_after``, the cut after it was forced (merged when the reply ends)."""

    start: int
    end: int
    prefix: str = ""
    suffix: str = ""
    forced_after: bool = False


def _fence_of(line: str) -> str | None:
    stripped = line.lstrip()
    for fence in FENCES:
        if stripped.startswith(fence):
            return fence
    return None


def _closer(opener: str) -> str:
    """The fence that closes ``opener`` (same character, same length)."""
    stripped = opener.strip()
    char = stripped[0]
    return char * (len(stripped) - len(stripped.lstrip(char)))


def _starts_block(line: str, in_list: bool) -> bool:
    """Whether ``line``, after a blank line, surely starts a new block (see the module doc):
    not blank, not indented, and after a list, not a list item, nor the start of one (the
    last line of a text still streaming)."""
    if not line.strip() or line[0] in " \t":
        return False
    if not in_list:
        return True
    body = line.rstrip("\n")
    if _LIST_ITEM.match(body):
        return False
    return line.endswith("\n") or not _LIST_ITEM_START.match(body)


def _closes(line: str, opener: str) -> bool:
    stripped = line.strip()
    closer = _closer(opener)
    return stripped.startswith(closer) and set(stripped) == {closer[0]}


@dataclass
class _Scan:
    """Where a text can be cut, the last place of each kind: ``clean``, after a blank line
    outside a fence (0: none); ``line``, after a line break outside a fence; ``fenced_line``,
    after a line break inside a fence, and ``fenced_opener``, the opener line of that fence."""

    clean: int = 0
    line: int = 0
    fenced_line: int = 0
    fenced_opener: str = ""


def _scan(text: str, opener: str, limit: int, clean_limit: int, in_list: bool) -> _Scan:
    """Where ``text`` can be cut: clean cuts at most ``clean_limit`` characters in, other
    cuts at most ``limit``; ``opener``: the fence it starts inside of ("" if none);
    ``in_list``: it may start inside a list."""
    scan = _Scan()
    fence_open = opener
    pos = 0
    # A blank line outside a fence ended here: a clean cut if a block starts.
    after_blank = 0
    for line in text.splitlines(keepends=True):
        if after_blank and _starts_block(line, in_list):
            scan.clean = after_blank
            in_list = False
        after_blank = 0
        pos += len(line)
        if not line.endswith("\n") or pos >= len(text) or pos > clean_limit:
            # Never cut after the last line: something must follow the cut.
            break
        fence = _fence_of(line)
        if fence_open:
            if _closes(line, fence_open):
                fence_open = ""
                if pos <= limit:
                    scan.line = pos
            elif pos <= limit:
                scan.fenced_line, scan.fenced_opener = pos, fence_open
        elif fence:
            fence_open = line.rstrip("\n")
        elif not line.strip():
            after_blank = pos
            if pos <= limit:
                scan.line = pos
        else:
            in_list = in_list or bool(_LIST_ITEM.match(line.lstrip(" ").rstrip("\n")))
            if pos <= limit:
                scan.line = pos
    return scan


class ReplySegmenter:
    """Segments of a reply that grows by ``feed``. The last segment is the live tail."""

    def __init__(self, seal_at: int = 600, force_at: int = 1500) -> None:
        self.seal_at = seal_at
        self.force_at = max(force_at, seal_at)
        self.burst_piece = 4 * self.force_at
        self.text = ""
        self.segments: list[Segment] = [Segment(0, 0)]

    def display(self, index: int) -> str:
        """What segment ``index`` renders: its text, with fence lines where it was cut."""
        seg = self.segments[index]
        return seg.prefix + self.text[seg.start : seg.end] + seg.suffix

    def feed(self, text: str) -> int:
        """Add ``text``; returns how many segments were sealed: after a seal the previous
        tail is final and a new tail follows it. A token seals at most one. A burst of
        text (a stream faster than the UI, drawn in slices) may seal several: cut cleanly
        within ``burst_piece`` characters, or by force within ``force_at``, so the live
        tail stays bounded however large the slice."""
        self.text += text
        live = self.segments[-1]
        live.end = len(self.text)
        sealed = 0
        while self._seal_once(self.segments[-1]):
            sealed += 1
        return sealed

    def _seal_once(self, live: Segment) -> int:
        tail = self.text[live.start :]
        if len(tail) <= self.seal_at:
            return 0
        opener = live.prefix.rstrip("\n")
        # A tail that grew token by token is cut where it can be. A burst is cut cleanly
        # within burst_piece (a settled segment renders once, and fewer, larger ones
        # are fewer widgets to lay out), or by force within force_at.
        small = len(tail) <= self.force_at + self.seal_at
        limit = len(tail) if small else self.force_at
        # After a forced cut the tail may start inside a list: no list item starts a new block.
        in_list = len(self.segments) > 1 and self.segments[-2].forced_after
        scan = _scan(
            tail,
            opener,
            limit,
            len(tail) if small else max(self.force_at, self.burst_piece),
            in_list,
        )
        if scan.clean:
            return self._seal(live, scan.clean)
        if len(tail) <= self.force_at:
            return 0
        if scan.line:
            return self._seal(live, scan.line, forced=True)
        if scan.fenced_line:
            return self._seal(live, scan.fenced_line, forced=True, fence=scan.fenced_opener)
        if "\n" not in tail[:limit]:
            space = tail.rfind(" ", 0, min(len(tail) - 1, limit))
            if space > 0:
                return self._seal(live, space + 1, forced=True)
        return 0

    def _seal(self, live: Segment, cut: int, forced: bool = False, fence: str = "") -> int:
        at = live.start + cut
        nxt = Segment(at, len(self.text))
        if fence:
            live.suffix = _closer(fence) + "\n"
            nxt.prefix = fence + "\n"
        live.end = at
        live.forced_after = forced
        self.segments.append(nxt)
        return 1

    def merge_forced(self) -> list[list[int]]:
        """Merge each run of segments joined by forced cuts into one (the reply has ended).
        Returns the runs that were merged, as indexes into the segments before merging."""
        runs: list[list[int]] = [[0]]
        for i in range(1, len(self.segments)):
            if self.segments[i - 1].forced_after:
                runs[-1].append(i)
            else:
                runs.append([i])
        merged = [run for run in runs if len(run) > 1]
        for run in reversed(merged):
            first, last = self.segments[run[0]], self.segments[run[-1]]
            first.end, first.suffix, first.forced_after = last.end, last.suffix, last.forced_after
            del self.segments[run[0] + 1 : run[-1] + 1]
        return merged


def segment(text: str, seal_at: int = 600, force_at: int = 1500) -> ReplySegmenter:
    """A segmenter holding ``text`` cut at clean points only, as a finished reply is
    shown; text fed to it later streams as usual."""
    segmenter = ReplySegmenter(seal_at, force_at=len(text) + 1)
    for start in range(0, len(text), seal_at):
        segmenter.feed(text[start : start + seal_at])
    while segmenter.feed(""):
        pass
    segmenter.force_at = max(force_at, seal_at)
    return segmenter
