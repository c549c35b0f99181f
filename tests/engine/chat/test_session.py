"""The chat core (engine/chat/session.py), driven without Textual: the reply lifecycle and how
each ending is saved (a real SQLite file), the engine lock, the generation counter, the
pending reset, context counting, prefill, the backend swap; and, for real, a session
over the worker-process engine on the starter model surviving a killed engine."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from conftest import worker_threads
from fakes import OnePieceAtATime, RecordingBackend
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.errors import EngineCrashed, ModelLoadError, StreamInterrupted, VibechatError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ContextTrimmed, GenerationDone, TextDelta

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=1)
WAIT_S = 120  # every wait below is bounded by this


def session_with(backend, history: History | None = None) -> ChatSession:
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    return session


def saved(history: History, session: ChatSession) -> list[tuple[str, str, str]]:
    stored = history.get(session.chat.conversation_id)
    return [(m.role, m.status, m.content) for m in stored.messages]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_S} s for {what}")
        time.sleep(0.005)


# ----------------------------------------------------------------- lifecycle
def test_a_reply_begins_streams_and_settles_once(history):
    backend = RecordingBackend("one two three")
    session = session_with(backend, history)
    session.chat.add_user("count")
    turn = session.begin_reply()
    assert turn.params.seed is not None and turn.generation == session.generation
    assert saved(history, session)[-1][:2] == (
        "assistant",
        "streaming",
    )  # saved before the first token
    pieces: list[str] = []
    contexts: list[int] = []
    done = session.stream(turn, pieces.append, on_context=contexts.append)
    assert "".join(pieces) == done.text == turn.text == "one two three"
    assert contexts == [backend.count_tokens(turn.messages)]  # the meter, before evaluation
    assert session.finish_reply(turn, done)
    assert not session.finish_reply(turn, done) and not session.fail_reply(
        turn, "late"
    )  # settled once
    assert saved(history, session) == [
        ("user", "complete", "count"),
        ("assistant", "complete", "one two three"),
    ]
    assert session.turn is None and session.conversation.last_role == "assistant"


def test_answer_is_the_whole_lifecycle_for_a_blocking_caller(history):
    backend = RecordingBackend("a b c")
    session = session_with(backend, history)
    session.chat.add_user("hi")
    result = session.answer()
    assert (result.text, result.done.finish_reason, result.interrupted) == ("a b c", "stop", False)
    assert saved(history, session)[-1] == ("assistant", "complete", "a b c")


@pytest.mark.parametrize("what", [KeyboardInterrupt, BrokenPipeError])
def test_ctrl_c_or_a_closed_pipe_keeps_the_partial_reply_as_stopped(history, what):
    session = session_with(RecordingBackend("w1 w2 w3 w4 w5"), history)
    session.chat.add_user("go")
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        if len(seen) == 2:
            raise what

    result = session.answer(on_text=on_text)
    assert result.done.finish_reason == "cancelled" and result.text == "w1 w2"
    assert (result.interrupted, result.pipe_closed) == (
        what is KeyboardInterrupt,
        what is BrokenPipeError,
    )
    assert saved(history, session)[-1] == ("assistant", "stopped", "w1 w2")
    assert session.engine_lock.acquire(blocking=False)  # the lock was let go


def test_stop_requested_stops_the_engine_and_says_interrupted(history):
    backend = RecordingBackend("w " * 50)
    session = session_with(backend, history)
    session.chat.add_user("go")
    seen: list[str] = []
    result = session.answer(on_text=seen.append, stop_requested=lambda: len(seen) >= 3)
    assert result.interrupted and result.done.finish_reason == "cancelled" and len(seen) < 50
    assert saved(history, session)[-1][1] == "stopped"


def test_a_cut_stream_keeps_its_text_and_other_failures_are_saved_as_error(history):
    class Cut(RecordingBackend):
        def __init__(self, error: VibechatError) -> None:
            super().__init__("x y z")
            self.error = error

        def stream_chat(self, messages, params):
            yield TextDelta("half ")
            yield TextDelta("a reply")
            raise self.error

    session = session_with(Cut(StreamInterrupted("the server went away", partial="")), history)
    session.chat.add_user("first")
    with pytest.raises(StreamInterrupted):
        session.answer()
    assert saved(history, session)[-1] == ("assistant", "interrupted", "half a reply")
    assert session.conversation.turns[-1].content == "half a reply"  # part of the conversation

    session.backend = Cut(EngineCrashed("the engine was killed by SIGKILL mid-reply"))
    session.chat.add_user("second")
    with pytest.raises(EngineCrashed):
        session.answer()
    stored = history.get(session.chat.conversation_id).messages[-1]
    assert (stored.status, stored.content, stored.error) == (
        "error",
        "half a reply",
        "the engine was killed by SIGKILL mid-reply",
    )
    assert (
        session.conversation.last_role == "user"
    )  # the failed reply is not sent again: Ctrl+R retries


def test_a_reply_abandoned_from_another_thread_is_saved_as_stopped_and_its_events_are_stale(
    history,
):
    backend = OnePieceAtATime("w " * 200)
    session = session_with(backend, history)
    session.chat.add_user("go")
    turn = session.begin_reply()
    pieces: list[str] = []
    result: list[GenerationDone] = []
    thread = threading.Thread(target=lambda: result.append(session.stream(turn, pieces.append)))
    thread.start()
    for _ in range(3):
        backend.step.release()
    wait_until(lambda: len(pieces) == 3, "three pieces")
    generation = turn.generation
    assert session.abandon()  # the UI thread: a new chat, an edit, quitting
    for _ in range(200):
        backend.step.release()
    thread.join(WAIT_S)
    assert not thread.is_alive() and result[0].finish_reason == "cancelled"
    assert not session.is_current(generation)
    assert not session.finish_reply(turn, result[0])  # the worker's late end changes nothing
    assert saved(history, session)[-1] == ("assistant", "stopped", "w w w")


def test_a_superseded_turn_does_not_reach_the_engine():
    backend = RecordingBackend()
    session = session_with(backend)
    session.chat.add_user("go")
    turn = session.begin_reply()
    session.abandon()  # before the worker got the lock
    done = session.stream(turn, lambda _t: None)
    assert done.finish_reason == "cancelled" and backend.requests == []


def test_a_backend_that_must_load_again_reports_its_progress_before_the_reply():
    class Restarts(RecordingBackend):
        def load(self, on_progress=None):
            if self.loaded:  # loaded: at once, no progress
                return self.info
            for fraction in (0.5, 1.0):
                if on_progress:
                    on_progress(fraction)
            self.loaded = True
            return self.info

    backend = Restarts("ok")
    session = session_with(backend)
    session.chat.add_user("go")
    progress: list[float] = []
    turn = session.begin_reply()
    session.stream(turn, lambda _t: None, on_load=progress.append)
    assert progress == []  # loaded already
    backend.loaded = False  # e.g. its engine process crashed and will start afresh
    turn = session.begin_reply()
    session.stream(turn, lambda _t: None, on_load=progress.append)
    assert progress == [0.5, 1.0] and len(backend.requests) == 2


def test_other_events_reach_on_event():
    class Trims(RecordingBackend):
        def stream_chat(self, messages, params):
            yield ContextTrimmed(dropped_messages=2, prompt_tokens=10, context_size=64)
            yield from super().stream_chat(messages, params)

    session = session_with(Trims("ok"))
    session.chat.add_user("go")
    events: list[object] = []
    session.answer(on_event=events.append)
    assert [type(e) for e in events] == [ContextTrimmed]


# ------------------------------------------------------- reset, count, prefill
def test_a_new_conversation_resets_the_cache_before_the_next_use_not_at_once():
    backend = RecordingBackend("fine")
    session = session_with(backend)
    session.chat.add_user("one")
    session.answer()
    session.new_conversation()
    assert (
        backend.resets == 0 and session.conversation.turns == []
    )  # a cancelled reply may still hold it
    session.chat.add_user("two")
    resets: list[bool] = []
    turn = session.begin_reply()
    session.finish_reply(
        turn, session.stream(turn, lambda _t: None, on_reset=lambda: resets.append(True))
    )
    assert backend.resets == 1 and resets == [True]
    assert not session.apply_pending_reset()  # once
    session.new_conversation(reset_cache=False)  # e.g. a model freshly loaded
    assert not session.apply_pending_reset() and backend.resets == 1


def test_counting_and_prefill_are_skipped_for_a_session_that_moved_on():
    backend = RecordingBackend()
    session = session_with(backend)
    session.chat.add_user("some words here")
    generation = session.generation
    assert session.count_context(generation) == backend.count_tokens(
        session.conversation.messages()
    )
    assert session.rebuild_cache(generation) == backend.count_tokens(
        session.conversation.messages()
    )
    assert backend.prefills == [session.conversation.messages()]
    session.new_conversation()
    assert session.count_context(generation) is None and session.rebuild_cache(generation) is None
    assert len(backend.prefills) == 1


def test_opening_a_conversation_names_the_loaded_model_and_keeps_the_cache_for_the_rebuild(history):
    session = session_with(RecordingBackend())
    chat = ChatLog(Conversation(), history)
    session.open(chat)
    assert session.chat is chat and (chat.model, chat.model_path) == (
        "Fake 1B",
        "/models/fake.gguf",
    )
    assert not session.apply_pending_reset()
    session.open(ChatLog(Conversation()), reset_cache=True)
    assert session.apply_pending_reset()


# ------------------------------------------------------------ backend swap
class Loads(RecordingBackend):
    def __init__(self, log: list[str], name: str, fail: bool = False) -> None:
        super().__init__()
        self.log, self.label, self.fail = log, name, fail

    def load(self, on_progress=None):
        self.log.append(f"load {self.label}")
        if self.fail:
            raise ModelLoadError(f"{self.label} is broken")
        return super().load(on_progress)

    def close(self) -> None:
        self.log.append(f"close {self.label}")


def test_a_new_model_loads_beside_the_current_one_when_memory_allows():
    log: list[str] = []
    session = session_with(Loads(log, "old"))
    new = Loads(log, "new")
    session.replace_backend(new, name="New", file_size=10, available=100)
    assert log == ["load old", "load new", "close old"] and session.backend is new


def test_a_model_that_fits_only_alone_replaces_the_current_one_which_comes_back_if_it_fails():
    log: list[str] = []
    old = Loads(log, "old")
    session = session_with(old)
    with pytest.raises(ModelLoadError, match="broken"):
        session.replace_backend(Loads(log, "new", fail=True), name="New", file_size=10, available=9)
    assert log == ["load old", "close old", "load new", "load old"] and session.backend is old


def test_a_model_that_cannot_fit_is_refused_in_one_line_naming_it():
    log: list[str] = []
    session = session_with(Loads(log, "old"))  # the fake's file is 1 byte, its KV cache 64 MiB
    with pytest.raises(ModelLoadError) as caught:
        session.replace_backend(Loads(log, "new"), name="Huge 70B", file_size=10**9, available=10)
    assert str(caught.value).startswith("Huge 70B needs about") and "\n" not in str(caught.value)
    assert log == ["load old"]


def test_what_the_current_model_frees_counts_its_kv_cache_and_its_draft_model():
    from dataclasses import replace

    log: list[str] = []

    class WithDraft(Loads):
        def load(self, on_progress=None):
            info = super().load(on_progress)
            return replace(info, file_size=100, kv_cache_bytes=20, draft_model_bytes=30)

    session = session_with(WithDraft(log, "old"))
    assert session.info.memory_bytes == 150
    # 160 bytes needed, 15 free: it fits only once the current model (150 with its draft) is closed
    session.replace_backend(Loads(log, "new"), name="New", file_size=160, available=15)
    assert log == ["load old", "close old", "load new"]
    with pytest.raises(
        ModelLoadError, match="needs about"
    ):  # the fake new one frees 1 byte and 64 MiB
        session.replace_backend(Loads(log, "newer"), name="Newer", file_size=10**9, available=15)


def test_a_swap_waits_for_the_reply_holding_the_engine():
    log: list[str] = []

    class Slow(Loads, OnePieceAtATime):
        def __init__(self) -> None:
            OnePieceAtATime.__init__(self, "w " * 10)
            self.log, self.label, self.fail = log, "old", False

    old = Slow()
    session = session_with(old)
    session.chat.add_user("go")
    turn = session.begin_reply()
    pieces: list[str] = []
    streamer = threading.Thread(target=lambda: session.stream(turn, pieces.append))
    streamer.start()
    old.step.release()
    wait_until(lambda: pieces, "the first piece")
    swapper = threading.Thread(
        target=lambda: session.replace_backend(
            Loads(log, "new"), name="New", file_size=1, available=None
        )
    )
    swapper.start()
    swapper.join(0.2)
    assert log == [
        "load old"
    ]  # the new model waits: the old one is never closed under a running reply
    for _ in range(10):
        old.step.release()
    streamer.join(WAIT_S)
    swapper.join(WAIT_S)
    assert log == ["load old", "load new", "close old"]


def test_remote_model_switching_needs_a_server_backend():
    session = session_with(RecordingBackend())
    assert session.remote is None
    with pytest.raises(VibechatError, match="no server models"):
        session.switch_remote("other")


# ------------------------------------------------- for real: the worker engine
@pytest.mark.model
def test_a_session_over_the_worker_engine_survives_a_killed_engine_and_goes_on(
    starter_path, history
):
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    # Gemma's turn format: there the starter writes on to the token limit, so the kill below lands
    # mid-reply; in its own completion frame it stops after a sentence, which could be all sent
    # (and its end read) before the kill, on a busy machine.
    backend = WorkerBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=4096,
            repack="off",
            prompt_format="gemma",
        )
    )
    try:
        session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
        session.load()
        session.chat.add_user("List three colours.")
        first = session.answer()
        assert first.done.finish_reason in ("stop", "length") and first.text.strip()
        session.chat.add_user("And three animals?")
        second = session.answer()
        stats = second.done.stats
        assert (
            stats.prompt_tokens_evaluated < stats.prompt_tokens
        )  # the KV prefix was kept across turns

        session.chat.add_user("Write a long story about a dragon.")
        pieces: list[str] = []

        def kill_at_the_first_piece(text: str) -> None:
            pieces.append(text)
            if len(pieces) == 1:
                os.kill(backend.pid, signal.SIGKILL)

        with pytest.raises(EngineCrashed) as caught:
            session.answer(GREEDY.replace(max_tokens=400), on_text=kill_at_the_first_piece)
        assert "SIGKILL" in str(caught.value)
        stored = history.get(session.chat.conversation_id).messages[-1]
        assert (
            stored.status == "error"
            and stored.content.strip()
            and "SIGKILL" in (stored.error or "")
        )
        assert session.conversation.last_role == "user"

        third = session.answer()  # a fresh engine reads the conversation again and answers
        assert third.done.finish_reason in ("stop", "length") and third.text.strip()
        statuses = [m.status for m in history.get(session.chat.conversation_id).messages]
        done = ("complete", "cut")  # a reply the token limit ended is saved as cut
        assert len(statuses) == 7 and statuses[0:5:2] == ["complete"] * 3 and statuses[5] == "error"
        assert all(status in done for status in (statuses[1], statuses[3], statuses[6]))
    finally:
        backend.close()
