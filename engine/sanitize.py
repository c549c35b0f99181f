"""Neutralise terminal control sequences in untrusted model output.

Model text can contain escape sequences that a terminal would obey: screen clears,
OSC 8 hyperlinks, OSC 52 clipboard writes, title changes. We remove whole sequences,
so that no leftover such as ``[31m`` or ``]0;title`` shows:

* CSI: ``ESC [`` (or U+009B), parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F,
  one final byte 0x40-0x7E;
* OSC: ``ESC ]`` (or U+009D) up to BEL, ``ESC \\`` (ST) or U+009C (ST);
* DCS, SOS, PM, APC: ``ESC P``/``X``/``^``/``_`` (or U+0090/U+0098/U+009E/U+009F) up to ST;
* other escape sequences: ``ESC``, intermediate bytes 0x20-0x2F, one final byte 0x30-0x7E
  (``ESC c``, ``ESC 7``, ``ESC ( B`` ...);

then every remaining C0 control except newline and tab (a carriage return too: on its own
it lets output overwrite what was already printed), DEL and every C1 control, and the bidi
embedding, override and isolate controls (U+202A-U+202E, U+2066-U+2069: a right-to-left
override makes the terminal show text in another order than it is, "Trojan Source"; the
plain marks U+200E/U+200F, which reorder nothing around them, stay). A lone
surrogate (U+D800-U+DFFF: a JSON ``\\ud800`` escape decodes to one) cannot be encoded to
UTF-8 and would crash whatever prints or saves the text: it becomes U+FFFD (the
replacement character), like any other undecodable input. ``replace_surrogates`` does only
that, for text that is otherwise kept raw.

A sequence that is malformed (a control character or a non-ASCII character where a
sequence byte belongs, a line break inside an OSC string), unfinished at the end of the
text, or longer than ``MAX_SEQUENCE`` characters is no sequence: only its introducer (ESC
or the C1 character) is dropped and what follows is ordinary text. So a stray ESC never
swallows more than the sequence it starts, and never the rest of a reply.

Streams arrive in pieces that can split a sequence anywhere: ``Sanitizer`` holds back an
unfinished sequence (at most ``MAX_SEQUENCE`` characters) until the next piece completes or
breaks it. Whatever the pieces, what it emits joined is ``sanitize`` of the whole text, so
a streamed reply and the same reply shown or saved whole agree.
"""

from __future__ import annotations

import re

# The longest escape sequence removed as one, introducer included.
MAX_SEQUENCE = 512

_ESC = "\x1b"
# Characters that start a sequence or are dropped (C0 but \t and \n, DEL, C1, bidi embeddings,
# overrides and isolates), and lone surrogates (replaced).
_SPECIAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
_CSI_BODY = re.compile("[\x30-\x3f]*[\x20-\x2f]*")
_INTERMEDIATES = re.compile("[\x20-\x2f]*")
# Up to a control character.
_STRING_BODY = re.compile("[^\x00-\x1f\x7f-\x9f]*")
# ESC + one of these opens a string sequence (OSC, DCS, SOS, PM, APC).
_STRING_ESC = "]PX^_"
# The same as C1 characters (OSC first).
_C1_STRINGS = "\x9d\x90\x98\x9e\x9f"

_INCOMPLETE = -1  # the text ends before the sequence does
_BROKEN = -2  # not a sequence: drop the introducer alone


def _run_end(pattern: re.Pattern[str], text: str, at: int, endpos: int) -> int:
    """Where the run of ``pattern`` (which matches the empty string too) from ``at`` ends."""
    match = pattern.match(text, at, endpos)
    assert match is not None
    return match.end()


def _csi_end(text: str, start: int, at: int, endpos: int) -> int:
    n = len(text)
    end = _run_end(_CSI_BODY, text, at, endpos)
    if end < n and end < endpos:
        return end + 1 if "\x40" <= text[end] <= "\x7e" else _BROKEN
    return _INCOMPLETE if end == n and n - start < MAX_SEQUENCE else _BROKEN


def _string_end(text: str, start: int, at: int, endpos: int, bel: bool) -> int:
    n = len(text)
    end = _run_end(_STRING_BODY, text, at, endpos)
    if end < n and end < endpos:
        ch = text[end]
        if ch == "\x9c" or (bel and ch == "\x07"):
            return end + 1
        if ch != _ESC:
            return _BROKEN
        if end + 1 < n:
            return end + 2 if text[end + 1] == "\\" and end + 2 - start <= MAX_SEQUENCE else _BROKEN
        # ESC last: ST may follow in the next piece
    return _INCOMPLETE if n - start < MAX_SEQUENCE else _BROKEN


def _sequence_end(text: str, start: int) -> int:
    """Where the sequence that ``text[start]`` introduces ends (the index after it),
    ``_INCOMPLETE`` or ``_BROKEN``."""
    n = len(text)
    # A complete sequence ends by here.
    endpos = min(n, start + MAX_SEQUENCE)
    ch = text[start]
    if ch == _ESC:
        if start + 1 >= n:
            return _INCOMPLETE
        kind = text[start + 1]
        if kind == "[":
            return _csi_end(text, start, start + 2, endpos)
        if kind in _STRING_ESC:
            return _string_end(text, start, start + 2, endpos, bel=kind == "]")
        end = _run_end(_INTERMEDIATES, text, start + 1, endpos)
        if end < n and end < endpos:
            return end + 1 if "\x30" <= text[end] <= "\x7e" else _BROKEN
        return _INCOMPLETE if end == n and n - start < MAX_SEQUENCE else _BROKEN
    if ch == "\x9b":
        return _csi_end(text, start, start + 1, endpos)
    return _string_end(text, start, start + 1, endpos, bel=ch == "\x9d")


def _is_introducer(ch: str) -> bool:
    return ch == _ESC or ch == "\x9b" or ch in _C1_STRINGS


class Sanitizer:
    """Sanitizes a stream piece by piece: ``feed`` each piece, ``flush`` at the end."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        # An escape sequence begun but not finished.
        self._pending = ""

    def feed(self, text: str) -> str:
        """What of ``text`` can be shown now (an unfinished sequence waits for the next piece)."""
        if self._pending:
            text, self._pending = self._pending + text, ""
        elif text.isprintable():
            # Fast path: most pieces are plain text.
            return text
        return self._scan(text, final=False)

    def flush(self) -> str:
        """The end of the stream: what was held back, less the introducer of the unfinished
        sequence."""
        text, self._pending = self._pending, ""
        return self._scan(text, final=True) if text else ""

    def _scan(self, text: str, final: bool) -> str:
        out: list[str] = []
        at, n = 0, len(text)
        while at < n:
            match = _SPECIAL.search(text, at)
            if match is None:
                out.append(text[at:])
                break
            start = match.start()
            out.append(text[at:start])
            # A lone control character, or the introducer of a broken sequence.
            at = start + 1
            if "\ud800" <= text[start] <= "\udfff":
                out.append(REPLACEMENT)
            elif _is_introducer(text[start]):
                end = _sequence_end(text, start)
                if end >= 0:
                    at = end
                elif end == _INCOMPLETE and not final:
                    self._pending = text[start:]
                    break
        return "".join(out)


def sanitize(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (keeps ``\\n``
    and ``\\t``): what a ``Sanitizer`` fed the whole text shows."""
    if text.isprintable():
        return text
    sanitizer = Sanitizer()
    return sanitizer.feed(text) + sanitizer.flush()


def replace_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (U+D800-U+DFFF) replaced by U+FFFD, and nothing
    else changed: text that stays raw (``--raw``) but must still encode as UTF-8."""
    if text.isascii():
        return text
    return _SURROGATES.sub(REPLACEMENT, text)


# A token's characters that are shown escaped (``escaped_token``): those ``sanitize`` drops (C0,
# DEL, C1, bidi controls) and the backslash itself, so that an escape cannot be forged.
_TOKEN_SPECIAL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\\\\]")
_TOKEN_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    named = _TOKEN_NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def escaped_token(data: bytes) -> str:
    """One token's bytes as safe, printable text (the token lens, ``run --logprobs``): valid
    UTF-8 as its characters, each byte that is not (a token that holds part of a character, a
    byte-fallback token) as ``\\xNN``, a control character, a bidi control or a backslash
    escaped (``\\n``, ``\\x1b``, ``\\u202e``, ``\\\\``). Never raw: nothing in it is obeyed by a
    terminal, and two different tokens never look the same."""
    out: list[str] = []
    rest = data
    while rest:
        try:
            out.append(_TOKEN_SPECIAL.sub(_escape_char, rest.decode("utf-8")))
            break
        except UnicodeDecodeError as exc:
            good = rest[: exc.start].decode("utf-8")
            out.append(_TOKEN_SPECIAL.sub(_escape_char, good))
            out.extend(f"\\x{b:02x}" for b in rest[exc.start : exc.end])
            rest = rest[exc.end :]
    return "".join(out)
