"""The reply segmenter: bounded live tails, no cut inside a code block that is not
repaired, and a finished reply that shows no seams."""

from __future__ import annotations

import random

from vibechat.app.tui.conversation.segmenter import ReplySegmenter, segment

PROSE = "\n\n".join(f"Paragraph {i} " + "word " * 25 for i in range(40))
CODE = (
    "Intro.\n\n```python\n"
    + "".join(f"x{i} = {i}  # a line of code\n" for i in range(300))
    + "```\n\nAfter."
)
WALL = "no line breaks at all, " * 400  # one paragraph, ~9,000 characters
LINES = "".join(f"line {i} without blank lines between\n" for i in range(400))


def stream(
    text: str, seal_at: int = 600, force_at: int = 1500, seed: int = 1
) -> tuple[ReplySegmenter, int]:
    """Feed ``text`` in token-sized pieces; returns the segmenter and the longest live tail seen."""
    rng = random.Random(seed)
    seg = ReplySegmenter(seal_at, force_at)
    longest, pos = 0, 0
    while pos < len(text):
        n = rng.randint(1, 12)
        seg.feed(text[pos : pos + n])
        pos += n
        longest = max(longest, len(seg.display(len(seg.segments) - 1)))
    return seg, longest


def covers(seg: ReplySegmenter, text: str) -> bool:
    parts = seg.segments
    return (
        parts[0].start == 0
        and parts[-1].end == len(text)
        and all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
    )


def fences_balanced(markdown: str) -> bool:
    return sum(1 for line in markdown.splitlines() if line.strip().startswith("```")) % 2 == 0


def test_prose_is_cut_only_at_paragraph_boundaries():
    seg, longest = stream(PROSE)
    assert covers(seg, PROSE) and len(seg.segments) > 5
    assert longest < 600 + 200
    for s in seg.segments[:-1]:
        assert PROSE[s.start : s.end].endswith("\n\n") and not s.forced_after
    assert seg.merge_forced() == []


def test_long_code_block_is_cut_inside_with_repaired_fences_and_merged_at_the_end():
    seg, longest = stream(CODE)
    assert longest <= 1500 + 100  # the live tail stays bounded inside one code block
    shown = [seg.display(i) for i in range(len(seg.segments))]
    assert len(shown) > 3 and all(fences_balanced(s) for s in shown)
    inside = [s for s in seg.segments if s.prefix]
    assert inside and all(s.prefix == "```python\n" for s in inside)
    runs = seg.merge_forced()
    assert runs  # the forced cuts are undone when the reply ends
    assert "".join(seg.display(i) for i in range(len(seg.segments))) == CODE
    assert not any(s.forced_after or s.prefix or s.suffix for s in seg.segments)


def test_text_without_blank_lines_or_newlines_is_still_bounded():
    for text in (WALL, LINES):
        seg, longest = stream(text)
        assert covers(seg, text) and longest <= 1500 + 100
        seg.merge_forced()
        assert [seg.display(i) for i in range(len(seg.segments))] == [text]


def shown(text: str, seal_at: int) -> list[str]:
    seg = segment(text, seal_at)
    return [seg.display(i) for i in range(len(seg.segments))]


def test_finished_text_is_cut_cleanly_and_round_trips():
    for text in (PROSE, CODE, WALL, "", "short"):
        parts = shown(text, 300)
        assert "".join(parts) == text
        assert all(fences_balanced(p) for p in parts)
    assert all(len(p) <= 700 for p in shown(PROSE, 300))


def test_a_segmenter_built_from_text_keeps_streaming():
    seg = segment(PROSE[:1000], 300)
    before = len(seg.segments)
    for i in range(1000, len(PROSE), 7):
        seg.feed(PROSE[i : i + 7])
    assert covers(seg, PROSE) and len(seg.segments) > before


def test_tilde_fences_and_info_strings_are_respected():
    text = "~~~\n" + "a\n\n" * 400 + "~~~\n\nend"
    seg, _ = stream(text)
    closing = text.index("~~~\n\nend")
    clean_cuts = [s.end for s in seg.segments[:-1] if not s.forced_after]
    assert all(cut > closing for cut in clean_cuts)  # blank lines inside the fence are no clean cut
    assert all(seg.display(i).count("~~~") % 2 == 0 for i in range(len(seg.segments)))


def test_a_burst_is_cut_into_bounded_pieces_and_merged_back():
    """Text that arrives in large slices (a fast stream rendering in bursts) seals as many
    segments as it needs: clean cuts within burst_piece, forced ones within force_at."""
    for text in (PROSE, CODE, WALL, LINES):
        seg = ReplySegmenter(600, 1500)
        for start in range(0, len(text), 4000):
            seg.feed(text[start : start + 4000])
        assert covers(seg, text)
        shown = [seg.display(i) for i in range(len(seg.segments))]
        assert all(fences_balanced(s) for s in shown)
        assert max(len(s) for s in shown) <= seg.burst_piece
        assert all(
            len(seg.display(i)) <= 1500 + 600 + 20
            for i, s in enumerate(seg.segments)
            if s.forced_after
        )
        assert len(shown[-1]) <= 1500 + 600 + 20  # the live tail
        seg.merge_forced()
        assert "".join(seg.display(i) for i in range(len(seg.segments))) == text


def test_a_token_seals_at_most_one_segment():
    rng = random.Random(3)
    for text in (PROSE, CODE, WALL, LINES):
        seg, pos = ReplySegmenter(600, 1500), 0
        while pos < len(text):
            n = rng.randint(1, 12)
            assert seg.feed(text[pos : pos + n]) <= 1
            pos += n


def test_no_clean_cut_inside_a_loose_list_or_an_indented_code_block():
    """A blank line before a list item or an indented line does not end the block above it
    (a loose list's items, a list item's next paragraph, an indented code block's next
    lines): cut there, the two sides would render as two blocks."""
    loose = (
        "Intro.\n\n" + "".join(f"- item {i} " + "word " * 10 + "\n\n" for i in range(30)) + "Outro."
    )
    indented = "Intro.\n\n" + "".join(f"    code line {i}\n\n" for i in range(80)) + "Outro."
    numbered = (
        "Intro.\n\n"
        + "".join(f"{i}. step {i} " + "word " * 10 + "\n\n  more about it\n\n" for i in range(20))
        + "Outro."
    )
    for text in (loose, indented, numbered):
        seg = segment(text, 100)
        cuts = [s.end for s in seg.segments[:-1]]
        block = range(
            len("Intro.\n\n") + 1, text.index("Outro.")
        )  # the list or code block, after its start
        assert cuts and not any(cut in block for cut in cuts), cuts
        assert "".join(seg.display(i) for i in range(len(seg.segments))) == text
    # After a list, a line still arriving that may become a list item is no clean cut yet.
    seg = ReplySegmenter(10, 1000)
    seg.feed("- A first item.\n\n-")
    assert len(seg.segments) == 1
    seg.feed(" a second item\n")
    assert len(seg.segments) == 1
    seg.feed("\nNext paragraph")
    assert [seg.display(i) for i in range(len(seg.segments))] == [
        "- A first item.\n\n- a second item\n\n",
        "Next paragraph",
    ]
    # A list after a paragraph is a new block: cut before it.
    assert [
        seg.display(i) for i in range(2) for seg in [segment("A paragraph.\n\n- an item", 5)]
    ] == ["A paragraph.\n\n", "- an item"]
