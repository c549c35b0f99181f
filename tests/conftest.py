"""Shared fixtures. Every test gets its own user directories under tmp_path, and no
``VIBECHAT_*`` variable from outside: nothing touches the real home, config or caches."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The tests live in folders that mirror the code (tests/engine/<room>/, tests/app/, tests/app/tui/).
# A test module may import a helper from another by its name (``from test_worker import
# needs_proc``), as the shared modules here are imported (``from fakes import ...``): every folder
# is on the path from the start, whichever file pytest happens to import first.
for _folder in sorted({p.parent for p in Path(__file__).resolve().parent.rglob("test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


def _count_fixed_costs() -> None:
    """With ``VIBECHAT_TEST_COUNTS=path`` set, count the suite's fixed costs into ``path`` (model
    loads, engine processes, ``vibechat`` processes, per test: tests/counting/sitecustomize.py):
    in this process, and in every Python process the tests start (the folder on PYTHONPATH).
    Opt-in, for measuring; without the variable nothing changes. The path travels on as
    ``TESTS_COUNTS_FILE``: ``user_dirs`` clears every ``VIBECHAT_*`` variable for each test."""
    path = os.environ.get("VIBECHAT_TEST_COUNTS")
    if not path:
        return
    import importlib.util

    os.environ["TESTS_COUNTS_FILE"] = str(Path(path).resolve())
    folder = Path(__file__).resolve().parent / "counting"
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    spec = importlib.util.spec_from_file_location(
        "vibechat_test_counts", folder / "sitecustomize.py"
    )
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


_count_fixed_costs()


def _hang_ups_end_processes() -> None:
    """A suite started under ``nohup`` ignores SIGHUP, and every process it starts inherits
    that: the chat rightly keeps ignoring a hang-up its starter chose to ignore (app/terminal.py),
    so the tests that hang up on it would wait for an end that never comes. This process, each
    xdist worker, and so every process the tests start, takes SIGHUP as from a terminal."""
    import signal

    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None and signal.getsignal(hangup) is signal.SIG_IGN:
        signal.signal(hangup, signal.SIG_DFL)


_hang_ups_end_processes()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile vibechat's own modules once, before any test starts a ``vibechat`` process.
    An installed package has its bytecode written at install time; this editable checkout has
    none where ``PYTHONDONTWRITEBYTECODE`` is set (as on the CI machines), so each of the suite's
    few hundred ``vibechat`` processes would compile ~100 modules again (~0.2 s each).
    Python reads bytecode even when told not to write it; stale files are recompiled here."""
    import compileall

    for folder in ("app", "engine", "themes"):
        compileall.compile_dir(str(REPO / folder), quiet=2, workers=1)


# The fixture every real-model fixture is built on (starter_path, starter_installed, llama_backend,
# gemma_llama_backend, llama_server and the modules' own): a test that uses it, however
# indirectly, runs the real starter model.
MODEL_FIXTURE = "starter_cache"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses the real model ``model``, whether or not it says so, before
    ``-m`` selects: ``-m "not model"`` (``python3 dev.py test --quick``) then leaves out every
    one of them, and no starter model is assembled or loaded."""
    for item in items:
        if MODEL_FIXTURE in getattr(item, "fixturenames", ()) and not item.get_closest_marker(
            "model"
        ):
            item.add_marker(pytest.mark.model)


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT, as Ctrl-C in a terminal
    would: a shell's background job (how CI may run us) starts with SIGINT ignored, and
    children inherit that."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def collect(backend, messages, params, **tools):
    """A reply's text deltas and its final ``GenerationDone`` (there must be one); ``tools``:
    ``tools=`` and ``tool_choice=`` for ``stream_chat``."""
    from vibechat.engine.turns.backend import GenerationDone, TextDelta

    deltas, done = [], None
    for event in backend.stream_chat(messages, params, **tools):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return deltas, done


def same_start(a: str, b: str, words: int = 8) -> bool:
    """Whether two replies to one request, computed with other batch shapes (a reused KV-cache
    prefix, drafted tokens, a rebuilt cache), begin with the same ``words`` words.

    llama.cpp evaluates a batch of tokens with other kernels than a single token, and how they
    round depends on the CPU (AVX-512, AMX, repacked weights): such replies may part at a
    near-tie later on, so bit-identical text is not asserted. A wrong KV cache or a wrong draft
    shows at once."""
    return a.split()[:words] == b.split()[:words] and bool(a.strip()) == bool(b.strip())


VIBECHAT_BIN = Path(sys.executable).with_name("vibechat")


@contextlib.contextmanager
def read_only_dir(path: Path):
    """``path`` as a directory nobody can write to, root included: permissions for a
    normal user; for root (CI containers) the immutable attribute, else the test skips."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a directory read-only for root here (no chattr +i)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.fixture
def history(tmp_path: Path):
    """An open, empty history database in this test's folder (engine/chat/history.py), closed
    after."""
    from vibechat.engine.chat.history import History

    with History(tmp_path / "history.db") as db:
        yield db


@pytest.fixture
def stub():
    """A real OpenAI-compatible HTTP server on 127.0.0.1 (tests/openai_stub.py); ``stub.backend()``
    is vibechat's remote backend pointed at it."""
    from openai_stub import StubServer

    with StubServer() as server:
        yield server


@pytest.fixture(autouse=True)
def vibechat_logging():
    """The CLI, run in process, sets the ``vibechat`` logger up for a terminal (no propagation,
    its own handlers) and the root and libraries' loggers for the log file (app/logfile.py): put
    them back after each test, so that a later test's ``caplog`` sees
    the records (they reach pytest's handler on the root logger by propagation)."""
    from vibechat.app.logfile import THIRD_PARTY

    names = (
        "vibechat",
        "",
        *THIRD_PARTY,
    )  # "": the root logger, which the log file's handler joins
    saved = {
        name: (
            logging.getLogger(name).propagate,
            list(logging.getLogger(name).handlers),
            logging.getLogger(name).level,
        )
        for name in names
    }
    yield
    for name, (propagate, handlers, level) in saved.items():
        logger = logging.getLogger(name)
        logger.propagate, logger.handlers[:] = propagate, handlers
        logger.setLevel(level)


@pytest.fixture(autouse=True)
def kept_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pilot tests read what the app notified through tests/helpers.py, the timed-out toasts
    too: a notice is not lost to a slow CPU between the app's notify and the test's read."""
    from helpers import keep_notifications

    keep_notifications(monkeypatch)


@pytest.fixture(autouse=True)
def user_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> dict[str, Path]:
    dirs = {name: tmp_path / "user" / name for name in ("home", "config", "data", "cache", "state")}
    for path in dirs.values():
        path.mkdir(parents=True)
    for name in list(os.environ):  # VIBECHAT_CONFIG, VIBECHAT_TEMPERATURE ...: none leak in
        if name.startswith("VIBECHAT_") or name == "OPENAI_API_KEY":  # nor a real API key
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(dirs["home"]))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(dirs["config"]))
    monkeypatch.setenv("XDG_DATA_HOME", str(dirs["data"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(dirs["cache"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(dirs["state"]))
    monkeypatch.setenv("VIBECHAT_CONFIG_DIR", str(dirs["config"] / "vibechat"))
    monkeypatch.setenv("VIBECHAT_DATA_DIR", str(dirs["data"] / "vibechat"))
    monkeypatch.setenv("VIBECHAT_CACHE_DIR", str(dirs["cache"] / "vibechat"))
    monkeypatch.setenv("VIBECHAT_STATE_DIR", str(dirs["state"] / "vibechat"))
    monkeypatch.setenv("HF_HOME", str(dirs["cache"] / "huggingface"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # The chat's fake backends answer every request with their scripted reply: a title written by
    # the model would be a second request after each first reply. Its tests turn it back on.
    monkeypatch.setenv("VIBECHAT_MODEL_TITLES", "0")
    if request.node.get_closest_marker("model") or "starter_installed" in request.fixturenames:
        # Real-model tests run llama.cpp in the configuration that works on every CPU (repacking
        # off: engine/llama/repack.py), named here so that it is exercised on any machine; the tests
        # of "auto" itself unset it. (Other tests see no VIBECHAT_* variable: the config's
        # defaults.)
        monkeypatch.setenv("VIBECHAT_REPACK", "off")
        if worker_threads():
            monkeypatch.setenv("VIBECHAT_THREADS", str(worker_threads()))
    return dirs


def worker_threads() -> int | None:
    """llama.cpp's threads for a real-model test when pytest-xdist runs the suite on several
    workers: the cores shared out between them (None: one worker, the engine's default). Two
    workers each spinning two threads on two cores would wait on each other at every step."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


@pytest.fixture(scope="session")
def starter_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir holding the assembled starter model, assembled once per run: under
    pytest-xdist (``dev.py test`` runs the suite on every core) the workers share one copy,
    assembled by the first worker that needs it while the others wait on a lock."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = root / "starter-cache"
    with _exclusive(root / "starter-cache.lock"):
        done = cache / ".assembled"
        if not done.exists():
            cache.mkdir(exist_ok=True)
            old = os.environ.get("VIBECHAT_CACHE_DIR")
            os.environ["VIBECHAT_CACHE_DIR"] = str(cache)
            try:
                from vibechat.engine.models.starter import starter_model_path

                starter_model_path()
            finally:
                if old is None:
                    os.environ.pop("VIBECHAT_CACHE_DIR", None)
                else:
                    os.environ["VIBECHAT_CACHE_DIR"] = old
            done.touch()
    return cache


@contextlib.contextmanager
def _exclusive(path: Path):
    """An exclusive lock on ``path`` between this run's worker processes."""
    import fcntl

    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def starter_path(starter_cache: Path) -> Path:
    return next((starter_cache / "starter").glob("*.gguf"))


@pytest.fixture
def starter_installed(starter_cache: Path, user_dirs: dict[str, Path]) -> Path:
    """Put the session's starter model into this test's cache dir (hard links, no copy),
    so code that looks for the default model finds it without re-assembling."""
    src = starter_cache / "starter"
    dst = user_dirs["cache"] / "vibechat" / "starter"
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        target = dst / item.name
        try:
            os.link(item, target)
        except OSError:
            shutil.copy2(item, target)
    # The marker records size and mtime, which a hard link shares.
    marker = next(dst.glob("*.verified.json"))
    json.loads(marker.read_text())
    return next(dst.glob("*.gguf"))


@contextlib.contextmanager
def loaded_starter(starter_path: Path, **changes):
    """The starter loaded in this process with the tests' settings (a 4,096-token context,
    CPU repacking off: it runs on every CPU), ``changes`` to its options applied; closed after."""
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    backend = LlamaCppBackend(
        LlamaCppOptions(
            **{
                "model_path": starter_path,
                "context_size": 4096,
                "repack": "off",
                "threads": worker_threads(),
                **changes,
            }
        )
    )
    backend.load()
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def no_setting_variables(monkeypatch):
    """For the config's own tests: they see the variables they set, and only the folders'
    (``user_dirs`` sets a setting's variable for every other test); VIBECHAT_REPACK stays (a
    real model's tests need it)."""
    for name in list(os.environ):
        if name.startswith("VIBECHAT_") and not name.endswith("_DIR") and name != "VIBECHAT_REPACK":
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def llama_backend(starter_path: Path):
    """One loaded starter model for the whole session (loading costs ~1 s)."""
    with loaded_starter(starter_path) as backend:
        yield backend


@pytest.fixture
def backend(llama_backend):
    """The session's backend with an empty KV cache."""
    llama_backend.reset()
    yield llama_backend
    llama_backend.reset()


@pytest.fixture(scope="session")
def starter_projector(starter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Gemma 3 projector (tests/projector.py) that fits the starter model,
    written once per session: the local vision path's tests load it with ``mmproj_path``."""
    from projector import model_width, write_projector

    return write_projector(
        tmp_path_factory.mktemp("projector") / "mmproj-starter-test.gguf", model_width(starter_path)
    )


@pytest.fixture(scope="session")
def gemma_llama_backend(starter_path: Path):
    """The session's starter settings in Gemma's turn format (``prompt_format="gemma"``), loaded
    once: the starter's own format, the completion frame, ends its replies after a few words,
    while the tests of the decode loop's mechanics (streaming, cancel, limits, stop strings, turn
    tokens, drafting against plain decoding) need a model that writes on; Gemma's turns also
    give a template with turn tokens, as an instruct model's has."""
    with loaded_starter(starter_path, prompt_format="gemma") as backend:
        yield backend


@pytest.fixture
def gemma_backend(gemma_llama_backend):
    """``gemma_llama_backend`` with an empty KV cache."""
    gemma_llama_backend.reset()
    yield gemma_llama_backend
    gemma_llama_backend.reset()


@pytest.fixture(scope="session")
def llama_server(starter_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """llama-cpp-python's OpenAI-compatible server (its ``[server]`` extra, in the test
    extras) on 127.0.0.1 with the starter model, CPU repacking off (llama_server_safe.py:
    it runs on every CPU), for the whole session: yields its API
    root (``http://127.0.0.1:PORT/v1``). The model is served as ``starter`` with Gemma's
    chat format (the GGUF has no template). Killed at the end of the session."""
    import http.client
    import socket
    import time

    pytest.importorskip(
        "llama_cpp.server.app", reason="llama-cpp-python's [server] extra is not installed"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "llama_server_safe.py"),
            "--model",
            str(starter_path),
            "--model_alias",
            "starter",
            "--chat_format",
            "gemma",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited ({proc.returncode}): {log_path.read_text()[-2000:]}"
                )
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)  # never through a proxy
            try:
                conn.request("GET", "/v1/models")
                if conn.getresponse().status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama_cpp.server did not answer within 120 s: {log_path.read_text()[-2000:]}"
                )
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


from fakehub import fake_hub  # noqa: E402,F401  (fixture)
