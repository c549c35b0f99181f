"""gpt-oss's harmony format: the reply's channels, thinking apart from the answer.

gpt-oss writes its reply as messages, each a header and a body (here one a line; the reply has
no newline between them)::

    <|channel|>analysis<|message|>…thinking…<|end|>
    <|start|>assistant<|channel|>final<|message|>…answer…<|return|>

(the chat template's generation prompt is ``<|start|>assistant``, so the reply begins with
the first ``<|channel|>``). llama.cpp renders ``<|start|>``, ``<|channel|>``,
``<|message|>``, ``<|constrain|>`` and, for this vocabulary, ``<|end|>`` as text; ``<|return|>``
and ``<|call|>`` end the generation.

Found by the template (its source writes ``<|channel|>`` and ``<|message|>``) or the
vocabulary (both are single tokens): :func:`uses_harmony`.

:class:`HarmonySplitter` routes each message's body by its channel:

* ``final`` (and a message with no channel): the answer;
* ``analysis``, ``commentary`` (tool calls, preambles), any other channel, and any message
  addressed to a tool (`` to=…`` in its header): thinking. The answer is only what the
  model meant for the user.

The markers may arrive split anywhere across pieces. Buffering is bounded: at most
``MAX_HEADER`` characters of a header (past that, it is not a header: its text is answer),
and at most the length of the longest marker less one while in a body. A reply that does
not start with a header (a model that ignores the format) is all answer. Nothing here
sanitizes: both kinds of text are model output, and each front end sanitizes them.
"""

from __future__ import annotations

from collections.abc import Callable

from .thinking import Piece, StreamSplitter, partial_suffix

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, RETURN, CALL = "<|end|>", "<|return|>", "<|call|>"
# What ends a message's body, and what starts the next message.
_BODY_ENDS = (END, RETURN, CALL, START, CHANNEL)
_OPENERS = (START, CHANNEL)
# Characters of a header ("assistant<|channel|>commentary to=functions.x <|constrain|>json").
MAX_HEADER = 256
# Whitespace before the first header that is still "the start of the reply".
MAX_LEADING = 256
ANSWER_CHANNELS = ("final",)

_FIRST, _HEADER, _BODY, _BETWEEN = range(4)


def uses_harmony(template_source: str, has_token: Callable[[str], bool] | None = None) -> bool:
    """Whether a model writes harmony's channels: its template writes them, or its
    vocabulary has both markers as tokens."""
    if CHANNEL in template_source and MESSAGE in template_source:
        return True
    return has_token is not None and has_token(CHANNEL) and has_token(MESSAGE)


def channel_is_answer(header: str) -> bool:
    """Whether the message a header opens is the answer: its channel is ``final`` (or it
    names none) and it is not addressed to a tool."""
    at = header.find(CHANNEL)
    if " to=" in header or header.startswith("to="):
        return False
    if at < 0:
        return True
    rest = header[at + len(CHANNEL) :]
    name = rest.split("<|", 1)[0].split(None, 1)[0] if rest.strip() else ""
    return name in ANSWER_CHANNELS


class HarmonySplitter(StreamSplitter):
    """Splits a harmony reply's pieces into thinking and answer (see the module doc); the
    same face as :class:`engine.thinking.ThinkingSplitter`."""

    __slots__ = ("_answer", "_tool")

    def __init__(self) -> None:
        super().__init__(_FIRST)
        # The current body's route, and whether it is addressed to a tool (a call's arguments).
        self._answer = False
        self._tool = False

    @property
    def thinking(self) -> bool:
        """Whether the stream is inside a thinking message's body now."""
        return self._state == _BODY and not self._answer

    @property
    def in_call(self) -> bool:
        """Whether the stream is inside a message to a tool (a call's arguments) now."""
        return self._state == _BODY and self._tool

    # flush (StreamSplitter): a body's held-back text is its own; an unfinished header is
    # protocol, not content (dropped), except at the very start (no harmony: answer).

    def _step(self, text: str, out: list[Piece], final: bool) -> None:
        self._held = ""
        # Each pass consumes a marker (or a header, or whitespace) or returns: bounded by the text.
        while text:
            state = self._state
            if state in (_FIRST, _BETWEEN):
                stripped = text.lstrip()
                if len(text) - len(stripped) > MAX_LEADING:
                    # Not a header: the model ignored the format.
                    self._to_body(True)
                    continue
                if not stripped:
                    if state == _FIRST and not final:
                        self._held = text
                    return
                opener = next((m for m in _OPENERS if stripped.startswith(m)), None)
                if opener is not None:
                    self._state = _HEADER
                    text = stripped[len(START) :] if opener == START else stripped
                    continue
                if not final and any(m.startswith(stripped) for m in _OPENERS):
                    # Maybe the start of a marker: wait.
                    self._held = text
                    return
                # Text with no header: the answer.
                self._to_body(True)
                text = text if state == _FIRST else stripped
                continue
            if state == _HEADER:
                at = text.find(MESSAGE)
                if at >= 0 and at <= MAX_HEADER:
                    header = text[:at]
                    self._to_body(channel_is_answer(header))
                    self._tool = " to=" in header or header.startswith("to=")
                    text = text[at + len(MESSAGE) :]
                    continue
                if len(text) > MAX_HEADER:
                    # No header is this long: it is text (consumed here, so a marker at its start
                    # cannot bring it back).
                    self._to_body(True)
                    out.append((False, text[:MAX_HEADER]))
                    text = text[MAX_HEADER:]
                    continue
                if not final:
                    self._held = text
                # At the end, an unfinished header is dropped.
                return
            # _BODY
            found = [(text.find(m), m) for m in _BODY_ENDS]
            hits = [(at, m) for at, m in found if at >= 0]
            if hits:
                at, marker = min(hits)
                if at:
                    out.append((not self._answer, text[:at]))
                text = text[at + len(marker) :]
                if marker == START:
                    self._state = _HEADER
                elif marker == CHANNEL:
                    self._state, text = _HEADER, CHANNEL + text
                else:
                    self._state = _BETWEEN
                continue
            keep = 0 if final else partial_suffix(text, _BODY_ENDS)
            if len(text) > keep:
                out.append((not self._answer, text[: len(text) - keep]))
            self._held = text[len(text) - keep :]
            return

    def _to_body(self, answer: bool) -> None:
        self._state, self._answer, self._tool = _BODY, answer, False
