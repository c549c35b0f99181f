"""``WorkerBackend`` (engine/llama/worker.py): the starter model in a real child process. Replies,
cancel, KV reuse, and the child killed at every stage: the call raises one line naming the
signal and the crash report, and the next request is answered by a fresh child."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import collect, worker_threads
from test_ctrl_c import LONG_PROMPT
from vibechat.engine.errors import EngineCrashed, EngineCrashLoop, LoadCancelled, VibechatError
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.llama.worker_ahead import EngineAhead
from vibechat.engine.llama.worker_child import CRASH_HOOK_ENV
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ChatMessage,
    GenerationDone,
    TextDelta,
    TokenCandidates,
    logprobs_object,
)
from vibechat.engine.turns.lens_steps import path_prefix

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0, max_tokens=24)
LONG_REPLY = SamplingParams(temperature=0, max_tokens=400)
HELLO = [ChatMessage("user", "List three colours.")]
STORY = [ChatMessage("user", "Write a long story about a dragon who learns to bake bread.")]
WAIT_S = 120  # every wait below is bounded by this


def options(path: Path, **changes) -> LlamaCppOptions:
    return LlamaCppOptions(
        **{
            "model_path": path,
            "context_size": 8192,
            "repack": "off",
            "threads": worker_threads(),
            **changes,
        }
    )


@pytest.fixture
def worker(starter_path: Path):
    backend = WorkerBackend(options(starter_path))
    yield backend
    backend.close()


@pytest.fixture
def rambling_worker(starter_path: Path):
    """The engine process with the starter prompted in Gemma's turn format (prompt_format gemma):
    there it writes on for hundreds of tokens, which a test that stops, kills or crashes the
    engine mid-reply needs. In its own format, the completion frame, it says a sentence and
    stops ("Write a long story ..." in 24 tokens), before the pieces those tests wait for."""
    backend = WorkerBackend(options(starter_path, prompt_format="gemma"))
    yield backend
    backend.close()


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_S} s for {what}")
        time.sleep(0.01)


def report_of(error: Exception) -> Path:
    match = re.search(r"crash report: (\S+)$", str(error))
    assert match, str(error)
    path = Path(match.group(1))
    assert path.is_file() and path.parent.name == "crashes"
    assert Path(os.environ["VIBECHAT_STATE_DIR"]) in path.parents  # never the real home
    assert_private(path)
    return path


def assert_private(report: Path) -> None:
    """A crash report holds the user's settings and log lines: its owner's only."""
    if os.name == "posix":
        assert stat.S_IMODE(report.stat().st_mode) == 0o600
        assert stat.S_IMODE(report.parent.stat().st_mode) == 0o700


def assert_answers(backend: WorkerBackend, messages=HELLO) -> GenerationDone:
    deltas, done = collect(backend, messages, GREEDY)
    assert (
        done.finish_reason in ("stop", "length")
        and done.text.strip()
        and "".join(deltas) == done.text
    )
    return done


def test_a_reply_through_the_worker_is_the_in_process_reply(starter_path, worker):
    in_process = LlamaCppBackend(options(starter_path))
    try:
        _, expected = collect(in_process, HELLO, GREEDY)
    finally:
        in_process.close()
    progress: list[float] = []
    info = worker.load(on_progress=progress.append)
    assert info.architecture == "gemma3" and worker.describe() == info
    assert progress and max(progress) == pytest.approx(1.0)
    counts = []
    for event in worker.stream_chat(HELLO, GREEDY):
        if isinstance(event, TextDelta):
            counts.append(event.tokens)
    # the live count crosses too (the last text may come before the tokens of a stop string)
    assert counts == sorted(counts) and 0 < counts[-1] <= expected.stats.completion_tokens
    worker.reset()
    deltas, done = collect(worker, HELLO, GREEDY)
    assert done.text == expected.text and "".join(deltas) == done.text
    assert done.stats.completion_tokens == expected.stats.completion_tokens
    assert done.params is not None and done.params.temperature == 0
    assert worker.count_tokens(HELLO) == done.stats.prompt_tokens
    # Turn two reuses the KV cache: the child kept its backend.
    turn2 = [*HELLO, ChatMessage("assistant", done.text), ChatMessage("user", "And three animals?")]
    _, second = collect(worker, turn2, GREEDY)
    assert second.stats.prompt_tokens_evaluated < second.stats.prompt_tokens / 2
    worker.reset()
    _, third = collect(worker, turn2, GREEDY)
    assert third.stats.prompt_tokens_evaluated == third.stats.prompt_tokens
    assert worker.prefill(turn2) == third.stats.prompt_tokens
    turn3 = [*turn2, ChatMessage("assistant", third.text), ChatMessage("user", "Thanks.")]
    _, fourth = collect(worker, turn3, GREEDY)
    assert fourth.stats.prompt_tokens_evaluated < fourth.stats.prompt_tokens / 2


def test_a_path_from_a_token_crosses_the_process_boundary(worker):
    """The reply prefix of another path (issue 43 point 3) travels to the engine process: the
    reply goes on from the picked candidate, and only it is evaluated there."""
    params = SamplingParams(temperature=0, repeat_penalty=1, max_tokens=8, logprobs=5, seed=3)
    steps = [e for e in worker.stream_chat(HELLO, params) if isinstance(e, TokenCandidates)]
    other = next(c for c in steps[1].top if c.token_id != steps[1].chosen.token_id and c.data)
    prefix = path_prefix(logprobs_object(steps), 1, other.token_id)
    events = list(worker.stream_chat(HELLO, params, prefix=prefix))
    taken = [e for e in events if isinstance(e, TokenCandidates)]
    done = events[-1]
    assert isinstance(done, GenerationDone)
    assert [s.chosen.token_id for s in taken[:2]] == [steps[0].chosen.token_id, other.token_id]
    assert taken[1].forced and 1 <= done.stats.prompt_tokens_evaluated <= 2


def test_drafting_statistics_cross_the_process_boundary(starter_path):
    code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(6))
    rewrite = [ChatMessage("user", f"Rewrite this code with x renamed to y:\n\n{code}")]
    # Gemma's turn format: in its own (the completion frame) the starter stops after a line
    drafting = WorkerBackend(
        options(starter_path, speculative="auto", draft_tokens=6, prompt_format="gemma")
    )
    try:
        info = drafting.load()
        assert info.speculative == "auto" and info.draft_tokens == 6
        _, done = collect(drafting, rewrite, SamplingParams(temperature=0, max_tokens=40))
    finally:
        drafting.close()
    st = done.stats
    assert st.completion_tokens == 40 and st.drafted_tokens >= st.accepted_draft_tokens >= 0
    assert (
        st.drafted_tokens > 0 and 0 <= st.draft_k <= 6 and isinstance(st.drafting_turned_off, bool)
    )
    assert not st.drafting_turned_off or st.draft_k == 0


def test_llama_cpp_logs_reach_the_parents_logger(worker):
    import logging

    class Keep(logging.Handler):  # on the logger itself: other tests may stop propagation above it
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    logger = logging.getLogger("vibechat.llama_cpp")
    keep, level = Keep(), logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    try:
        worker.load()
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    lines = [r.getMessage() for r in keep.records]
    assert any(line.startswith("loaded ") for line in lines)
    assert any("llama_model_loader" in line or "load_tensors" in line for line in lines)


def test_cancel_during_prompt_evaluation_and_mid_reply(rambling_worker):
    rambling_worker.load()
    # the long prompt: cancelled while it is evaluated (it takes seconds), then mid-reply
    stream = rambling_worker.stream_chat([ChatMessage("user", LONG_PROMPT)], LONG_REPLY)
    # Cancelled again and again until the reply ends: a cancel sent before the engine process took
    # the request up (a loaded machine) is no cancel of it, and a single timer raced with that.
    ended = threading.Event()
    canceller = threading.Thread(
        target=lambda: [rambling_worker.cancel() for _ in iter(lambda: ended.wait(0.2), True)]
    )
    canceller.start()
    try:
        events = list(stream)
    finally:
        ended.set()
        canceller.join()
    done = events[-1]
    assert isinstance(done, GenerationDone) and done.finish_reason == "cancelled"
    assert done.stats.completion_tokens <= 1

    pieces: list[str] = []
    for event in rambling_worker.stream_chat(STORY, LONG_REPLY):
        if isinstance(event, TextDelta):
            pieces.append(event.text)
            if len(pieces) == 3:
                rambling_worker.cancel()
        elif isinstance(event, GenerationDone):
            done = event
    assert done.finish_reason == "cancelled" and done.stats.completion_tokens < 100
    assert done.text == "".join(pieces)
    assert_answers(rambling_worker)  # and the next request is not cancelled


def test_closing_the_stream_early_stops_the_reply_and_the_next_one_runs(rambling_worker):
    stream = rambling_worker.stream_chat(STORY, LONG_REPLY)
    assert isinstance(next(stream), TextDelta)
    stream.close()
    assert_answers(rambling_worker)


def test_cancel_while_loading(worker):
    worker.cancel()  # nothing running: a no-op

    # The load is cancelled while the child starts (it takes a while to import llama.cpp);
    # a large model's load would be stopped between tensors the same way (llama.cpp's
    # progress callback), but the starter's takes milliseconds.
    def cancel_once_sent() -> None:
        wait_until(lambda: worker._busy is not None, "the load request")
        worker.cancel()

    canceller = threading.Thread(target=cancel_once_sent)
    canceller.start()
    with pytest.raises(LoadCancelled):
        worker.load()
    canceller.join(WAIT_S)
    assert worker.pid is None
    assert worker.load().architecture == "gemma3"


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_killed_mid_reply(rambling_worker, sig):
    rambling_worker.load()
    pieces: list[str] = []
    with pytest.raises(EngineCrashed) as caught:
        for event in rambling_worker.stream_chat(STORY, LONG_REPLY):
            if isinstance(event, TextDelta):
                pieces.append(event.text)
                if len(pieces) == 3:
                    os.kill(rambling_worker.pid, sig)
    message = str(caught.value)
    assert "\n" not in message and sig.name in message
    assert re.search(r"mid-reply after \d+ tokens", message)
    assert "".join(pieces).strip()  # the partial text was yielded before the error
    report = report_of(caught.value).read_text()
    assert (
        sig.name in report
        and "last 50 llama.cpp log lines (INFO and above)" in report
        and "loaded " in report
    )
    assert "vibechat: " in report and "llama-cpp-python: 0." in report
    assert "repack = off" in report
    assert_answers(rambling_worker)  # a fresh child
    assert_answers(rambling_worker)


@pytest.mark.parametrize(
    "end, said",
    [
        ("SIGSEGV", "crashed (SIGSEGV)"),
        ("SIGABRT", "crashed (SIGABRT)"),
        ("exit3", "exited unexpectedly (status 3)"),
    ],
)
def test_the_crash_hook_mid_reply(rambling_worker, monkeypatch, end, said):
    """The hook's "reply" stage (what the real-process chat tests use): the child ends right
    after it sent the reply's first piece, every time, without racing a signal: by a signal
    (a segfault; an abort, as a failed GGML_ASSERT ends it) or by exiting."""
    monkeypatch.setenv(CRASH_HOOK_ENV, f"reply:{end}")
    pieces: list[str] = []
    with pytest.raises(EngineCrashed) as caught:
        for event in rambling_worker.stream_chat(STORY, LONG_REPLY):
            if isinstance(event, TextDelta):
                pieces.append(event.text)
    assert said in str(caught.value) and re.search(
        r"mid-reply after \d+ tokens?;", str(caught.value)
    )
    assert len(pieces) == 1 and pieces[0]
    assert said in report_of(caught.value).read_text()
    monkeypatch.delenv(CRASH_HOOK_ENV)
    assert_answers(rambling_worker)


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_killed_while_the_prompt_is_evaluated(worker, sig):
    worker.load()
    turn1 = [ChatMessage("user", "Hello"), ChatMessage("assistant", "Hi! How can I help?")]
    _, first = collect(worker, turn1[:1], GREEDY)
    killer = threading.Timer(0.5, lambda: os.kill(worker.pid, sig))
    killer.start()
    with pytest.raises(EngineCrashed) as caught:
        list(worker.stream_chat([*turn1, ChatMessage("user", LONG_PROMPT)], LONG_REPLY))
    killer.join()
    assert sig.name in str(caught.value) and "while evaluating the prompt" in str(caught.value)
    assert sig.name in report_of(caught.value).read_text()
    # the next request evaluates the whole conversation in the fresh child
    done = assert_answers(worker, [*turn1, ChatMessage("user", "Thanks!")])
    assert done.stats.prompt_tokens_evaluated == done.stats.prompt_tokens


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGKILL"])
def test_killed_while_loading_then_restarts(worker, monkeypatch, sig):
    monkeypatch.setenv(CRASH_HOOK_ENV, f"load:{sig}")
    with pytest.raises(EngineCrashed) as caught:
        worker.load()
    message = str(caught.value)
    assert not isinstance(caught.value, EngineCrashLoop)
    assert sig in message and "while loading gemma-3-270m" in message and "\n" not in message
    report = report_of(caught.value).read_text()
    assert sig in report and "log lines" in report
    monkeypatch.delenv(CRASH_HOOK_ENV)
    assert_answers(worker)


def test_killed_from_outside_while_loading(worker):
    with pytest.raises(EngineCrashed) as caught:
        worker.load(
            on_progress=lambda _f: os.kill(worker.pid, signal.SIGKILL) if worker.pid else None
        )
    assert "SIGKILL" in str(caught.value) and "while loading" in str(caught.value)
    assert_answers(worker)


def test_a_child_that_crashes_again_right_after_a_restart_is_not_restarted(
    starter_path, worker, monkeypatch
):
    monkeypatch.setenv(CRASH_HOOK_ENV, "load:SIGSEGV")
    worker.options = options(starter_path, kv_cache_type="q8_0")
    with pytest.raises(EngineCrashed) as first:
        worker.load()
    assert not isinstance(first.value, EngineCrashLoop)
    with pytest.raises(EngineCrashLoop) as again:
        list(worker.stream_chat(HELLO, GREEDY))
    message = str(again.value)
    assert "\n" not in message and "SIGSEGV" in message and "--kv-cache-type f16" in message
    report_of(again.value)
    monkeypatch.delenv(CRASH_HOOK_ENV)
    # the same options: refused at once, no child started
    with pytest.raises(EngineCrashLoop):
        worker.load()
    assert worker.pid is None
    worker.options = options(starter_path)  # the setting changed: it starts again
    assert_answers(worker)


def test_crash_loop_names_a_setting_for_a_crash_in_the_first_request(
    starter_path, worker, monkeypatch
):
    worker.load()
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)  # dies between requests: reported, and the next call restarts it
    wait_until(lambda: worker._proc.poll() is not None, "the child to die")
    monkeypatch.setenv(CRASH_HOOK_ENV, "prompt:SIGABRT")  # for the children started from now on
    assert worker.count_tokens(HELLO) > 0 and worker.pid != pid
    assert len(list((Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes").iterdir())) == 1
    with pytest.raises(EngineCrashLoop) as caught:
        worker.prefill(HELLO)  # the restarted child's first request
    assert "SIGABRT" in str(caught.value) and "a smaller --ctx" in str(caught.value)


def test_close_ends_the_child(worker):
    worker.load()
    pid = worker.pid
    assert pid is not None
    worker.close()
    assert worker.pid is None
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)  # reaped: gone
            time.sleep(0.05)


def test_a_load_error_crosses_the_process_boundary(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    backend = WorkerBackend(options(bad))
    try:
        with pytest.raises(VibechatError) as caught:
            backend.load()
        assert type(caught.value).__name__ == "ModelFileError"
    finally:
        backend.close()


def test_the_setting_named_after_repeated_crashes(starter_path):
    from types import SimpleNamespace

    from vibechat.engine.llama.crash_report import suggest_setting

    auto = SimpleNamespace(repack="auto", gpu_layers=0)  # never loaded: only its settings are read
    assert suggest_setting(auto, None, "while evaluating the prompt", -11).startswith(
        "--repack off"
    )
    gpu = options(starter_path, gpu_layers=20)
    assert suggest_setting(gpu, None, "while loading x", -6).startswith("--n-gpu-layers 0")
    plain = options(starter_path)
    assert (
        suggest_setting(plain, None, "mid-reply after 3 tokens", -9)
        == "a smaller --ctx or another model"
    )
    drafting = options(starter_path, speculative="prompt-lookup")  # each setting named by its flag
    assert suggest_setting(drafting, None, "mid-reply after 3 tokens", -11) == (
        "--draft off, a smaller --ctx or another model"
    )


def test_the_child_ends_when_the_chat_process_dies(starter_path):
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from vibechat.engine.settings.knobs import LlamaCppOptions\n"
        "from vibechat.engine.llama.worker import WorkerBackend\n"
        "b = WorkerBackend(LlamaCppOptions(model_path=Path(sys.argv[1]), "
        "context_size=2048, repack='off'))\n"
        "b.load()\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(starter_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait(WAIT_S)

    def gone() -> bool:
        if not Path("/proc").is_dir():  # no /proc (macOS): the adopting init reaps it at once
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            return False
        try:
            state = Path(f"/proc/{child}/status").read_text()
        except OSError:
            return True
        return "\nState:\tZ" in state  # exited, not reaped yet by whoever adopted it

    wait_until(gone, "the orphaned engine process to exit")


def test_a_reply_that_crashes_twice_at_its_start_is_not_retried(worker, monkeypatch):
    monkeypatch.setenv(CRASH_HOOK_ENV, "prompt:SIGSEGV")
    with pytest.raises(EngineCrashed) as first:
        list(worker.stream_chat(HELLO, GREEDY))
    assert not isinstance(first.value, EngineCrashLoop)
    assert "SIGSEGV" in str(first.value) and "while evaluating the prompt" in str(first.value)
    with pytest.raises(EngineCrashLoop) as again:
        list(worker.stream_chat(HELLO, GREEDY))
    assert "again right after a restart" in str(again.value) and "a smaller --ctx" in str(
        again.value
    )
    assert len(list((Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes").iterdir())) == 2


def test_the_chat_process_never_loads_libllama(starter_path):
    """The chat builds its backend with make_backend(worker=True): the model loads and answers
    in the worker, and the chat's own process never imports llama_cpp (libllama)."""
    script = (
        "import sys\n"
        "import vibechat.app.tui.shell.app\n"
        "from vibechat.app.backends import make_backend\n"
        "from vibechat.engine.settings.knobs import EngineSettings\n"
        "from vibechat.engine.turns.backend import ChatMessage, GenerationDone\n"
        "from vibechat.engine.settings.params import SamplingParams\n"
        f"settings = EngineSettings(model={str(starter_path)!r}, context_size=512, repack='off', "
        f"threads={worker_threads()!r})\n"
        "backend = make_backend(settings, worker=True)\n"
        "info = backend.load()\n"
        "events = list(backend.stream_chat([ChatMessage('user', 'Hi')], "
        "SamplingParams(temperature=0, max_tokens=4)))\n"
        "assert isinstance(events[-1], GenerationDone) and events[-1].stats.completion_tokens > 0\n"
        "backend.close()\n"
        "loaded = sorted(m for m in sys.modules if m == 'llama_cpp' or "
        "m.startswith('llama_cpp.'))\n"
        "print('llama_cpp modules:', loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "llama_cpp modules: []"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_crash_reports_are_private_whatever_the_umask(starter_path):
    """Mode 0600 from the start (never briefly readable by others), in a 0700 folder, even
    with a permissive umask and a crashes/ folder an older vibechat made world-readable."""
    from vibechat.engine.llama.crash_report import write_crash_report
    from vibechat.engine.paths import crash_dir

    folder = crash_dir()
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    old = os.umask(0)
    try:
        report = write_crash_report(
            "crashed (SIGSEGV)",
            "mid-reply after 3 tokens",
            -11,
            ["INFO loaded x"],
            ["Fatal Python error"],
            options(starter_path),
            None,
        )
    finally:
        os.umask(old)
    assert report is not None and report.parent == folder
    assert_private(report)
    text = report.read_text()
    assert "SIGSEGV (signal 11)" in text and "repack = off" in text and "Fatal Python error" in text
    # a second report in the same folder: a new file, never one written over
    again = write_crash_report(
        "crashed (SIGKILL)", "while loading x", -9, [], [], options(starter_path), None
    )
    assert again is not None and again != report and report.read_text() == text
    assert_private(again)


def test_a_preload_is_taken_over_by_the_next_load_with_its_progress(starter_path, worker):
    """The chat starts its engine's load before its screen opens (``preload``): the first
    load() takes that load over, in the same engine process, and the engine answers."""
    worker.preload()
    wait_until(lambda: worker.pid is not None, "the engine process the preload starts")
    child = worker.pid
    progress: list[float] = []
    info = worker.load(on_progress=progress.append)
    assert info.architecture == "gemma3" and worker.describe() == info
    assert progress and progress[-1] == pytest.approx(1.0)  # where the load stood, then the rest
    assert worker.pid == child  # taken over, not loaded again
    assert_answers(worker)
    assert worker.load() == info and worker.pid == child


def test_a_crash_during_a_preload_is_reported_once_by_the_call_that_takes_it_over(
    starter_path, worker, monkeypatch
):
    monkeypatch.setenv(CRASH_HOOK_ENV, "load:SIGKILL")
    worker.preload()
    with pytest.raises(EngineCrashed) as crash:
        worker.load()
    assert "SIGKILL" in str(crash.value) and "while loading" in str(crash.value)
    report = report_of(crash.value)
    monkeypatch.delenv(CRASH_HOOK_ENV)
    assert worker.load().architecture == "gemma3"  # the next call loads afresh
    assert sorted(report.parent.iterdir()) == [report]  # one crash, one report
    assert_answers(worker)


def test_closing_during_a_preload_ends_the_engine_and_reports_no_crash(starter_path):
    backend = WorkerBackend(options(starter_path))
    backend.preload()
    wait_until(lambda: backend.pid is not None, "the engine process the preload starts")
    child = backend.pid
    backend.close()
    assert backend.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # ended and reaped
    crashes = Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes"
    assert not crashes.exists() or not any(crashes.iterdir())


def test_a_process_started_ahead_of_its_settings_loads_the_model(starter_path):
    """The chat starts its engine process before it has read its config (``EngineAhead``,
    cli.py): the backend made once the model is known loads it in that process, which has
    imported llama.cpp's bindings meanwhile, and the engine answers."""
    ahead = EngineAhead()
    child = ahead.pid
    assert child is not None
    backend = WorkerBackend(options(starter_path), ahead)
    try:
        backend.preload()
        assert backend.load().architecture == "gemma3"
        assert backend.pid == child  # the process started ahead, not a fresh one
        assert ahead.pid is None and ahead.take() is None  # taken once
        assert_answers(backend)
    finally:
        backend.close()
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # ended with the backend, and reaped


def test_a_process_started_ahead_that_ended_before_it_was_wanted_is_replaced(starter_path):
    """An engine process started ahead that is gone when the model is known (killed from
    outside) is no crash: the backend starts a fresh one and loads the model there."""
    ahead = EngineAhead()
    child = ahead.pid
    assert child is not None
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: is_gone_or_zombie(child), "the process started ahead ends")
    backend = WorkerBackend(options(starter_path), ahead)
    try:
        assert backend.load().architecture == "gemma3"
        assert backend.pid not in (None, child)
        crashes = Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes"
        assert not crashes.exists() or not any(crashes.iterdir())
    finally:
        backend.close()


def is_gone_or_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------- a hung engine
HUNG_BOUND_S = 15  # today's (unwatched) code never gets there: the engine stays stopped


def is_stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP took effect): its state in /proc/PID/stat is T."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] in ("T", "t")


def is_gone(pid: int) -> bool:
    """Ended and reaped (no /proc entry left, not even a zombie)."""
    return not Path(f"/proc/{pid}").exists()


def end_for_good(pid: int | None) -> None:
    """A test's cleanup: the engine process it stopped never outlives it."""
    if pid is not None:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def run_in_thread(work) -> tuple[threading.Thread, dict]:
    """``work()`` in a thread: its result or its exception lands in the dict ("result"/"error")."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads process states in /proc"
)


@needs_proc
def test_a_stopped_engine_that_does_not_answer_a_cancel_is_ended_and_the_next_reply_runs(
    rambling_worker,
):
    """SIGSTOP mid-reply, then cancel(): the engine cannot acknowledge it, so the watchdog ends
    it and the reply fails like a crash, in one line that says so, with the text so far; the
    next request starts a fresh engine (not counted as a crash loop)."""
    rambling_worker.load()
    pieces: list[str] = []
    stopped_pid: list[int] = []

    def consume() -> None:
        for event in rambling_worker.stream_chat(STORY, LONG_REPLY):
            if isinstance(event, TextDelta):
                pieces.append(event.text)
                if len(pieces) == 3:  # the reply is under way: stop its engine, then ask it to stop
                    pid = rambling_worker.pid
                    stopped_pid.append(pid)
                    os.kill(pid, signal.SIGSTOP)
                    wait_until(lambda pid=pid: is_stopped(pid), "the engine process to be stopped")
                    rambling_worker.cancel()
                    cancelled.set()

    cancelled = threading.Event()
    thread, outcome = run_in_thread(consume)
    try:
        wait_until(lambda: cancelled.is_set() or not thread.is_alive(), "the reply's third piece")
        thread.join(HUNG_BOUND_S)
        assert not thread.is_alive(), (
            f"the stopped engine's reply did not end within {HUNG_BOUND_S} s of the stop"
        )
    finally:
        end_for_good(stopped_pid[0] if stopped_pid else None)
        thread.join(WAIT_S)
    error = outcome.get("error")
    assert isinstance(error, EngineCrashed) and not isinstance(error, EngineCrashLoop), outcome
    message = str(error)
    assert "\n" not in message
    assert re.search(
        r"stopped responding mid-reply after \d+ tokens \(no answer to the stop request within "
        # The grace is 1.5 s, longer where the model's steps are slow (a busy host).
        r"[0-9.]+ s\), so vibechat ended it; it restarts with the next request; crash report: ",
        message,
    )
    assert "".join(pieces).strip()  # the text so far was yielded before the error
    report = report_of(error).read_text()
    assert "stopped responding" in report and "SIGKILL" in report
    assert is_gone(stopped_pid[0]) and rambling_worker.pid is None
    assert_answers(rambling_worker)  # a fresh engine process
    assert_answers(rambling_worker)


@needs_proc
def test_a_load_stopped_with_its_engine_stopped_ends_the_engine(worker):
    """A load cancelled while its engine process is stopped: the same watchdog."""
    stopped_pid: list[int] = []

    def stop_then_cancel(_fraction: float) -> None:  # the load is under way in the engine process
        if not stopped_pid:
            pid = worker.pid
            stopped_pid.append(pid)
            os.kill(pid, signal.SIGSTOP)
            wait_until(lambda: is_stopped(pid), "the engine process to be stopped")
            worker.cancel()

    thread, outcome = run_in_thread(lambda: worker.load(on_progress=stop_then_cancel))
    try:
        thread.join(HUNG_BOUND_S)
        assert not thread.is_alive(), (
            f"the stopped engine's load did not end within {HUNG_BOUND_S} s"
        )
    finally:
        end_for_good(stopped_pid[0] if stopped_pid else None)
        thread.join(WAIT_S)
    error = outcome.get("error")
    assert isinstance(error, EngineCrashed), outcome
    assert "stopped responding while loading gemma-3-270m" in str(error)
    assert "no answer to the stop request" in str(error)
    assert is_gone(stopped_pid[0])
    assert worker.load().architecture == "gemma3"


def test_a_stop_gives_a_model_with_slow_steps_the_time_of_its_step(starter_path, monkeypatch):
    """A model whose every step takes longer than the watchdog's grace here (a big model on the
    CPU: one llama_decode cannot be interrupted; the "slow" hook sleeps 1.7 s a piece) is not
    taken for a hung one when stopped in the middle of a step: the stop waits for the step, the
    reply ends cancelled, and the engine process lives on with its model. Before, the watchdog
    ended it 1.5 s after the stop, and the next request loaded the model again."""
    import vibechat.engine.llama.worker_watchdog as worker_module

    monkeypatch.setenv(CRASH_HOOK_ENV, "reply:slow1.7")
    slow = WorkerBackend(options(starter_path, prompt_format="gemma"))
    try:
        slow.load()
        pid = slow.pid
        pieces = 0
        done = None
        for event in slow.stream_chat(STORY, LONG_REPLY):
            if isinstance(event, TextDelta):
                pieces += 1
                if pieces == 3:  # two slow steps seen; the child now sleeps in its third
                    slow.cancel()
            elif isinstance(event, GenerationDone):
                done = event
        assert done is not None and done.stats.finish_reason == "cancelled"
        assert slow.pid == pid  # not ended as hung
        assert (
            slow._pipes.heard.stop_grace(worker_module.STOP_GRACE_S)
            > 1.7 + worker_module.STOP_GRACE_S
        )
    finally:
        slow.close()


@needs_proc
def test_quitting_after_a_stop_does_not_wait_the_grace_of_a_model_with_slow_steps(
    starter_path, monkeypatch
):
    """A stop on a model whose steps are slow here (the "slow" hook: 2 s a piece) gets its longer
    grace (1.5 s + twice the step), which keeps the engine loaded; a quit does not wait for it:
    with the engine then not answering at all (SIGSTOP), ``quit()`` after the stop ends it within
    ``QUIT_GRACE_S`` (and a reap), well inside the stop's grace; the call waiting on it returns
    with "closed", no crash report is written, and the engine process is gone. Before, quitting
    waited out the stop's grace (the chat took 6.2 s to quit)."""
    import vibechat.engine.llama.worker_watchdog as worker_module

    monkeypatch.setenv(CRASH_HOOK_ENV, "reply:slow2.0")
    slow = WorkerBackend(options(starter_path, prompt_format="gemma"))
    pid = None
    try:
        slow.load()
        pid = slow.pid
        pieces: list[str] = []

        def consume() -> None:
            for event in slow.stream_chat(STORY, LONG_REPLY):
                if isinstance(event, TextDelta):
                    pieces.append(event.text)

        thread, outcome = run_in_thread(consume)
        wait_until(
            lambda: len(pieces) >= 2 or not thread.is_alive(), "two slow pieces of the reply"
        )
        assert thread.is_alive(), outcome  # still replying: the starter rambles in Gemma's format
        grace = slow._pipes.heard.stop_grace(worker_module.STOP_GRACE_S)
        assert grace > worker_module.STOP_GRACE_S + 2  # a slow model's stop: its steps' time more
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: is_stopped(pid), "the engine process to be stopped")
        slow.cancel()  # the stop (its watchdog would wait the whole grace)
        started = time.monotonic()
        slow.quit()
        thread.join(grace)
        took = time.monotonic() - started
        assert not thread.is_alive(), f"quitting waited for the stop's grace ({grace:.3g} s)"
        assert took < grace - 1  # within QUIT_GRACE_S and a reap, not the stop's grace
        error = outcome.get("error")
        assert isinstance(error, EngineCrashed) and "closed" in str(error), outcome
        assert is_gone(pid)
        assert not (
            Path(os.environ["VIBECHAT_STATE_DIR"]) / "crashes"
        ).exists()  # a quit is no crash
    finally:
        end_for_good(pid)
        slow.close()


def test_an_engine_that_acknowledges_a_cancel_but_never_stops_is_ended(
    rambling_worker, monkeypatch
):
    """The engine's request reader answers the cancel, but the reply never ends (a native call
    that never returns: the "hang" hook blocks the engine's main thread after the first piece):
    acknowledged or not, the one deadline after a stop is the watchdog's STOP_GRACE_S (under
    2 s): the engine is killed then, and the message says so (a deadline of 10 s before)."""
    import vibechat.engine.llama.worker_watchdog as worker_module

    assert (
        worker_module.STOP_GRACE_S < 2
    )  # the watchdog's one deadline: Esc ends a reply within 2 s
    monkeypatch.setenv(CRASH_HOOK_ENV, "reply:hang")
    pieces: list[str] = []
    hung_pid: list[int] = []

    def consume() -> None:
        for event in rambling_worker.stream_chat(STORY, LONG_REPLY):
            if isinstance(event, TextDelta):
                pieces.append(event.text)
                hung_pid.append(rambling_worker.pid)
                rambling_worker.cancel()

    thread, outcome = run_in_thread(consume)
    try:
        wait_until(lambda: hung_pid or not thread.is_alive(), "the reply's first piece")
        thread.join(HUNG_BOUND_S)
        assert not thread.is_alive(), (
            f"the hung engine's reply did not end within {HUNG_BOUND_S} s of the stop"
        )
    finally:
        end_for_good(hung_pid[0] if hung_pid else None)
        thread.join(WAIT_S)
    error = outcome.get("error")
    assert isinstance(error, EngineCrashed), outcome
    assert len(pieces) == 1 and pieces[0]
    assert re.search(
        r"stopped responding mid-reply after \d+ tokens? \(the request did not end within "
        r"1\.5 s of "
        r"the stop request\), so vibechat ended it",
        str(error),
    ), str(error)
    report = report_of(error).read_text()
    assert "SIGKILL" in report
    assert "in _crash_hook" in report and "in _stream" in report  # where its main thread hung
    assert is_gone(hung_pid[0])
    monkeypatch.delenv(CRASH_HOOK_ENV)
    assert_answers(rambling_worker)


@needs_proc
def test_a_slow_engine_that_nobody_stopped_is_not_taken_for_a_hung_one(
    rambling_worker, monkeypatch
):
    """Only an unanswered cancel is a deadline: an engine that says nothing for longer than the
    watchdog's grace (stopped here, then continued) while nobody asked it to stop goes on."""
    import vibechat.engine.llama.worker_watchdog as worker_module

    monkeypatch.setattr(worker_module, "STOP_GRACE_S", 0.2)
    rambling_worker.load()
    pid = rambling_worker.pid
    count = 0
    done = None
    try:
        for event in rambling_worker.stream_chat(STORY, GREEDY):
            if isinstance(event, TextDelta):
                count += 1
                if count == 1:
                    os.kill(pid, signal.SIGSTOP)
                    wait_until(lambda: is_stopped(pid), "the engine process to be stopped")
                    time.sleep(4 * worker_module.STOP_GRACE_S)  # silent for longer than the grace
                    os.kill(pid, signal.SIGCONT)
            elif isinstance(event, GenerationDone):
                done = event
    finally:
        end_for_good(None if done is not None else pid)
    assert done is not None and done.finish_reason == "length" and rambling_worker.pid == pid


@needs_proc
def test_close_ends_a_stopped_engine(rambling_worker):
    """close() (quitting) never waits on the engine: a stopped one ignores SIGTERM and the
    close request until continued, so it is killed; it is reaped, not left behind."""
    rambling_worker.load()
    pid = rambling_worker.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: is_stopped(pid), "the engine process to be stopped")
        thread, outcome = run_in_thread(rambling_worker.close)
        thread.join(HUNG_BOUND_S)
        assert not thread.is_alive(), f"close() did not return within {HUNG_BOUND_S} s"
        assert "error" not in outcome
        assert is_gone(pid) and rambling_worker.pid is None
    finally:
        end_for_good(pid)
