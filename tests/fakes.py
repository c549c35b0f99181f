"""Test doubles for unit and Pilot tests (the real model is exercised elsewhere)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence

from vibechat.engine.sanitize import escaped_token
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    Candidate,
    ChatEvent,
    ChatMessage,
    GenerationDone,
    GenerationStats,
    LensNotice,
    ModelInfo,
    ReplyPrefix,
    Side,
    SideEvent,
    SideRequest,
    TextDelta,
    ThinkingDelta,
    TokenCandidates,
)

INFO = ModelInfo(
    name="Fake 1B",
    path="/models/fake.gguf",
    architecture="llama",
    quantization="Q4_K_M",
    trained_context=4096,
    context_size=4096,
    n_layers=16,
    gpu_layers=0,
    gpu_offload_supported=False,
    chat_format="gguf",
    file_size=1,
    n_threads=2,
    kv_cache_bytes=64 << 20,
)


class RecordingBackend:
    """Replies with a scripted text, one word per delta, and records every call.

    ``thinking``: when set, streamed first as ``ThinkingDelta``s, one word each (a
    reasoning model). ``gate``: when set, each delta waits for it (lets a test stop a
    reply midway). A reply prefix (``prefix``) is recorded, not continued."""

    name = "fake"

    def __init__(
        self, reply: str = "Hello **there**! Here is `code`.", info: ModelInfo = INFO
    ) -> None:
        self.reply = reply
        self.thinking = ""
        self.info = info
        self.requests: list[tuple[list[ChatMessage], SamplingParams]] = []
        self.resets = 0
        self.prefills: list[list[ChatMessage]] = []
        self.cached: list[ChatMessage] = []
        self.gate: threading.Event | None = None
        self.started = threading.Event()
        # Tools: each request offered tools takes the next scripted list of calls (a reply that
        # asks for them) while any is left; every request's (tools, tool_choice) is recorded.
        self.tool_script: list[list] = []
        self.offered: list[tuple[tuple, str]] = []
        # Each request's reply prefix (another path from a token; None: a plain reply).
        self.prefixes: list[ReplyPrefix | None] = []
        self._cancel = threading.Event()
        self.loaded = False

    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        if on_progress:
            on_progress(1.0)
        self.loaded = True
        return self.info

    def describe(self) -> ModelInfo:
        return self.info

    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        self.resets += 1
        self.cached = []

    def prefill(
        self, messages: Sequence[ChatMessage], thinking: str = "auto", tools: Sequence = ()
    ) -> int:
        self.prefills.append(list(messages))
        self.cached = list(messages)
        return self.count_tokens(messages)

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        return sum(len(m.content.split()) + 4 for m in messages)

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Generator[ChatEvent, None, None]:
        self._cancel.clear()
        messages = list(messages)
        self.requests.append((messages, params))
        self.prefixes.append(prefix)
        self.offered.append((tuple(tools), tool_choice))
        if (
            tools and tool_choice != "none" and self.tool_script
        ):  # a scripted reply that asks for tool calls
            calls = tuple(self.tool_script.pop(0))
            self.started.set()
            yield GenerationDone(
                text="",
                stats=GenerationStats(finish_reason="tool_calls", seed=7),
                params=params.with_seed(),
                tool_calls=calls,
            )
            return
        prompt = self.count_tokens(messages)
        keep = 0
        while keep < min(len(self.cached), len(messages)) and self.cached[keep] == messages[keep]:
            keep += 1
        evaluated = prompt - self.count_tokens(messages[:keep])
        self.cached = messages
        self.started.set()
        words = self.reply.split(" ")
        out: list[str] = []
        thought: list[str] = []
        finish = "stop"
        pieces = [(True, w) for w in self.thinking.split(" ")] if self.thinking else []
        for i, (thinking, word) in enumerate([*pieces, *((False, w) for w in words)]):
            if self.gate is not None:
                self.gate.wait(5)
            if self._cancel.is_set():
                finish = "cancelled"
                break
            first = i == 0 if thinking else not out
            piece = word if first else " " + word
            if thinking:
                thought.append(piece)
                yield ThinkingDelta(piece)
                continue
            out.append(piece)
            yield TextDelta(piece)
        stats = GenerationStats(
            prompt_tokens=prompt,
            prompt_tokens_evaluated=evaluated,
            prompt_eval_ms=12.0,
            completion_tokens=len(out) + len(thought),
            ttft_ms=34.0,
            decode_ms=100.0,
            decode_tokens_per_s=42.0,
            finish_reason=finish,
            seed=params.seed or 7,
        )
        yield GenerationDone(
            text="".join(out), stats=stats, params=params.with_seed(), thinking="".join(thought)
        )

    def close(self) -> None:
        pass


class OnePieceAtATime(RecordingBackend):
    """Each piece of the reply waits for a ``step`` the test releases (bounded: 120 s)."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.step = threading.Semaphore(0)

    def stream_chat(self, messages, params):
        for event in super().stream_chat(messages, params):
            if isinstance(event, TextDelta):
                self.step.acquire(timeout=120)
            yield event


# A lens step's fixed candidates (``LensBackend``): the token's own bytes first, then these.
LENS_OTHERS = (b" a", b" the", b"\xe2\x80", b"\x1b[2J", b" maybe", b"!", b" so", b".", b" no")
LENS_LOGPROBS = (-0.2, -1.9, -2.6, -3.0, -3.5, -4.1, -4.8, -5.5, -6.0, -7.2)


def lens_step(
    index: int, data: bytes, sliders=(("temperature", 1.0),), ids: bool = False
) -> TokenCandidates:
    """A step of the token lens with fixed candidates: ``data`` chosen at rank 1, then
    ``LENS_OTHERS`` (a partial UTF-8 character and an escape sequence among them: shown
    escaped). ``ids``: the candidates have token ids (a local engine's: 1000 × step + rank);
    else none (a server's)."""
    datas = (data, *(d for d in LENS_OTHERS if d != data))[: len(LENS_LOGPROBS)]
    top = tuple(
        Candidate(1000 * index + rank if ids else -1, d, escaped_token(d), lp, 0.0)
        for rank, (d, lp) in enumerate(zip(datas, LENS_LOGPROBS, strict=False))
    )
    return TokenCandidates(index=index, chosen=top[0], top=top, sliders=tuple(sliders))


class LensBackend(RecordingBackend):
    """A recording backend whose words each come with a token-lens step (``lens_step``) while
    the request asks for the lens (``logprobs`` > 0); ``notice``: instead, one ``LensNotice``
    (a server without logprobs). ``steps``: every step sent; ``ids``: its candidates have token
    ids (a local engine's), so another path can be taken from them."""

    def __init__(
        self,
        reply: str = "Hello there friend",
        notice: str = "",
        ids: bool = False,
        info: ModelInfo = INFO,
    ) -> None:
        super().__init__(reply, info)
        self.notice = notice
        self.ids = ids
        self.steps: list[TokenCandidates] = []

    def stream_chat(self, messages, params, tools=(), tool_choice="auto", prefix=None):
        index = 0
        for event in super().stream_chat(messages, params, tools, tool_choice, prefix):
            if isinstance(event, TextDelta) and params.logprobs and not self.notice:
                step = lens_step(index, event.text.encode("utf-8"), ids=self.ids)
                self.steps.append(step)
                index += 1
                yield step
            elif isinstance(event, GenerationDone) and params.logprobs and self.notice:
                yield LensNotice(self.notice)
            yield event


class PairedFake(RecordingBackend):
    """A recording double that also answers two at once (``PairedReplies``): side A says
    ``reply``, side B ``reply_b``, a word of each per step (``gate``: each step waits for it).
    Every pair's two requests are recorded in ``pairs``; ``cancel_side`` stops one side.
    ``side_calls``: the tool calls a side offered tools ends with (its text said first); a
    side's continuation after its round is a plain ``stream_chat`` (``reply``)."""

    def __init__(self, reply: str = "alpha words here", reply_b: str = "beta words there") -> None:
        super().__init__(reply)
        self.reply_b = reply_b
        self.side_calls: dict[str, tuple] = {}
        self.pairs: list[tuple[SideRequest, SideRequest]] = []
        self.side_stops: set[str] = set()

    def cancel_side(self, side: Side) -> None:
        self.side_stops.add(side)

    def stream_pair(self, a: SideRequest, b: SideRequest) -> Generator[SideEvent, None, None]:
        self._cancel.clear()
        self.side_stops = set()
        self.pairs.append((a, b))
        self.started.set()
        words: dict[Side, list[str]] = {"A": self.reply.split(" "), "B": self.reply_b.split(" ")}
        out: dict[Side, list[str]] = {"A": [], "B": []}
        live: list[Side] = ["A", "B"]
        requests = {"A": a, "B": b}
        while live:
            if self.gate is not None:
                self.gate.wait(5)
            for side in list(live):
                stopped = self._cancel.is_set() or side in self.side_stops
                if stopped or len(out[side]) == len(words[side]):
                    live.remove(side)
                    calls = (
                        () if stopped or not requests[side].tools else self.side_calls.get(side, ())
                    )
                    finish = "cancelled" if stopped else "tool_calls" if calls else "stop"
                    stats = GenerationStats(
                        completion_tokens=len(out[side]),
                        ttft_ms=30.0,
                        decode_tokens_per_s=40.0,
                        finish_reason=finish,
                        seed=7,
                    )
                    done = GenerationDone(
                        "".join(out[side]),
                        stats,
                        requests[side].params.with_seed(),
                        tool_calls=tuple(calls),
                    )
                    yield SideEvent(side, done)
                    continue
                piece = (" " if out[side] else "") + words[side][len(out[side])]
                out[side].append(piece)
                yield SideEvent(side, TextDelta(piece))


async def send(pilot, text: str, wait: bool = True) -> None:
    """Type ``text`` in the prompt and press Enter; ``wait``: until the app is idle again."""
    pilot.app.prompt_input.load_text(text)
    await pilot.press("enter")
    if wait:
        await settle(pilot)


async def settle(pilot) -> None:
    """Wait until the app is idle: workers done and the last reply rendered (replies
    render at a capped rate, so the final text can land shortly after the worker ends)."""
    app = pilot.app
    await app.workers.wait_for_complete()
    for _ in range(500):
        if not app.generating:
            break
        await pilot.pause(0.02)
    await pilot.pause()
    await pilot.pause()


def split_stream(splitter, pieces: list[str]) -> tuple[str, str, int]:
    """Feeds ``pieces`` to a thinking/answer splitter (engine/turns/thinking.py,
    engine/turns/harmony.py): the thinking, the answer, and the most text it ever held back. No
    piece may be empty."""
    thinking, answer, most_held = [], [], 0
    for piece in pieces:
        for is_thinking, text in splitter.feed(piece):
            assert text
            (thinking if is_thinking else answer).append(text)
        most_held = max(most_held, len(splitter._held))
    for is_thinking, text in splitter.flush():
        (thinking if is_thinking else answer).append(text)
    return "".join(thinking), "".join(answer), most_held


async def open_picker(pilot):
    """F3, and the model picker once it has listed the models."""
    from vibechat.app.tui.screens.model_picker import ModelPicker

    await pilot.press("f3")
    picker = pilot.app.screen
    assert isinstance(picker, ModelPicker)
    await picker.workers.wait_for_complete()
    await pilot.pause()
    return picker
