from __future__ import annotations

import pytest

from vibechat.engine.sanitize import (
    MAX_SEQUENCE,
    Sanitizer,
    escaped_token,
    replace_surrogates,
    sanitize,
)
from vibechat.engine.turns.stops import StopMatcher


def test_sanitize_removes_escape_sequences_and_controls():
    evil = "a\x1b]52;c;ZXZpbA==\x07b\x1b[2Jc\x1b]8;;http://x\x1b\\link\x9b31m\x7f\r\x00"
    assert sanitize(evil) == "abclink"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b[31m red \x1b]0;title\x07", " red "),  # the QA report: CSI and OSC with BEL
        ("x\x1b[1;38;5;196mbold\x1b[0m", "xbold"),  # CSI with parameters
        ("x\x1b[?25l\x1b[?1049h", "x"),  # private CSI (cursor off, alternate screen)
        ("x\x1b[ q", "x"),  # CSI with an intermediate byte
        (
            "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
            "click",
        ),  # OSC 8 link, ST-terminated
        ("\x1b]52;c;cHduZWQ=\x9c!", "!"),  # OSC 52, C1 ST
        ("a\x1bP1$r0m\x1b\\b", "ab"),  # DCS
        ("a\x1bXsos\x1b\\b\x1b^pm\x1b\\c\x1b_apc\x1b\\d", "abcd"),  # SOS, PM, APC
        ("a\x1bcb\x1b7c\x1b8d\x1b=e\x1b(Bf\x1b#8g", "abcdefg"),  # two-byte and nF ESC sequences
        (
            "a\x9b2Jb\x9d0;t\x07c\x90q\x9cd\x98s\x9ce\x9ep\x9cf\x9fa\x9cg",
            "abcdefg",
        ),  # C1 introducers
        ("a\x85b\x8dc\x9cd", "abcd"),  # other C1 controls
        ("a\x00b\x07c\x08d\rE\x7ff\x1ag", "abcdEfg"),  # C0, DEL
        ("a\x1b\x1b[2Jb", "ab"),  # a stray ESC before a sequence
        ("a\x1b", "a"),
        ("a\x9b", "a"),  # a lone introducer at the end
        ("a\x1b[12", "a[12"),  # unfinished at the end: only the introducer goes
        ("a\x1b]0;title", "a]0;title"),
        (
            "a\x1b]0;ti\ntle\x07b",
            "a]0;ti\ntleb",
        ),  # a string sequence ends at a line break: nothing swallowed
        ("a\x1b[12\x1b[0mb", "a[12b"),  # one sequence cut by the next
        ("a\x1bé", "aé"),
    ],
)
def test_sanitize_strips_whole_sequences(text, expected):
    assert sanitize(text) == expected


def test_sanitize_keeps_text_newlines_tabs_and_unicode():
    text = "héllo\tworld\n日本語 😀 — ok [31m ]0; \\ ^_ P"
    assert sanitize(text) == text


CASES = [
    "plain text, no escapes",
    "\x1b[31m red \x1b]0;title\x07 after",
    "a\x1b]52;c;ZXZpbA==\x07b\x1b[2Jc\x1b]8;;http://x\x1b\\link\x9b31m\x7f\r\x00 end",
    "x\x1bP1$r0m\x1b\\y\x1b(Bz\x1b\x1b[0m\x1b",
    "\x1b]0;" + "t" * 600 + "\x07 rest",  # longer than the bound
    "\x1b[" + "1;" * 300 + "m rest",
    "tail \x1b]0;unterminated",
    "lone \ud800 surrogates \udfff\ud83d and a pair split \ud83d\ude00 \x1b[3\udc00m end",
]


@pytest.mark.parametrize("text", CASES)
def test_streamed_pieces_give_the_same_text_at_every_split(text):
    whole = sanitize(text)
    for cut in range(len(text) + 1):
        s = Sanitizer()
        assert s.feed(text[:cut]) + s.feed(text[cut:]) + s.flush() == whole, cut
    for cut in range(0, len(text) - 1, 7):  # three pieces
        for cut2 in range(cut, len(text) + 1, 5):
            s = Sanitizer()
            assert (
                s.feed(text[:cut]) + s.feed(text[cut:cut2]) + s.feed(text[cut2:]) + s.flush()
                == whole
            )
    s = Sanitizer()  # one character at a time, as a slow stream would
    assert "".join(s.feed(c) for c in text) + s.flush() == whole


def test_lone_surrogates_become_the_replacement_character():
    """A server's JSON can carry ``\\ud800``: a lone surrogate cannot be encoded, and printing
    it crashed ``vibechat run`` (UnicodeEncodeError)."""
    assert sanitize("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert sanitize("\x1b[3\udc00m") == "[3\ufffdm"  # breaks a sequence: replaced, not swallowed
    assert replace_surrogates("x\ud83d\x1b[2J\ude00") == "x\ufffd\x1b[2J\ufffd"  # only surrogates
    assert replace_surrogates("plain") == "plain" and replace_surrogates("é 😀") == "é 😀"
    for text in CASES:
        sanitize(text).encode("utf-8")  # never raises
        s = Sanitizer()
        "".join(s.feed(c) for c in text).encode("utf-8")


def test_streamed_output_never_contains_a_control_character():
    s = Sanitizer()
    for c in CASES[2] + CASES[3]:
        out = s.feed(c)
        assert not any(ord(ch) < 32 and ch not in "\n\t" or 0x7F <= ord(ch) <= 0x9F for ch in out)


def test_random_text_and_pieces_agree_with_the_whole_and_leave_no_control():
    import random

    rng = random.Random(7)
    alphabet = [
        "a",
        "é",
        " ",
        "\n",
        "\t",
        "\x1b",
        "[",
        "]",
        "\\",
        "P",
        "_",
        "^",
        "X",
        "0",
        ";",
        "m",
        "(",
        "B",
        "\x07",
        "\x9b",
        "\x9c",
        "\x9d",
        "\x90",
        "\x7f",
        "\r",
        "\x00",
        "\ud800",
        "\udfff",
    ]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        whole = sanitize(text)
        assert not any(
            (ord(ch) < 32 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F for ch in whole
        )
        whole.encode("utf-8")  # no lone surrogate left
        s, out, at = Sanitizer(), [], 0
        while at < len(text):
            step = rng.randint(1, 6)
            out.append(s.feed(text[at : at + step]))
            at += step
        assert "".join(out) + s.flush() == whole, repr(text)


def test_a_stray_escape_holds_back_a_bounded_amount_of_text():
    s = Sanitizer()
    assert s.feed("reply \x1b]") == "reply "
    shown = "".join(s.feed("word ") for _ in range(200))  # 1,000 characters, no terminator
    assert len(shown) >= 1000 - MAX_SEQUENCE and shown.startswith("]word word")
    assert "".join(shown) + s.flush() == "]" + "word " * 200


def test_plain_text_passes_straight_through_while_streaming():
    s = Sanitizer()
    assert [s.feed(p) for p in ("Hello", ", ", "world\n")] == ["Hello", ", ", "world\n"]
    assert s.flush() == ""


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


# The fake backend streams one word per piece: these escape sequences are split across pieces.
SPLIT_REPLY = "evil \x1b]0;a b c\x07 and \x1b[2 q red \x1b]8;;http://x y\x1b\\link end \x1b]0;t"


def test_run_streams_exactly_the_text_json_reports():
    import io
    import json

    from fakes import RecordingBackend
    from vibechat.app.commands.run import execute
    from vibechat.app.commands.run_request import RunRequest
    from vibechat.engine.settings.params import SamplingParams

    outputs = {}
    for json_output in (False, True):
        out, err = io.StringIO(), io.StringIO()
        request = RunRequest("hi", None, SamplingParams(), json_output=json_output)
        assert execute(RecordingBackend(SPLIT_REPLY), request, out, err) == 0, err.getvalue()
        outputs[json_output] = out.getvalue()
    text = json.loads(outputs[True])["text"]
    assert text == sanitize(SPLIT_REPLY) == "evil  and  red link end ]0;t"
    assert outputs[False] == text + "\n"


def test_bidi_overrides_embeddings_and_isolates_never_reach_the_terminal():
    """issue 40: a right-to-left override (U+202E) in a tool result reached the screen, where
    it shows text in another order than it is. The plain marks (U+200E/U+200F) stay."""
    controls = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert sanitize(f"rm -rf /{controls}fdp.txt") == "rm -rf /fdp.txt"
    assert (
        sanitize("\u05e9\u05dc\u05d5\u05dd\u200f, hello\u200e")
        == "\u05e9\u05dc\u05d5\u05dd\u200f, hello\u200e"
    )
    stream = Sanitizer()
    assert stream.feed("exe.\u202e") + stream.feed("txt") + stream.flush() == "exe.txt"


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b" Paris", " Paris"),
        ("€".encode(), "€"),
        # A token that holds part of a character (a byte-fallback token): its bytes escaped.
        (b"\xe2\x82", "\\xe2\\x82"),
        (b"ok\xff", "ok\\xff"),
        # Controls and bidi overrides never raw.
        (b"\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),
        (b"\n\t\r", "\\n\\t\\r"),
        ("\u202e".encode(), "\\u202e"),
        ("\u009b".encode(), "\\u009b"),
        # A real backslash cannot forge an escape.
        (b"\\xe2", "\\\\xe2"),
    ],
)
def test_a_tokens_bytes_are_shown_escaped_never_raw(data, shown):
    assert escaped_token(data) == shown
    assert sanitize(shown) == shown
