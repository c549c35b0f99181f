"""Test doubles for unit and Pilot tests (the real model is exercised elsewhere)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ChatEvent,
    ChatMessage,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    ReplyPrefix,
    TextDelta,
    ThinkingDelta,
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
