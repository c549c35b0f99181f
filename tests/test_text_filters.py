from __future__ import annotations

from vibechat.engine.sanitize import sanitize
from vibechat.engine.stops import StopMatcher


def test_sanitize_removes_escape_sequences_and_controls():
    evil = "a\x1b]52;c;ZXZpbA==\x07b\x1b[2Jc\x1b]8;;http://x\x1b\\link\x9b31m\x7f\r\x00"
    clean = sanitize(evil)
    assert not any(ch in clean for ch in "\x1b\x07\x9b\x7f\r\x00")
    assert clean.startswith("a]52;c;ZXZpbA==b[2Jc")


def test_sanitize_keeps_text_newlines_tabs_and_unicode():
    text = "héllo\tworld\n日本語 😀 — ok"
    assert sanitize(text) == text


def test_sanitize_is_safe_across_chunk_boundaries():
    chunks = ["abc\x1b", "[2J", "def\x1b]52;", "c;AAAA\x07"]
    assert "".join(sanitize(c) for c in chunks) == sanitize("".join(chunks))


def _run(stops, pieces):
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(p) for p in pieces) + matcher.flush()
    return out, matcher.stopped


def test_stop_string_split_across_pieces_is_caught():
    assert _run(["User:"], ["Hello ", "Us", "er", ": more"]) == ("Hello ", True)


def test_partial_match_that_does_not_complete_is_released():
    assert _run(["User:"], ["Hello Us", "eful stuff"]) == ("Hello Useful stuff", False)


def test_earliest_of_several_stops_wins():
    assert _run(["END", "\n\n"], ["a\n\nb END"]) == ("a", True)


def test_no_stops_passes_through():
    assert _run([], ["x", "y"]) == ("xy", False)
