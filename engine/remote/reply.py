"""A streamed reply from a server, read into vibechat's terms: its text and its thinking,
its stats, and the check that a structured-output reply is JSON.

Thinking: a reasoning model's ``delta.reasoning_content`` (llama-server's default
reasoning format, vLLM, the DeepSeek API; ``delta.reasoning`` on OpenRouter and newer
vLLM) comes as ``ThinkingDelta``s, and so does an inline ``<think>…</think>`` block at the
start of ``content`` (engine/turns/thinking.py); stop strings apply to the answer only.
Lone surrogates (a JSON ``\\ud800`` escape) become U+FFFD in the reply.

Stats come from the server when it sends them (``usage`` with
``stream_options.include_usage``, llama-server's ``timings``) and are measured here
otherwise: time to first token and tokens/s from the streamed deltas, one delta counted
as one token.
"""

from __future__ import annotations

from typing import Any

from ..errors import RemoteServerError
from ..json_bounds import bounded_loads
from ..sanitize import REPLACEMENT
from ..turns.backend import ChatEvent, GenerationStats, TextDelta, ThinkingDelta
from ..turns.stops import StopMatcher
from ..turns.thinking import ThinkingSplitter
from .client import count, number


class ReplyText:
    """A streamed reply's text: ``reasoning_content`` is thinking; ``content`` goes through
    a ``ThinkingSplitter`` (inline ``<think>`` tags), and its answer pieces through the
    stop strings (which apply to the answer only). Lone surrogates become U+FFFD."""

    def __init__(self, stops: StopMatcher) -> None:
        self.stops = stops
        self.parts: list[str] = []
        self.thinking: list[str] = []
        self._splitter = ThinkingSplitter()
        self._joiner = SurrogateJoiner()
        self._reasoning_joiner = SurrogateJoiner()

    def reasoning(self, text: str) -> list[ChatEvent]:
        return self._events([(True, self._reasoning_joiner.feed(text))])

    def content(self, text: str) -> list[ChatEvent]:
        return self._events(self._splitter.feed(self._joiner.feed(text)))

    def flush(self) -> list[ChatEvent]:
        """The end of the stream: what was held back."""
        events = self._events([(True, self._reasoning_joiner.flush())])
        events += self._events(self._splitter.feed(self._joiner.flush()) + self._splitter.flush())
        return events + self._events([(False, self.stops.flush())], past_stops=True)

    def _events(self, pieces: list[tuple[bool, str]], past_stops: bool = False) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        for thinking, text in pieces:
            if thinking:
                if text and not self.stops.stopped:
                    self.thinking.append(text)
                    events.append(ThinkingDelta(text))
                continue
            text = text if past_stops else self.stops.feed(text)
            if text:
                self.parts.append(text)
                events.append(TextDelta(text))
        return events


class SurrogateJoiner:
    """Reply text without lone surrogates: a pair a server split across two pieces (a
    UTF-16 client-side string sliced between its halves) is joined, any other surrogate
    becomes U+FFFD."""

    __slots__ = ("_high",)

    def __init__(self) -> None:
        # A high surrogate that ended the last piece.
        self._high = ""

    def feed(self, text: str) -> str:
        if self._high:
            text, self._high = self._high + text, ""
        elif text.isascii():
            return text
        if "\ud800" <= text[-1] <= "\udbff":
            text, self._high = text[:-1], text[-1]
        return (
            text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace") if text else ""
        )

    def flush(self) -> str:
        high, self._high = self._high, ""
        return REPLACEMENT if high else ""


def fill_stats(
    stats: GenerationStats,
    prompt_estimate: int,
    deltas: int,
    t_start: float,
    t_first: float,
    t_last: float,
    t_end: float,
    usage: dict[str, Any] | None,
    timings: dict[str, Any] | None,
) -> None:
    """The server's numbers where it sent them, else measured (see the module doc);
    ``prompt_estimate``: the prompt's tokens as the backend estimates them, for a server
    that sends no ``usage``."""
    stats.completion_tokens = deltas
    stats.prompt_tokens = stats.prompt_tokens_evaluated = prompt_estimate
    stats.ttft_ms = (t_first - t_start) * 1000 if t_first else 0.0
    stats.prompt_eval_ms = stats.ttft_ms
    stats.decode_ms = (t_end - t_first) * 1000 if t_first else 0.0
    if deltas > 1 and t_last > t_first:
        stats.decode_tokens_per_s = (deltas - 1) / (t_last - t_first)
    if usage:
        prompt, completion = (
            count(usage.get("prompt_tokens")),
            count(usage.get("completion_tokens")),
        )
        if prompt is not None:
            stats.prompt_tokens = stats.prompt_tokens_evaluated = prompt
            details = usage.get("prompt_tokens_details")
            cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
            if cached:
                stats.prompt_tokens_evaluated = max(0, prompt - cached)
        if completion is not None:
            stats.completion_tokens = completion
    # llama-server's: what the server itself measured.
    if timings:
        evaluated, cached = count(timings.get("prompt_n")), count(timings.get("cache_n"))
        if evaluated is not None:
            stats.prompt_tokens_evaluated = evaluated
            if cached is not None:
                stats.prompt_tokens = evaluated + cached
        for key, attr in (
            ("prompt_ms", "prompt_eval_ms"),
            ("predicted_ms", "decode_ms"),
            ("predicted_per_second", "decode_tokens_per_s"),
        ):
            value = number(timings.get(key))
            if value is not None:
                setattr(stats, attr, value)


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    """The thinking's tokens where the server reports them (OpenAI, vLLM, the DeepSeek API:
    ``usage.completion_tokens_details.reasoning_tokens``)."""
    details = usage.get("completion_tokens_details") if usage else None
    return count(details.get("reasoning_tokens")) if isinstance(details, dict) else None


def past(usage: dict[str, Any] | None, limit: int) -> bool:
    """The server's own running count (some send ``usage`` with every chunk) is past ``limit``."""
    completion = count(usage.get("completion_tokens")) if usage else None
    return completion is not None and completion > limit


def check_json_reply(server: str, text: str) -> None:
    """A server that ignores ``response_format`` answers in free text: say so, rather than
    hand on a reply that is not the JSON asked for."""
    try:
        bounded_loads(text)
    except ValueError:
        raise RemoteServerError(
            f"{server} answered with text that is not JSON: it seems to ignore "
            "response_format (structured output); use the local engine, or a server "
            "that supports it (llama-server, vLLM, OpenAI)."
        ) from None
