"""A long reply's settled segments, folded into one widget (``SettledSegments``).

A reply's body (``AssistantMessage``, assistant_message.py) is a column of ``MarkdownSegment``s.
Every layout of the screen visits each widget, so once a reply has many, its settled
segments go into one ``SettledSegments`` at the top of the body (markdown_segment.py): the
layout after each render then touches the fold, a few segments and the live tail, however
long the reply is (docs/PERFORMANCE.md, "Streaming layout, round two"). These functions
move segments into the fold while the reply streams, and merge its forced cuts when it ends;
the reply decides when.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.widget import Widget

from .markdown_segment import CachedMarkdown, MarkdownSegment, SettledSegments


def standing(body: Widget) -> list[MarkdownSegment]:
    """The body's segment widgets, in order: not the fold, nor those folded into it (hidden
    until they are removed)."""
    return [
        child
        for child in body.children
        if isinstance(child, MarkdownSegment)
        and not isinstance(child, SettledSegments)
        and child.display
    ]


def fold(
    body: Widget, widgets: list[MarkdownSegment], more: list[MarkdownSegment], code_theme: str
) -> None:
    """Fold the segment ``widgets``, settled, and the settled segments ``more`` (made, never
    mounted) into the body's ``SettledSegments``, made on the first fold. The folded widgets
    are hidden at once (the fold shows their lines in this very layout) and removed."""
    parts = [widget.markdown for widget in widgets + more]
    top = body.children[0] if body.children else None
    if isinstance(top, SettledSegments):
        top.fold(parts)
    else:
        body.mount(SettledSegments(parts, code_theme, classes="reply--settled"), before=0)
    for widget in widgets:
        widget.display = False
    body.remove_children(widgets)


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


async def show_merged(
    body: Widget, top: SettledSegments, merged: list[CachedMarkdown], code_theme: str, fold_at: int
) -> None:
    """The reply ended with ``merged`` segments: the fold holds all of them but the last,
    which the last widget shows, or, ``fold_at`` of them or fewer (a long code block cut by
    force), each has a widget again, as a reply that never folded."""
    widgets = standing(body)
    if len(merged) <= fold_at:
        old: list[Widget] = [top, *widgets]
        for widget in old:
            widget.display = False
        mounted = body.mount_all(
            [
                MarkdownSegment(
                    markdown.text,
                    code_theme=code_theme,
                    classes="reply--segment",
                    prepared=markdown,
                )
                for markdown in merged
            ]
        )
        await body.remove_children(old)
        await mounted
        return
    top.set_parts(merged[:-1])
    widgets[-1].show(merged[-1])
    for widget in widgets[:-1]:
        widget.display = False
    await body.remove_children(widgets[:-1])
