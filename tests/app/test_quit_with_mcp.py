"""The real ``vibechat`` chat in a pseudo-terminal, with a real MCP server over stdio
(tests/mcp_test_server.py ``--family``) configured, quit while the server runs: Ctrl+Q, SIGTERM
and SIGHUP each end the chat with its terminal restored (every mode off, the tty's settings as
before, the exit status 0 or 128 + the signal, no traceback), and the server, its launcher and
the processes a tool call made it start (a child in its group, one in a session of its own and
that one's child) are all gone. The model is the OpenAI stub on 127.0.0.1, whose reply calls
the server's ``family_of_processes`` once the user says yes (Ctrl+Y). The prompt is sent as soon
as the chat is ready, while the server may still be starting: it waits for the server's tools."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from openai_stub import fragments
from test_process_trees import alive, end_for_good, left_behind, parent_of
from test_terminal_restore import WAIT_S, Terminal, assert_terminal_restored

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="a POSIX pseudo-terminal; reads /proc (Linux)"
)

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")
PROMPT = "Start the family."
ALLOW_ONCE = b"\x19"  # Ctrl+Y: the tool question's "run it once"


def terminal_env() -> dict[str, str]:
    """The test's user dirs (conftest) and a plain xterm, as tests/app/test_terminal_restore.py's
    chat_env, without the starter model: the chat talks to the stub."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "TEXTUAL", "TEXTUAL_DRIVER")
        and not k.startswith("PYTEST")
    }
    env.update(TERM="xterm-256color", COLORTERM="truecolor", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    env.pop("TEXTUAL_ALLOW_SIGNALS", None)
    return env


def wait_for_file(term: Terminal, path: Path, nudge: bytes | None = None) -> None:
    """Until ``path`` exists (bounded by WAIT_S); ``nudge`` typed every second meanwhile (a
    question takes a key only once it has been on screen a moment: screens/question.py)."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if term.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{path.name} never came:\n{term.text()[-3000:]}")
        if nudge is not None:
            term.type(nudge)
        time.sleep(1.0 if nudge is not None else 0.05)


@pytest.mark.parametrize("how", ["Ctrl+Q", "SIGTERM", "SIGHUP"])
def test_quitting_the_chat_ends_its_mcp_server_and_what_it_started(stub, tmp_path, how):
    started, family = tmp_path / "server.pid", tmp_path / "family.json"
    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [SERVER, "--family", "--pidfile", str(started)]}
    config.write_text(json.dumps({"mcpServers": {"test": server}}))
    stub.reply = "Started."
    arguments = json.dumps({"pidfile": str(family), "seconds": 0})
    stub.tool_deltas = fragments(0, "call_1", "family_of_processes", arguments)
    term = Terminal(
        ["--base-url", stub.url, "--model", "stub-small", "--mcp-config", str(config)],
        terminal_env(),
    )
    pids: dict[str, int] = {}
    try:
        term.wait_for("Enter sends", "the chat to be ready")
        term.type(PROMPT.encode())
        term.wait_for(PROMPT[-10:], "the prompt to show in the input")
        term.type(b"\r")
        # The reply waits for the server's tools (listed once the chat is drawn), so the model
        # may call one: the first reply's call asks.
        term.wait_for("run it once", "the tool question")
        wait_for_file(term, started)  # the chat listed the server's tools: it runs
        pids["server"] = int(started.read_text())
        wait_for_file(term, family, nudge=ALLOW_ONCE)
        pids.update(json.loads(family.read_text()))
        pids["launcher"] = parent_of(pids["server"])
        assert parent_of(pids["launcher"]) == term.proc.pid  # the chat's child runs the server
        term.wait_for("Started.", "the reply after the tool call")
        assert all(alive(pid) for pid in pids.values()), pids
        if how == "Ctrl+Q":
            code, expected = term.quit(), 0
        else:
            sig = getattr(signal, how)
            term.proc.send_signal(sig)
            try:
                code, expected = term.proc.wait(WAIT_S), 128 + sig
            except subprocess.TimeoutExpired:
                pytest.fail(f"the chat did not end within {WAIT_S} s of {how}")
            term.tty_after = termios.tcgetattr(term.slave)
        assert_terminal_restored(term, code, expected)
        assert not left_behind(pids), (
            f"still running after the chat ended ({how}): {left_behind(pids)} of {pids}"
        )
    finally:
        term.close()
        end_for_good(pids)
