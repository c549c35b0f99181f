"""The chat on a ``WorkerBackend`` whose engine process is killed (SIGSEGV, SIGKILL) mid-reply,
while the model loads and while the prompt is evaluated: the app stays up, shows the one
line, keeps the partial reply (saved with status 'error'), writes a crash report, and
answers the next prompt from a fresh engine process; and an engine that crashes again right
after its restart is not restarted in a loop. (tests/app/test_terminal_restore.py: the real
command in a pseudo-terminal; tests/engine/llama/test_worker.py: the backend alone.)"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import worker_threads
from fakes import settle
from helpers import wait_for
from test_terminal_restore import (
    Terminal,
    chat_env,  # noqa: F401 - a fixture
    engine_process_of,
    wait_for_pieces,
)
from test_worker import HUNG_BOUND_S, end_for_good, is_gone, is_stopped, needs_proc
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.engine.chat.history import History
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.llama.worker_child import CRASH_HOOK_ENV
from vibechat.engine.models.local_model import LocalModel
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams

pytestmark = pytest.mark.model

STORY = "Write a long story about a dragon who learns to bake bread."
# Long replies to stop with Esc. At temperature 0 a reply's first token is not the same on
# every CPU (kernels differ): where one ends at once without text, the next prompt is sent.
# In Gemma's turn format the starter writes on for hundreds of tokens; in its own (the completion
# frame) it says a sentence and stops: too soon for a test that stops or kills a reply mid-way.
RAMBLING = {"prompt_format": "gemma"}
SHORT = SamplingParams(
    temperature=0, max_tokens=24
)  # a prompt after the stopped one: answered soon
ANSWERED = (("assistant", "complete"), ("assistant", "cut"))  # (cut: at max_tokens, rambling)
LONG_PROMPTS = (
    STORY,
    "Tell me the whole history of bread, from the first farmers to today.",
    "Describe, step by step and in detail, how a river reaches the sea.",
)


def worker_backend(path: Path, **changes) -> WorkerBackend:
    """The chat's engine process for the model at ``path`` (with ``changes`` to its options)."""
    return WorkerBackend(
        LlamaCppOptions(
            **{
                "model_path": path,
                "context_size": 2048,
                "repack": "off",
                "threads": worker_threads(),
                **changes,
            }
        )
    )


def crash_reports() -> list[Path]:
    folder = Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes"
    reports = sorted(folder.iterdir()) if folder.is_dir() else []
    for report in reports:  # the user's settings and log lines: private
        if os.name == "posix":
            assert stat.S_IMODE(report.stat().st_mode) == 0o600, report
    return reports


def stored_messages() -> list[tuple[str, str]]:
    with History() as history:
        return [(m.role, m.status) for m in history.get(history.latest().id).messages]


def reply_status(reply: AssistantMessage) -> str:
    return reply.status_shown.plain


def engine_trouble(reply: AssistantMessage) -> str:
    """A failed reply's line, and the crash report it names (where the engine hung or crashed)."""
    reports = "\n".join(report.read_text() for report in crash_reports())
    return f"{reply_status(reply)}\n{reports}"


def reply_shows_text(app) -> bool:
    return bool(app.replies.stream and app.replies.stream.started)


async def start_a_long_reply(app, pilot) -> None:
    """Send prompts until a reply is on screen and still coming (see LONG_PROMPTS)."""
    for prompt in LONG_PROMPTS:
        app.prompt_input.load_text(prompt)
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: reply_shows_text(app) or not app.generating,
            "the reply's text (or its end)",
            120,
        )
        if reply_shows_text(app) and app.generating:
            return
        await settle(pilot)  # it ended without text on this CPU: the next prompt
    raise AssertionError(
        f"no reply to any of {len(LONG_PROMPTS)} prompts was still coming once it showed text"
    )


async def send(app, pilot, text: str) -> AssistantMessage:
    """Send ``text``, wait until the reply ended (answered or failed); the reply's widget."""
    app.prompt_input.load_text(text)
    await pilot.press("enter")
    await settle(pilot)
    assert app.is_running and not app.generating
    return app.chat.query(AssistantMessage).last()


def assert_answered(app, reply: AssistantMessage) -> None:
    assert reply.text.strip() and not reply.has_class("-error")
    assert app.status.stats.finish_reason in ("stop", "length")


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL], ids=lambda sig: sig.name)
async def test_the_chat_survives_its_engine_killed_mid_reply(starter_path, sig):
    backend = worker_backend(starter_path, **RAMBLING)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=400), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.model is not None and app.status.state == "ready"
            await start_a_long_reply(app, pilot)
            os.kill(backend.pid, sig)  # the reply is on screen: kill its engine
            await settle(pilot)

            assert app.is_running and not app.generating
            reply = app.chat.query(AssistantMessage).last()
            status = reply.status_shown.plain
            assert sig.name in status and "mid-reply" in status and "crash report" in status
            assert reply.has_class("-error") and reply.text.strip()  # the partial text stays
            with History() as history:
                stored = history.get(history.latest().id)
            *_, user, failed = stored.messages  # (earlier turns: replies that ended without text)
            assert failed.status == "error" and sig.name in (failed.error or "")
            [report] = crash_reports()
            assert str(report) in status and sig.name in report.read_text()
            assert (
                failed.content.strip() and failed.content.split()[0] in reply.text
            )  # the partial reply, saved

            app.set_params(SHORT)
            app.prompt_input.load_text("List three colours.")
            await pilot.press("enter")
            await settle(pilot)
            last = app.chat.query(AssistantMessage).last()
            assert last is not reply and last.text.strip() and not last.has_class("-error")
            assert app.status.stats.finish_reason in ("stop", "length")
            with History() as history:
                stored = history.get(history.latest().id)
            *_, user, failed, user2, answer = [
                (m.role, m.status) for m in stored.messages
            ]  # (start_a_long_reply)
            assert [user, failed, user2] == [
                ("user", "complete"),
                ("assistant", "error"),
                ("user", "complete"),
            ]
            assert answer in ANSWERED
    finally:
        backend.close()


async def test_a_reply_whose_restarted_engine_crashes_in_its_load_leaves_no_generating_behind(
    starter_path, monkeypatch
):
    # issue 39, point 7: the status bar stayed on "generating…" (or "loading N%") after the reply
    # failed
    monkeypatch.setenv(CRASH_HOOK_ENV, "load:SIGKILL")  # every engine process dies in its load
    backend = worker_backend(starter_path)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.state == "no model"
            reply = await send(app, pilot, "List three colours.")
            assert reply.has_class("-error")
            assert app.state.status == "no model" and app.status.state == "no model"
    finally:
        backend.close()


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGKILL"])
async def test_the_chat_survives_its_engine_killed_while_the_model_loads(
    starter_path, monkeypatch, sig
):
    monkeypatch.setenv(
        CRASH_HOOK_ENV, f"load:{sig}"
    )  # the engine process the chat starts dies in its load
    backend = worker_backend(starter_path)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.is_running and app.status.state == "no model" and backend.pid is None
            [report] = crash_reports()
            assert sig in report.read_text() and "while loading gemma-3-270m" in report.read_text()

            monkeypatch.delenv(
                CRASH_HOOK_ENV
            )  # the next engine process loads: the prompt is answered
            reply = await send(app, pilot, "List three colours.")
            assert_answered(app, reply)
            assert backend.pid is not None
            user, answer = (
                stored_messages()
            )  # (complete, or cut at the limit: where it ends is the model's)
            assert user == ("user", "complete") and answer in ANSWERED
            assert len(crash_reports()) == 1
    finally:
        backend.close()


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGKILL"])
async def test_the_chat_survives_its_engine_killed_while_the_prompt_is_evaluated(
    starter_path, monkeypatch, sig
):
    # Every engine process started with the hook set dies when a reply starts (before any text).
    monkeypatch.setenv(CRASH_HOOK_ENV, f"prompt:{sig}")
    backend = worker_backend(starter_path)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.state == "ready"
            reply = await send(app, pilot, STORY)
            status = reply_status(reply)
            assert (
                sig in status
                and "while evaluating the prompt" in status
                and "crash report" in status
            )
            assert reply.has_class("-error") and not reply.text.strip()  # nothing was generated
            assert stored_messages() == [("user", "complete"), ("assistant", "error")]
            [report] = crash_reports()
            assert str(report) in status and sig in report.read_text()

            monkeypatch.delenv(CRASH_HOOK_ENV)
            reply = await send(app, pilot, "List three colours.")
            assert_answered(app, reply)
            *earlier, answer = stored_messages()
            assert earlier == [("user", "complete"), ("assistant", "error"), ("user", "complete")]
            assert answer in ANSWERED  # complete, or cut at the limit: where it ends is the model's
    finally:
        backend.close()


async def test_an_engine_that_crashes_again_after_its_restart_is_not_restarted_in_a_loop(
    starter_path, monkeypatch
):
    monkeypatch.setenv(
        CRASH_HOOK_ENV, "prompt:SIGSEGV"
    )  # every reply's start crashes, with these settings
    backend = worker_backend(starter_path)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            first = reply_status(await send(app, pilot, "Hello"))
            assert "SIGSEGV" in first and "restarts with the next request" in first
            # the restarted engine crashes in its first request: not restarted again
            second = reply_status(await send(app, pilot, "Hello again"))
            assert "again right after a restart" in second and "will not restart" in second
            assert "a smaller --ctx" in second and "crash report" in second
            assert len(crash_reports()) == 2 and backend.pid is None
            # asked again with the same settings: refused at once, no engine process started
            third = reply_status(await send(app, pilot, "Anyone there?"))
            assert "will not restart" in third and backend.pid is None
            assert len(crash_reports()) == 2
            assert app.is_running
            assert stored_messages() == [("user", "complete"), ("assistant", "error")] * 3
    finally:
        backend.close()


async def test_the_chats_everyday_actions_work_through_the_engine_process(starter_path, tmp_path):
    """What the chat does every day, through its engine process on the real starter model: a
    second turn reuses the KV prefix, Ctrl+N resets the cache, Esc stops a reply at once, a
    reload with changed settings (what the GPU layers slider does) keeps the conversation, and
    a model switch ends the old engine process and answers from the new one."""
    started: list[WorkerBackend] = []

    def factory(path: Path, **changes) -> WorkerBackend:
        started.append(worker_backend(path, **changes))
        return started[-1]

    backend = worker_backend(starter_path, **RAMBLING)
    app = create_app(
        backend,
        params=SamplingParams(temperature=0, max_tokens=8),
        backend_factory=factory,
        blink=False,
    )
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            first_engine = backend.pid
            assert first_engine is not None and app.status.state == "ready"
            assert_answered(app, await send(app, pilot, "List three colours."))
            assert_answered(app, await send(app, pilot, "And three animals?"))
            stats = app.status.stats
            assert (
                stats.prompt_tokens_evaluated < stats.prompt_tokens / 2
            )  # the first turn stayed in the cache

            await pilot.press("ctrl+n")
            await settle(pilot)
            assert_answered(app, await send(app, pilot, "And three animals?"))
            stats = app.status.stats
            assert stats.prompt_tokens_evaluated == stats.prompt_tokens  # the cache was reset
            assert backend.pid == first_engine  # ... by the same engine process

            app.set_params(SamplingParams(temperature=0, max_tokens=400))
            for _ in range(3):  # (a reply that ends on its own before the Esc reaches it: again)
                await start_a_long_reply(app, pilot)
                await pilot.press("escape")
                # the stop's end comes back from the engine process: later on a busy CPU
                await wait_for(pilot, lambda: not app.generating, "the stopped reply's end")
                reply = app.chat.query(AssistantMessage).last()
                assert not reply.has_class("-error"), engine_trouble(reply)
                if app.status.stats.finish_reason == "cancelled":
                    break
            assert app.status.stats.finish_reason == "cancelled"
            assert app.status.stats.completion_tokens < 400

            app.models.reload_model(
                context_size=1024
            )  # a reload with other settings, as the GPU layers slider asks
            await settle(pilot)
            [reloaded] = started
            assert app.session.backend is reloaded and reloaded.describe().context_size == 1024
            assert reloaded.pid is not None and backend.pid is None  # the old engine process ended
            assert [m.role for m in app.session.conversation.messages()][-2:] == [
                "user",
                "assistant",
            ]
            app.set_params(SamplingParams(temperature=0, max_tokens=8))
            assert_answered(app, await send(app, pilot, "Thanks."))
            assert app.status.stats.prompt_tokens > 30  # the conversation went on in the new engine

            copy = tmp_path / "gemma-copy-Q4_K_M.gguf"
            os.link(starter_path, copy)
            app.models.switch_model(
                LocalModel(
                    name="gemma-copy",
                    path=copy,
                    size=copy.stat().st_size,
                    quant="Q4_K_M",
                    source="vibechat",
                )
            )
            await settle(pilot)
            switched = started[-1]
            assert len(started) == 2 and app.session.backend is switched
            assert switched.describe().path == str(copy) and reloaded.pid is None
            assert_answered(app, await send(app, pilot, "List three colours."))
            assert switched.pid is not None and app.is_running
    finally:
        for engine in (backend, *started):
            engine.close()


async def test_format_refuses_a_grammar_that_llama_cpp_rejects_as_run_does(starter_path, tmp_path):
    """/format FILE with a GBNF grammar that does not parse (llama.cpp's parser says so, in
    the engine's process: the chat's never loads libllama) is refused in one line naming the
    problem, and the format stays as it was; a good one is accepted and used. Before, the bad
    one was accepted and every request then failed."""
    from helpers import notifications
    from helpers import wait_for as wait_until_true

    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" | (\n')
    good = tmp_path / "yes-no.gbnf"
    good.write_text('root ::= "yes" | "no"\n')
    backend = worker_backend(starter_path)
    app = create_app(
        backend, params=SamplingParams(temperature=0, max_tokens=8), blink=False, save=False
    )

    def errors() -> list[str]:
        return [str(n.message) for n in notifications(app) if n.severity == "error"]

    try:
        async with app.run_test(size=(110, 36), notifications=True) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.state == "ready"
            app.prompt_input.load_text(f"/format {bad}")
            await pilot.press("enter")
            await wait_until_true(
                pilot,
                lambda: any("bad.gbnf" in str(n.message) for n in notifications(app)),
                "the answer to /format, yes or no",
            )
            await settle(pilot)
            [refusal] = errors()
            assert (
                "grammar bad.gbnf: llama.cpp rejects the grammar:" in refusal
                and "\n" not in refusal
            ), refusal
            assert app.session.conversation.params.output_format is None  # as it was

            app.prompt_input.load_text(f"/format {good}")
            await pilot.press("enter")
            await settle(pilot)
            fmt = app.session.conversation.params.output_format
            assert fmt is not None and fmt.label == "grammar yes-no.gbnf"
            app.prompt_input.load_text(f"/format {bad}")
            await pilot.press("enter")
            await wait_until_true(pilot, lambda: len(errors()) == 2, "the second refusal")
            await settle(pilot)
            assert app.session.conversation.params.output_format == fmt  # the good one stays

            reply = await send(app, pilot, "Is the sky blue?")
            assert reply.text.strip() in ("yes", "no") and not reply.has_class("-error"), reply.text
    finally:
        backend.close()


# ---------------------------------------------------------------- a hung engine


@needs_proc
async def test_esc_stops_a_reply_whose_engine_is_stopped(starter_path):
    """SIGSTOP on the engine process mid-reply, then Esc: the engine cannot answer the stop, so
    it is ended (not waited on until it is continued): the reply ends with one line saying so,
    its text so far saved (status 'error'), and the next prompt is answered by a fresh engine."""
    backend = worker_backend(starter_path, **RAMBLING)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=400), blink=False)
    pid = None
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.state == "ready"
            app.prompt_input.load_text(STORY)
            await pilot.press("enter")
            await wait_for(pilot, lambda: reply_shows_text(app), "the reply's text")
            pid = backend.pid
            os.kill(pid, signal.SIGSTOP)  # the reply is on screen: its engine stops answering
            try:
                await wait_for(pilot, lambda: is_stopped(pid), "the engine process to be stopped")
                await pilot.press("escape")
                await wait_for(
                    pilot, lambda: not app.generating, "the reply to stop after Esc", HUNG_BOUND_S
                )
            finally:
                end_for_good(pid)  # today's code waits for it: the test ends it either way
            await settle(pilot)
            reply = app.chat.query(AssistantMessage).last()
            status = reply_status(reply)
            assert (
                "stopped responding mid-reply" in status
                and "no answer to the stop request" in status
            )
            assert "crash report" in status
            assert reply.has_class("-error") and reply.text.strip()  # the text so far stays
            assert is_gone(pid)
            with History() as history:
                user, failed = history.get(history.latest().id).messages
            assert failed.status == "error" and "stopped responding" in (failed.error or "")
            assert (
                failed.content.strip() and failed.content.split()[0] in reply.text
            )  # the text so far, saved

            app.set_params(SHORT)
            reply = await send(app, pilot, "List three colours.")
            assert_answered(app, reply)
            assert backend.pid not in (None, pid)
            *earlier, answer = stored_messages()
            assert earlier == [("user", "complete"), ("assistant", "error"), ("user", "complete")]
            assert answer in ANSWERED
    finally:
        end_for_good(pid)
        backend.close()


async def test_esc_stops_a_reply_whose_engine_acknowledged_the_stop_and_hangs(
    starter_path, monkeypatch
):
    """The engine's main thread hangs right after it sent the reply's first piece (the "hang"
    hook: a native call that never returns), while its request reader still acknowledges the
    stop: Esc ends the reply at the watchdog's one deadline (1.5 s after the stop, as for an
    engine that does not answer at all; 10 s before), with one line saying so, and the next
    prompt is answered by a fresh engine."""
    monkeypatch.setenv(CRASH_HOOK_ENV, "reply:hang")
    backend = worker_backend(starter_path, **RAMBLING)
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=400), blink=False)
    pid = None
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.state == "ready"
            app.prompt_input.load_text(STORY)
            await pilot.press("enter")
            await wait_for(pilot, lambda: reply_shows_text(app), "the reply's text")
            pid = backend.pid
            monkeypatch.delenv(CRASH_HOOK_ENV)  # the next engine process answers
            await pilot.press("escape")
            await wait_for(
                pilot, lambda: not app.generating, "the reply to stop after Esc", HUNG_BOUND_S
            )
            await settle(pilot)
            reply = app.chat.query(AssistantMessage).last()
            status = reply_status(reply)
            assert "stopped responding mid-reply" in status, status
            # The grace is 1.5 s, longer where the model's steps are slow (a busy host).
            assert re.search(
                r"the request did not end within [0-9.]+ s of the stop request", status
            ), status
            assert reply.has_class("-error") and reply.text.strip()  # the text so far stays
            assert is_gone(pid)

            app.set_params(SHORT)
            reply = await send(app, pilot, "List three colours.")
            assert_answered(app, reply)
            assert backend.pid not in (None, pid)
    finally:
        end_for_good(pid)
        backend.close()


@needs_proc
@pytest.mark.skipif(os.name != "posix", reason="a POSIX pseudo-terminal")
# chat_env: the fixture imported above
def test_quitting_with_a_stopped_engine_ends_the_chat_and_its_engine(chat_env):  # noqa: F811
    """The real chat in a terminal, its engine stopped mid-reply (the hook stops it right after
    it sent the reply's first piece: no race with a signal), then Ctrl+Q: the chat exits
    without waiting for the engine to be continued, and the engine process is ended and
    reaped, not left behind."""
    chat_env[CRASH_HOOK_ENV] = "reply:SIGSTOP"
    term = Terminal(["--temperature", "0", "--max-tokens", "400", "--ctx", "2048"], chat_env)
    engine = None
    try:
        term.wait_for("Enter sends", "the model to load")
        term.type(STORY.encode())
        term.wait_for(STORY[-20:], "the prompt to show in the input")
        term.type(b"\r")
        deadline = time.monotonic() + 120
        while engine is None or not is_stopped(engine):
            assert time.monotonic() < deadline and term.proc.poll() is None, (
                "the engine never stopped mid-reply"
            )
            engine = engine or engine_process_of(term.proc.pid)
            time.sleep(0.05)
        term.type(b"\x11")  # Ctrl+Q
        try:
            code = term.proc.wait(HUNG_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the chat did not quit within {HUNG_BOUND_S} s with its engine stopped:\n"
                f"{term.text()[-2000:]}"
            )
        assert code == 0, term.text()[-3000:]
        assert is_gone(engine)  # ended and reaped by the chat
        for bad in ("Traceback", "Exception ignored"):
            assert bad not in term.text()
    finally:
        end_for_good(engine)
        term.close()


@needs_proc
@pytest.mark.skipif(os.name != "posix", reason="a POSIX pseudo-terminal")
# chat_env: the fixture imported above
def test_quitting_after_a_stop_with_slow_steps_takes_at_most_3_s(chat_env):  # noqa: F811
    """The real chat in a terminal, on a model whose steps are slow here (the "slow" hook: 2 s
    a piece), its engine then not answering (SIGSTOP): Esc (a stop, whose grace for a slow
    model is 1.5 s + twice its step), then Ctrl+Q: the chat exits within 3 s (3.5 s measured,
    for a busy machine), not after the stop's grace, and its engine is ended and reaped. Before,
    the quit waited out that grace: 6.2 s."""
    chat_env[CRASH_HOOK_ENV] = "reply:slow2.0"
    term = Terminal(["--temperature", "0", "--max-tokens", "400", "--ctx", "2048"], chat_env)
    engine = None
    try:
        term.wait_for("Enter sends", "the model to load")
        term.type(STORY.encode())
        term.wait_for(STORY[-20:], "the prompt to show in the input")
        term.type(b"\r")
        wait_for_pieces(term, chat_env, 2)  # two slow steps seen: a stop now gets their time
        engine = engine_process_of(term.proc.pid)
        assert engine is not None
        os.kill(engine, signal.SIGSTOP)
        deadline = time.monotonic() + 120
        while not is_stopped(engine):
            assert time.monotonic() < deadline, "the engine process did not stop"
            time.sleep(0.05)
        term.type(b"\x1b")  # Esc: the stop
        time.sleep(0.5)  # Esc alone, not the start of Alt+Ctrl+Q
        started = time.monotonic()
        term.type(b"\x11")  # Ctrl+Q
        try:
            code = term.proc.wait(HUNG_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the chat did not quit within {HUNG_BOUND_S} s:\n{term.text()[-2000:]}")
        took = time.monotonic() - started
        assert code == 0, term.text()[-3000:]
        assert took < 3.5, f"quitting took {took:.2f} s"
        assert is_gone(engine)  # ended and reaped by the chat
    finally:
        end_for_good(engine)
        term.close()
