"""The status bar: fits 80 columns (fields dropped whole, in a fixed order) and follows the
reply that streams now (its tokens, speed and context so far, never an earlier reply's
figures). Pilot tests on the real app with scripted backends, and one on the real starter
model."""

from __future__ import annotations

import dataclasses
import re
import threading

import pytest
from textual.geometry import Region

from fakes import INFO, RecordingBackend, send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.chat_state import LiveReply
from vibechat.app.tui.conversation.reply_stream import RATE_AFTER_S, ReplyCount
from vibechat.app.tui.widgets.status_bar import NAME_MIN, PRIORITY, StatusBar
from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone, TextDelta, ThinkingDelta

LONG_NAME = "Meta-Llama-3.1-8B-Instruct-abliterated-with-a-long-name"
FINAL_RATE = 4242.0  # the scripted replies' final speed: no live figure can show it
COUNT = re.compile(r"(~?)([\d,]+) tok\b")
CONTEXT = re.compile(r"ctx (~?)([\d,]+)/")


class Scripted(RecordingBackend):
    """Streams its reply one word a step, each step released by the test while ``held``;
    ``exact``: says its token count (two tokens a piece: not the pieces) as the local
    engine does, else the front end counts pieces."""

    def __init__(self, reply: str, exact: bool = False, info=INFO) -> None:
        super().__init__(reply, info=info)
        self.exact = exact
        self.held = False
        self.step = threading.Semaphore(0)

    def stream_chat(self, messages, params):
        pieces = 0
        for event in super().stream_chat(messages, params):
            if isinstance(event, (TextDelta, ThinkingDelta)):
                if self.held:
                    self.step.acquire(timeout=60)
                pieces += 1
                if self.exact:
                    event = dataclasses.replace(event, tokens=2 * pieces)
            elif isinstance(event, GenerationDone):
                stats = dataclasses.replace(
                    event.stats,
                    decode_tokens_per_s=FINAL_RATE,
                    completion_tokens=2 * pieces if self.exact else pieces,
                )
                event = dataclasses.replace(event, stats=stats)
            yield event


def bar_line(app) -> str:
    """The status bar's line as the screen shows it."""
    bar = app.status
    strips = bar.render_lines(Region(0, 0, bar.outer_size.width, 1))
    return "".join(piece.text for piece in strips[0])


def recording_live(monkeypatch) -> list[tuple[str, bool, bool]]:
    """The bar each time its live figures change: (line, a reply streaming, stats shown)."""
    seen: list[tuple[str, bool, bool]] = []

    def watch_live(self, value) -> None:
        if value is not None and value.tokens:
            seen.append((self.render().plain, self.app.generating, self.stats is not None))

    monkeypatch.setattr(StatusBar, "watch_live", watch_live, raising=False)
    return seen


async def until(pilot, condition, what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"timed out waiting for {what}: {bar_line(pilot.app)!r}")


# ----------------------------------------------------------------- the count
def test_the_count_is_the_backends_when_it_says_else_the_pieces_and_the_speed_needs_time():
    now = [100.0]
    count = ReplyCount(clock=lambda: now[0])
    assert count.live() == LiveReply(0, 0.0, True)
    count.piece()
    now[0] += RATE_AFTER_S / 2
    count.piece()
    assert count.live() == LiveReply(2, 0.0, True)  # too soon to say a speed
    now[0] += RATE_AFTER_S / 2
    count.piece()
    assert count.live() == LiveReply(
        3, pytest.approx(2 / RATE_AFTER_S), True
    )  # pieces: an estimate
    now[0] += RATE_AFTER_S
    assert count.live() == LiveReply(3, pytest.approx(1 / RATE_AFTER_S), True)  # stalled: slower

    exact = ReplyCount(clock=lambda: now[0])
    exact.told(3)  # the local engine: the count comes with the piece
    exact.piece()
    now[0] += 1.0
    exact.piece(9)  # a thinking piece with its count
    assert exact.live() == LiveReply(9, pytest.approx(6.0), False)


# ------------------------------------------------------------------ fitting
def fields_of(line: str) -> list[str]:
    """The fields on the left of a bar's line (the state is on the right, after 2+ spaces)."""
    left = line.strip().rsplit("  ", 1)[0].strip() if "  " in line.strip() else ""
    return left.split(" · ") if left else []


KINDS = {
    "ctx": "context",
    "ttft": "ttft",
    "compare:": "compare",
    "format": "format",
    "think": "think",
    "lens": "lens",
    "budget": "budget",
    "CPU": "device",
    "KV": "kv_cache",
}


def kinds_of(parts: list[str]) -> set[str]:
    """Which fields of ``PRIORITY`` the parts are."""
    kept = set()
    for part in parts:
        if part.endswith("tok/s"):
            kept.add("speed")
        elif COUNT.fullmatch(part.split(" (")[0]):
            kept |= {"tokens", "thinking"} if "thinking" in part else {"tokens"}
        elif part.startswith("draft Tiny"):
            kept.add("draft_model")
        elif part.split(" ")[0] in KINDS:
            kept.add(KINDS[part.split(" ")[0]])
        else:
            kept |= {"model", "quantization"} if part.endswith(" Q4_K_M") else {"model"}
    return kept


async def test_at_80_columns_the_state_and_context_stay_and_fields_drop_whole_in_priority_order():
    info = dataclasses.replace(
        INFO, name=LONG_NAME, draft_model="Tiny 0.1B", draft_model_bytes=90 << 20
    )
    backend = Scripted("one two three four five", info=info)
    backend.thinking = "hmm let me see"
    params = SamplingParams(thinking="off", think_budget=512, logprobs=10)
    app = create_app(backend, params=params, blink=False)
    async with app.run_test(size=(300, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "/format json")
        await send(pilot, "Count to five")
        await send(pilot, "/compare temperature=1.2")  # armed for the next prompt
        assert app.status.stats is not None
        full = fields_of(bar_line(app))  # every field, as shown where there is room
        assert full[0] == f"{LONG_NAME} Q4_K_M" and f"{FINAL_RATE:.1f} tok/s" in full
        present = kinds_of(full)
        assert present == set(PRIORITY) - {"draft"}  # all but live drafting, for this reply
        order = [key for key in PRIORITY if key in present]
        # A field that sticks to another (the quantization to the name, the thinking share
        # to the count) may go without it.
        whole = (
            set(full)
            | {part.split(" (")[0] for part in full}
            | {part.removesuffix(" Q4_K_M") for part in full}
        )
        for width in (200, 120, 100, 90, 80, 60, 40, 24):
            await pilot.resize_terminal(width, 24)
            await pilot.pause()
            line = bar_line(app)
            assert len(line) == width and line.rstrip().endswith("ready"), (width, line)
            parts = fields_of(line)
            for part in parts:  # whole fields; only the name may be shortened, with an ellipsis
                name = part.split(" ")[0]
                assert part in whole or (
                    name.endswith("…") and LONG_NAME.startswith(name[:-1]) and len(name) >= NAME_MIN
                ), (width, part)
            kept = kinds_of(parts)
            assert kept == set(order[: len(kept)]), (width, kept)  # the most important ones
            if width >= 80:
                assert {"context", "model", "speed", "tokens"} <= kept, (width, line)
            if width >= 24:
                assert "context" in kept, (width, line)


async def test_a_long_state_is_shortened_never_wrapped():
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(40, 24)) as pilot:
        await settle(pilot)
        app.status.state = "loading " + "a-very-long-model-name-" * 4 + "…"
        await pilot.pause()
        line = bar_line(app)
        assert len(line) == 40 and line.rstrip().endswith("…") and "ctx" not in line


# ------------------------------------------------------------------- live
@pytest.mark.parametrize("exact", [False, True])
async def test_while_a_reply_streams_the_bar_shows_its_own_tokens_speed_and_context(
    monkeypatch, exact
):
    """The scripted reply streams a word at a time: the bar says 'generating', a count that
    grows with each word (the backend's, or ``~`` pieces where it does not count), the
    context filling, and never the previous reply's speed or time to first token; when the
    reply ends, its own final stats."""
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    backend = Scripted(" ".join(words), exact=exact)
    seen = recording_live(monkeypatch)
    app = create_app(backend, blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "first question")
        line = bar_line(app)
        assert f"{FINAL_RATE:.1f} tok/s" in line and "ready" in line
        seen.clear()

        backend.held = True
        app.prompt_input.load_text("second question")
        await pilot.press("enter")
        await until(pilot, lambda: "generating" in bar_line(app), "the reply to start")
        assert f"{FINAL_RATE:.1f}" not in bar_line(app) and "ttft" not in bar_line(app)
        counts, contexts = [], []
        for n in range(1, len(words)):  # (the last word ends the reply)
            backend.step.release()
            want = f"{2 * n if exact else n} tok"
            await until(
                pilot,
                lambda want=want: re.search(rf"(^|[ ~]){want}", bar_line(app)) is not None,
                want,
            )
            line = bar_line(app)
            assert (
                "generating…" in line and f"{FINAL_RATE:.1f}" not in line and "ttft" not in line
            ), line
            count, context = COUNT.search(line), CONTEXT.search(line)
            assert count is not None and context is not None, line
            assert (count.group(1) == "~") is not exact and (context.group(1) == "~") is not exact
            counts.append(int(count.group(2).replace(",", "")))
            contexts.append(int(context.group(2).replace(",", "")))
        backend.step.release()
        await settle(pilot)
        assert counts == sorted(counts) and counts[-1] > counts[0]
        prompt = contexts[0] - counts[0]  # the context is the prompt + the count
        assert [c - n for c, n in zip(contexts, counts, strict=True)] == [prompt] * len(counts)
        # Every live update, not only those the test looked at: this reply's figures only.
        assert seen and all(streaming and not stats_shown for _, streaming, stats_shown in seen)
        assert not any(f"{FINAL_RATE:.1f}" in text or "ttft" in text for text, _, _ in seen)
        line = bar_line(app)
        assert f"{FINAL_RATE:.1f} tok/s" in line and "ready" in line and "~" not in line
        assert f"{app.status.stats.completion_tokens} tok" in line
        assert app.status.live is None


async def test_the_thinking_counts_while_it_streams(monkeypatch):
    backend = Scripted("the answer", exact=True)
    backend.thinking = "first I think about it"
    seen = recording_live(monkeypatch)
    app = create_app(backend, blink=False)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        backend.held = True
        app.prompt_input.load_text("think first")
        await pilot.press("enter")
        for n in range(1, 4):
            backend.step.release()
            await until(
                pilot, lambda n=n: f" {2 * n} tok" in bar_line(app), f"{2 * n} tokens of thinking"
            )
        assert app.generating and "generating…" in bar_line(app)
        for _ in range(10):
            backend.step.release()
        await settle(pilot)
        assert seen and all(streaming for _, streaming, _ in seen)


async def test_a_failed_reply_leaves_no_live_figures_and_no_earlier_stats(monkeypatch):
    class Failing(Scripted):
        def stream_chat(self, messages, params):
            if len(self.requests) >= 1:
                self.requests.append((list(messages), params))
                yield TextDelta("half")
                raise VibechatError("the engine stopped")
            yield from super().stream_chat(messages, params)

    app = create_app(Failing("a full reply"), blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "first")
        assert f"{FINAL_RATE:.1f} tok/s" in bar_line(app)
        await send(pilot, "second")
        line = bar_line(app)
        assert app.status.live is None and "tok" not in line and "ready" in line


# -------------------------------------------------------------- the real model
@pytest.mark.model
async def test_the_bar_follows_a_reply_of_the_real_model(backend, monkeypatch):
    """The starter model through the app at 80 columns: while each reply streams, the bar
    shows its exact token count (the engine's), growing, with the context it fills; never
    the earlier reply's stats; at the end, the reply's own."""
    seen = recording_live(monkeypatch)
    app = create_app(
        backend, params=SamplingParams(temperature=0, max_tokens=40, seed=1), blink=False
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "ready" in bar_line(app) and "ctx " in bar_line(app)
        finals = []
        for prompt in ("Count from one to twenty.", "Name some colours."):
            seen.clear()
            await send(pilot, prompt)
            stats = app.status.stats
            assert stats is not None and stats.completion_tokens > 0
            assert seen and all(
                streaming and not stats_shown for _, streaming, stats_shown in seen
            ), seen
            counts = []
            for text, _, _ in seen:
                assert "generating…" in text and "ttft" not in text and "ctx " in text, text
                count = COUNT.search(text)
                assert count is not None and count.group(1) == "", text  # the engine's count: exact
                counts.append(int(count.group(2).replace(",", "")))
            assert counts == sorted(counts) and counts[-1] <= stats.completion_tokens
            line = bar_line(app)
            assert "ready" in line and "ctx " in line and f"{stats.completion_tokens} tok" in line
            finals.append(stats)
        assert finals[0] is not finals[1]


async def test_while_a_reply_thinks_the_bar_shows_its_thinking_tokens_against_the_budget():
    """/think budget N: the bar says the budget, and while the reply thinks its thinking tokens
    against it (issue 45); once the answer streams, the budget alone again."""
    backend = Scripted("the answer", exact=True)
    backend.thinking = "first I think about it"
    app = create_app(backend, blink=False)
    async with app.run_test(size=(120, 24), notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/think budget 512")
        assert "budget 512" in bar_line(app)
        backend.held = True
        app.prompt_input.load_text("think first")
        await pilot.press("enter")
        for n in range(1, 4):
            backend.step.release()
            await until(
                pilot, lambda n=n: f"thinking {2 * n}/512" in bar_line(app), f"{2 * n} of 512"
            )
        for _ in range(3):
            backend.step.release()
        await until(pilot, lambda: "thinking " not in bar_line(app), "the answer")
        for _ in range(10):
            backend.step.release()
        await settle(pilot)
        assert "budget 512" in bar_line(app) and "thinking 1" not in bar_line(app)
