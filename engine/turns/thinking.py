"""Reasoning ("thinking") kept apart from the answer.

Reasoning models write their thinking before the answer in one of these shapes:

* **inline tags**: ``<think>…</think>`` then the answer, in the generated text itself
  (Qwen3, QwQ, DeepSeek-R1 and its distills, and servers that pass the text through
  as it is). The tags arrive split anywhere across streamed pieces.
* **the template opens the block**: the chat template's generation prompt already ends
  with ``<think>`` (DeepSeek-R1's distills, some Qwen3 variants), so the reply starts
  *inside* the thinking and only ``</think>`` appears in the generated text. The local
  engine finds this by rendering the template's generation prompt
  (:func:`opens_thinking`).
* **gpt-oss's harmony channels** (``<|channel|>analysis<|message|>…``): not tags but
  messages; engine/turns/harmony.py has their splitter, with the same face as this one.
* **a separate field**: ``delta.reasoning_content`` (llama-server's default reasoning
  format, vLLM, the DeepSeek API) or ``delta.reasoning`` (OpenRouter, newer vLLM); the
  remote backend reads those itself and never needs the splitter for them.

:class:`ThinkingSplitter` turns a stream of text pieces into thinking and answer pieces:

* ``<think>`` opens a block only at the very start of the reply (after optional
  whitespace); anywhere later it is answer text (a model explaining the tag, a code
  sample), and so is a second block after the answer has begun. ``</think>`` closes the
  block; the whitespace right after it (models write ``</think>\\n\\n``) is dropped.
* a block that never closes (the reply hit max_tokens or was stopped while thinking) is
  all thinking: the answer is empty.
* buffering is bounded: at most ``len("</think>") - 1`` characters of a possible tag are
  held back while thinking, and at most ``MAX_LEADING`` characters of leading whitespace
  (plus the part of ``<think>`` seen so far) at the start; ``flush`` releases what is held.

Nothing here sanitizes: thinking is model output like the answer, and each front end
sanitizes it before a terminal or a file, like the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .backend import ChatMessage

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
# Whitespace before <think> that is still "the start of the reply".
MAX_LEADING = 256

_START, _THINKING, _AFTER_CLOSE, _ANSWER = range(4)

Piece = tuple[bool, str]  # (is thinking, text)


class StreamSplitter:
    """What a splitter of streamed text into thinking and answer does with its pieces: text
    that may begin a marker is held back until the next piece (or the end) says what it is.
    Subclasses set ``_state`` and write ``_step``."""

    __slots__ = ("_state", "_held")

    def __init__(self, state: int) -> None:
        self._state = state
        self._held = ""

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        if text:
            self._step(self._held + text, out, final=False)
        return out

    def flush(self) -> list[Piece]:
        """The end of the stream: what was held back."""
        out: list[Piece] = []
        held, self._held = self._held, ""
        if held:
            self._step(held, out, final=True)
        return out

    @property
    def thinking(self) -> bool:
        """Whether the stream is inside thinking now."""
        raise NotImplementedError

    @property
    def in_call(self) -> bool:
        """Whether the stream is inside a tool call's text now (harmony's message to a tool)."""
        return False

    def _step(self, text: str, out: list[Piece], final: bool) -> None:
        raise NotImplementedError


class ThinkingSplitter(StreamSplitter):
    """Splits a reply's pieces into thinking and answer (see the module doc).

    ``inside``: the reply starts inside the thinking block (the generation prompt opened
    it). ``feed`` and ``flush`` return ``(is_thinking, text)`` pieces, never empty ones;
    joined, the thinking pieces are the block's content and the answer pieces the rest."""

    __slots__ = ()

    def __init__(self, inside: bool = False) -> None:
        super().__init__(_THINKING if inside else _START)

    @property
    def thinking(self) -> bool:
        """Whether the stream is inside the thinking block now."""
        return self._state == _THINKING

    def _step(self, text: str, out: list[Piece], final: bool) -> None:
        self._held = ""
        # Each state either consumes text and moves to a later state, or returns: the loop
        # runs at most once per state (bounded).
        while text:
            state = self._state
            if state == _START:
                stripped = text.lstrip()
                if len(text) - len(stripped) > MAX_LEADING:
                    # Not "the start of the reply" any more.
                    self._state = _ANSWER
                    continue
                if stripped.startswith(OPEN_TAG):
                    self._state, text = _THINKING, stripped[len(OPEN_TAG) :]
                    continue
                if not final and OPEN_TAG.startswith(stripped):
                    # Whitespace and maybe the start of <think>: wait.
                    self._held = text
                    return
                self._state = _ANSWER
                continue
            if state == _THINKING:
                at = text.find(CLOSE_TAG)
                if at >= 0:
                    if at:
                        out.append((True, text[:at]))
                    self._state, text = _AFTER_CLOSE, text[at + len(CLOSE_TAG) :]
                    continue
                keep = 0 if final else partial_suffix(text, (CLOSE_TAG,))
                if len(text) > keep:
                    out.append((True, text[: len(text) - keep]))
                self._held = text[len(text) - keep :]
                return
            if state == _AFTER_CLOSE:
                text = text.lstrip()
                if not text:
                    return
                self._state = _ANSWER
                continue
            out.append((False, text))
            return


def partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that begins one of ``markers``
    (shorter than it)."""
    longest = max(len(m) for m in markers) - 1
    for n in range(min(longest, len(text)), 0, -1):
        end = text[-n:]
        if any(m.startswith(end) for m in markers):
            return n
    return 0


def split_text(text: str, inside: bool = False) -> tuple[str, str]:
    """``(thinking, answer)`` of a whole reply."""
    splitter = ThinkingSplitter(inside)
    pieces = splitter.feed(text) + splitter.flush()
    return (
        "".join(t for thinking, t in pieces if thinking),
        "".join(t for thinking, t in pieces if not thinking),
    )


def opens_thinking(generation_prompt_tail: str) -> bool:
    """Whether a rendered prompt's generation prompt leaves the reply inside a thinking
    block: its tail has an ``<think>`` with no ``</think>`` after it."""
    at = generation_prompt_tail.rfind(OPEN_TAG)
    return at >= 0 and CLOSE_TAG not in generation_prompt_tail[at:]


def template_opens_thinking(render: Callable[[Sequence[ChatMessage], bool], str]) -> bool:
    """Whether a chat template's generation prompt opens the thinking block itself (the
    reply then starts inside it): rendered for one user message with and without the
    generation prompt, the difference is the generation prompt. ``render(messages,
    add_generation_prompt)`` may raise; a template that cannot tell is taken as not
    opening it."""
    probe = [ChatMessage("user", "Hi")]
    try:
        with_prompt = render(probe, True)
        without = render(probe, False)
    except Exception:  # noqa: BLE001 - template code is arbitrary; generation reports real problems
        return False
    tail = with_prompt[len(without) :] if with_prompt.startswith(without) else with_prompt[-200:]
    return opens_thinking(tail)
