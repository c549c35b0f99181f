#!/usr/bin/env python3
"""Set up a virtualenv for vibechat and run it, or run the test suite.

    python3 dev.py chat [ARGS...]   # set up, then open the chat (starter model by default) python3
    dev.py test [PYTEST ARGS...]   # set up with test extras, then run the whole suite (CI's
    command) python3 dev.py test --quick [PYTEST ARGS...]   # the inner loop: every test but the
    real model's python3 dev.py docs   # write the settings table of docs/USAGE.md from the
    settings' declarations python3 dev.py check   # the linter (ruff), mypy and the rule tests:
    seconds, run before the suite

Tests run on one pytest-xdist worker per core (two at least); ``-n 0`` runs them in one process.

Set-up is idempotent: the virtualenv lives in .venv and is only reinstalled when
pyproject.toml changes. pip's wheel cache keeps the compiled llama-cpp-python, so
only the first set-up on a machine pays for that build. Set-up prints only its own lines
(what it installs, and when llama-cpp-python is being built): pip's output goes to
.venv/setup.log, and its last lines are shown when a step fails. Pass CMAKE_ARGS (for
example CMAKE_ARGS="-DGGML_CUDA=on") to build llama.cpp with GPU support.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
SETUP_LOG = VENV / "setup.log"  # everything pip said during the last set-up
TAIL_LINES = 40  # of pip's output, shown when a step fails
STILL_BUILDING_S = 60.0  # how often a long build says it is still going
# pip's line as it starts building a wheel from source ("Building wheel for llama-cpp-python
# (pyproject.toml): started"): the one step of a set-up that takes minutes.
BUILDING = re.compile(r"Building wheel for (llama[-_]cpp[-_]python)\b", re.IGNORECASE)
BUILD_NOTE = (
    "dev.py: building llama-cpp-python from source (about 7 minutes on 2 cores; pip keeps "
    "the wheel, so later set-ups take seconds)"
)


def fail(message: str) -> None:
    print(f"dev.py: {message}", file=sys.stderr)
    raise SystemExit(1)


def llama_requirement() -> str:
    """The llama-cpp-python pin, read from pyproject.toml (one source of truth)."""
    match = re.search(r'"(llama-cpp-python[^"]*)"', (ROOT / "pyproject.toml").read_text())
    return match.group(1) if match else "llama-cpp-python"


def ensure_venv(extras: str) -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - dev.py runs under any python3: it says which
        fail(f"vibechat needs Python 3.10 or newer (this is {sys.version.split()[0]}).")
    if not PYTHON.exists():
        print(f"dev.py: creating virtualenv in {VENV}", flush=True)
        try:
            venv.EnvBuilder(with_pip=True).create(VENV)
        except Exception as exc:  # noqa: BLE001 - ensurepip missing on some Linux distributions
            fail(
                f"could not create a virtualenv ({exc}); install your Python's venv package "
                "(Debian/Ubuntu: apt install python3-venv) and try again."
            )
    digest = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + os.environ.get("CMAKE_ARGS", "").encode()
    ).hexdigest()
    stamp = VENV / ".vibechat-installed"
    if stamp.exists():
        installed_digest, _, installed_extras = stamp.read_text().partition(" ")
        # An install with the test extras also serves 'chat': no reinstall when switching.
        if installed_digest == digest and (not extras or extras in installed_extras.split(",")):
            return
    target = f".[{extras}]" if extras else "."
    print(
        f"dev.py: installing vibechat{'[' + extras + ']' if extras else ''} into .venv "
        "(the first build of llama-cpp-python takes several minutes)",
        flush=True,
    )
    SETUP_LOG.write_text("")
    for step in install_steps(target, os.environ.get("CMAKE_ARGS", "")):
        code, tail = run_step(step, SETUP_LOG)
        if code != 0:
            sys.stderr.write("".join(tail))
            fail(
                f"'{' '.join(step[2:])}' failed; pip's last lines are above (all of them: "
                f"{SETUP_LOG})."
            )
    stamp.write_text(f"{digest} {extras}")


def install_steps(target: str, cmake_args: str) -> list[list[str]]:
    """pip's commands that install ``target`` (``.`` or ``.[test]``) into .venv: pip itself
    upgraded, then vibechat editable. With ``cmake_args`` (a GPU build) llama-cpp-python is
    built first without the cache: pip would otherwise silently reuse the cached CPU wheel.
    pip speaks at its normal level: ``run_step`` keeps what it says out of sight (in the set-up
    log) and reads it only to tell when llama-cpp-python is being built."""
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check"]
    steps = [[*pip, "--upgrade", "pip"]]
    if cmake_args:
        steps.append(
            [*pip, "--no-cache-dir", "--force-reinstall", "--no-deps", llama_requirement()]
        )
    steps.append([*pip, "-e", target])
    return steps


def progress_line(line: str) -> str | None:
    """dev.py's own line for a line of pip's output, or None: pip's lines (its warnings,
    setuptools' "Editable installation ... be careful with folders" banner) stay in the set-up
    log; only the start of a build from source is said, with how long it takes."""
    return BUILD_NOTE if BUILDING.search(line) else None


def run_step(
    step: list[str], log: Path, out: TextIO | None = None, every: float = STILL_BUILDING_S
) -> tuple[int, list[str]]:
    """Run one pip command with its output (stdout and stderr) appended to ``log``, not shown:
    on ``out`` (stdout) only ``progress_line``'s lines, and while a build runs, every ``every``
    seconds, how long it has been going. Returns the exit status and pip's last ``TAIL_LINES``
    lines (for a failure: what went wrong)."""
    out = out if out is not None else sys.stdout
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    building: list[float] = []  # when a build started
    with open(log, "a", encoding="utf-8", errors="replace") as kept:
        child = subprocess.Popen(
            step,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )

        def read() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                kept.write(line)
                tail.append(line)
                note = progress_line(line)
                if note is not None and not building:
                    building.append(time.monotonic())
                    print(note, file=out, flush=True)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while True:
            try:
                code = child.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                if building:
                    minutes = (time.monotonic() - building[0]) / 60
                    print(
                        f"dev.py: still building llama-cpp-python ({minutes:.0f} min so far)",
                        file=out,
                        flush=True,
                    )
        reader.join()
    return code, list(tail)


def workers() -> int:
    """pytest-xdist workers for ``dev.py test``: one per core, two at least. The suite spends
    much of its time waiting (on ``vibechat`` processes, an engine process, a server), so even
    two cores run two workers well; tests/conftest.py shares the cores out among the real
    model's threads (``worker_threads``)."""
    return max(2, os.cpu_count() or 1)


def parallel_args() -> list[str]:
    """pytest-xdist's arguments: ``workers()`` workers, each test file whole on one of them
    (``loadfile``), so a file's tests run in their order and share its module fixtures (a
    loaded model) as in one process."""
    return ["-n", str(workers()), "--dist", "loadfile"]


def pytest_args(args: list[str]) -> list[str]:
    """pytest's arguments for ``dev.py test ARGS``: ARGS as given, run on ``workers()``
    pytest-xdist workers unless ARGS say how (``-n 0``: in this process, ``-n 4``); ``--quick``
    (the inner loop) becomes ``-m "not model"``, which leaves out every test of the real
    starter model (tests/conftest.py marks each test built on it), so the starter is never
    assembled."""
    quick = "--quick" in args
    rest = [arg for arg in args if arg != "--quick"]
    told = any(arg.startswith(("-n", "--numprocesses")) for arg in rest)
    parallel = [] if told else parallel_args()
    return [*(["-m", "not model"] if quick else []), *parallel, *rest]


# ``dev.py docs``: the settings table of docs/USAGE.md made again from the declarations (the
# app's schema: engine/settings/table.py, the sampling parameters' specs, app/appconfig.py).
DOCS_TABLE = """
import sys
from pathlib import Path
from vibechat.app.appconfig import APP_SCHEMA
from vibechat.engine.settings.config_doc import markdown_table, with_table
path = Path(sys.argv[1])
old = path.read_text(encoding="utf-8")
new = with_table(old, markdown_table(APP_SCHEMA))
if new != old:
    path.write_text(new, encoding="utf-8")
print(f"{path}: settings table {'rewritten' if new != old else 'up to date'}")
"""


# The rule tests: the import graph and its rooms, engine/ without textual, the room sizes, no
# re-exports, imports inside functions said why, and mypy (tests/test_typing.py runs it twice,
# as a developer does and under the installed names).
RULE_TESTS = (
    "tests/test_import_graph.py",
    "tests/test_engine_headless.py",
    "tests/test_room_sizes.py",
    "tests/test_no_reexports.py",
    "tests/test_imports_inside_functions.py",
    "tests/test_typing.py",
    "tests/test_test_engines.py",
    "tests/engine/llama/test_llama_room.py",
)


def check_commands() -> list[list[str]]:
    """What ``dev.py check`` runs, in order: ruff's linter over the repository ([tool.ruff] in
    pyproject.toml), ruff's formatter as a check (every file formatted, so the room-size test
    counts formatted lines), then the rule tests in this process (``-n 0``: they are few and
    short)."""
    return [
        [str(PYTHON), "-m", "ruff", "check", "."],
        [str(PYTHON), "-m", "ruff", "format", "--check", "."],
        [str(PYTHON), "-m", "pytest", "-n", "0", "-q", *RULE_TESTS],
    ]


def check() -> int:
    """Run every command of ``check_commands()`` (all of them, so one run shows every problem);
    non-zero when any failed."""
    failed = [command for command in check_commands() if subprocess.call(command, cwd=ROOT) != 0]
    for command in failed:
        print(
            f"dev.py check: '{' '.join(command[2:4])}' failed; see its output above.",
            file=sys.stderr,
        )
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("chat", [])
    if command == "chat":
        ensure_venv("")
        exe = BIN / ("vibechat.exe" if os.name == "nt" else "vibechat")
        return subprocess.call([str(exe), *rest])
    if command == "test":
        ensure_venv("test")
        return subprocess.call([str(PYTHON), "-m", "pytest", *pytest_args(rest)], cwd=ROOT)
    if command == "docs":
        ensure_venv("")
        return subprocess.call(
            [str(PYTHON), "-c", DOCS_TABLE, str(ROOT / "docs" / "USAGE.md")], cwd=ROOT
        )
    if command == "check":
        ensure_venv("test")
        return check()
    fail(f"unknown command {command!r}; use 'chat', 'test', 'check' or 'docs'.")
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
