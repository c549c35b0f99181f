"""Small pure pieces: thread choice, delta coalescing, slash parsing, conversation edits."""

from __future__ import annotations

import os

import pytest

from vibechat.app import slash
from vibechat.app.tui.conversation.markdown_text import code_blocks, http_links
from vibechat.app.tui.conversation.pacing import (
    BUSY_BUDGET,
    DEBT_INTERVALS,
    FREE_BUDGET,
    HOLD_S,
    FrameHold,
    RenderPacer,
    ui_budget,
)
from vibechat.app.tui.conversation.reply_stream import DeltaBuffer
from vibechat.engine import system
from vibechat.engine.chat.conversation import Conversation


def test_default_threads_stays_within_affinity_and_physical_cores(monkeypatch):
    threads = system.default_threads()
    assert 1 <= threads <= len(os.sched_getaffinity(0))
    monkeypatch.setattr(system, "physical_cores", lambda: 8)
    monkeypatch.setattr(system, "available_cores", lambda: 3)
    assert system.default_threads() == 3
    monkeypatch.setattr(system, "available_cores", lambda: 16)
    assert system.default_threads() == 8


def test_code_blocks_and_links():
    md = "a\n```py\nx = 1\n```\nb [doc](https://a.example/x) and https://b.example/y.\n```\nopen"
    assert code_blocks(md) == ["x = 1\n", "open"]
    assert http_links(md) == ["https://a.example/x", "https://b.example/y"]


def test_delta_buffer_posts_once_per_batch_and_slices_bursts():
    buf = DeltaBuffer()
    assert buf.put("a") is True
    assert buf.put("b") is False  # a post is already pending
    assert buf.take() == ("ab", False)
    assert buf.put("c") is True
    buf.put("line one\n" * 10)
    text, more = buf.take(30)
    assert more and text.endswith("\n") and len(text) <= 30
    rest, more = buf.take()
    assert text + rest == "c" + "line one\n" * 10 and not more


def test_slash_parsing():
    assert slash.parse("hello") is None
    assert slash.parse("//not a command") is None
    assert slash.unescape("//x") == "/x"
    cmd = slash.parse("/SET temperature 0.5")
    assert cmd.name == "/set" and cmd.arg == "temperature 0.5" and cmd.known
    assert slash.parse("/quit").name == "/bye"
    assert not slash.parse("/nope").known
    assert "Did you mean /set" in slash.suggestion("/se")


def test_conversation_edits():
    conv = Conversation(system="Be brief.")
    conv.add_user("q1")
    conv.add_assistant("a1")
    assert [m.role for m in conv.messages()] == ["system", "user", "assistant"]
    assert conv.drop_last_reply().content == "a1"
    conv.add_assistant("a1b")
    assert conv.take_last_user() == "q1" and conv.turns == []


def test_render_pacer_keeps_the_ui_under_its_cpu_budget():
    clock, cpu = [0.0], [0.0]
    pacer = RenderPacer(0.1, max_hz=10, min_hz=2, clock=lambda: clock[0], cpu=lambda: cpu[0])
    assert pacer.wait() == 0  # the first render is immediate
    pacer.rendering()
    cpu[0] += 0.02  # that render cost 20 ms of UI time: 20 ms / 10 % = 200 ms apart
    clock[0] += 0.05
    pacer.rendering()
    assert pacer.interval == pytest.approx(0.2)
    clock[0] += 0.05
    assert pacer.wait() == pytest.approx(0.15)
    cpu[0] += 0.001  # cheap renders: as often as max_hz allows
    clock[0] += 0.15
    pacer.rendering()
    assert pacer.interval == pytest.approx(0.1)
    cpu[0] += 1.0  # a very slow render: never less often than min_hz
    clock[0] += 0.1
    pacer.rendering()
    assert pacer.interval == pytest.approx(0.5)


def test_render_pacer_pays_back_renders_that_cost_more_than_its_slowest_interval():
    """A layout that scrolls the view costs more than one interval at min_hz pays for; the
    rest is paid by the intervals after it, so the budget holds on average (without the
    debt: 20 ms per 0.75 s here, 2.7 % of a 2 % budget)."""
    clock, cpu = [0.0], [0.0]
    pacer = RenderPacer(0.02, max_hz=15, min_hz=2, clock=lambda: clock[0], cpu=lambda: cpu[0])
    pacer.rendering()
    for cost in [0.015, 0.005] * 20:  # a layout, then a repaint of the lines that changed
        cpu[0] += cost
        clock[0] += pacer.wait()  # each render as soon as the pacer allows
        pacer.rendering()
        assert (
            1 / 15 <= pacer.interval <= 0.5
        )  # never more often than max_hz, never less than min_hz
    assert cpu[0] / clock[0] == pytest.approx(0.02, rel=0.05)

    cpu[0] += 5.0  # a one-off stall: its debt is bounded, renders come back to their pace
    clock[0] += pacer.wait()
    pacer.rendering()
    assert pacer.debt == pytest.approx(0.02 * 0.5 * DEBT_INTERVALS)
    for _ in range(DEBT_INTERVALS + 1):
        cpu[0] += 0.001
        clock[0] += pacer.wait()
        pacer.rendering()
    assert pacer.debt == 0
    cpu[0] += 0.001
    clock[0] += pacer.wait()
    pacer.rendering()
    assert pacer.interval == pytest.approx(1 / 15)  # cheap renders: max_hz again

    pacer.debt = 0.01  # text that comes later than the pacer asked pays the debt off meanwhile
    clock[0] += 2.0
    pacer.rendering()
    assert pacer.debt == 0


def test_a_frame_hold_holds_the_screen_until_released_once_or_its_time_is_up():
    from contextlib import contextmanager

    class Screen:
        def __init__(self) -> None:
            self.batches, self.timers = 0, []

        @contextmanager
        def batch_update(self):
            self.batches += 1
            try:
                yield
            finally:
                self.batches -= 1

        def set_timer(self, delay, callback=None):
            self.timers.append((delay, callback))

    screen = Screen()
    hold = FrameHold(screen)
    assert screen.batches == 1 and hold.held
    assert screen.timers[0][0] == HOLD_S <= 0.1  # never longer than feels instant
    hold.release()  # the first words
    hold.release()  # and then anything else about the reply
    assert screen.batches == 0 and not hold.held
    screen.timers[0][1]()  # the time is up after all: nothing more to release
    assert screen.batches == 0

    late = FrameHold(screen, limit_s=0.05)
    assert screen.timers[-1][0] == 0.05
    screen.timers[-1][1]()  # a long prompt: shown when the time is up
    assert screen.batches == 0 and not late.held


def test_ui_budget_is_small_only_when_the_model_has_every_core():
    assert ui_budget(2, 2) == BUSY_BUDGET
    assert ui_budget(8, 4) == BUSY_BUDGET
    assert ui_budget(4, 8) == FREE_BUDGET
    assert ui_budget(None, 2) == FREE_BUDGET  # a remote model: the cores are the UI's


def test_ctrl_c_as_the_load_ends_saves_the_prompt_and_still_prints_the_json_object():
    """The moment a Ctrl-C used to lose --json's object: the model is in memory, load() has not
    returned yet. The signal is sent to this process from inside load(), so it lands there."""
    import io
    import json
    import os
    import signal

    from fakes import RecordingBackend
    from vibechat.app.commands.run import execute
    from vibechat.app.commands.run_request import RunRequest
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.settings.params import SamplingParams

    class InterruptedAsItLoads(RecordingBackend):
        def load(self, on_progress=None):
            info = super().load(on_progress)
            os.kill(os.getpid(), signal.SIGINT)  # handled before the next line runs
            return info

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        backend = InterruptedAsItLoads()
        chat = ChatLog(Conversation())
        out, err = io.StringIO(), io.StringIO()
        code = execute(
            backend, RunRequest("Hello", None, SamplingParams(), json_output=True), out, err, chat
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    result = json.loads(out.getvalue())
    assert (
        result["finish_reason"] == "cancelled"
        and result["text"] == ""
        and result["model"] == "Fake 1B"
    )
    assert backend.requests == []  # the request was never started
    assert [m.content for m in chat.conversation.messages() if m.role == "user"] == ["Hello"]


def test_the_device_never_shows_an_unknown_layer_count_as_none():
    from dataclasses import replace

    from fakes import INFO

    assert (
        replace(INFO, gpu_layers=5, n_layers=16, gpu_offload_supported=True).device
        == "GPU 5/16 layers"
    )
    assert (
        replace(INFO, gpu_layers=5, n_layers=None, gpu_offload_supported=True).device
        == "GPU 5 layers"
    )
