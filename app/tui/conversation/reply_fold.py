"""A reply's forced cuts merged when it ends (``merge_runs``).

A reply's text (``AssistantMessage``, assistant_message.py) is one ``MarkdownSegment``
showing its segments one below the other (markdown_segment.py). While it streams, a tail that
found no clean cut was cut by force (segmenter.py); when the reply ends, each run of segments
joined by forced cuts becomes one segment again, rendered once, and the others keep their
renders.
"""

from __future__ import annotations

from collections.abc import Callable

from .markdown_segment import CachedMarkdown


def merge_runs(
    streamed: list[CachedMarkdown],
    runs: list[list[int]],
    display: Callable[[int], str],
    code_theme: str,
) -> list[CachedMarkdown]:
    """The segments as they streamed, with each run joined by forced cuts (indexes into
    ``streamed``) made one text: ``display(i)``, the segmenter's merged segment ``i``, with
    the gap above of the run's first; the others as they are (rendered already)."""
    starts = {run[0]: run[-1] for run in runs}
    merged: list[CachedMarkdown] = []
    index = 0
    # Bounded: each step moves past one run or segment.
    while index < len(streamed):
        last = starts.get(index)
        if last is None:
            merged.append(streamed[index])
            index += 1
        else:
            merged.append(
                CachedMarkdown(display(len(merged)), code_theme, streamed[index].gap_above)
            )
            index = last + 1
    return merged
