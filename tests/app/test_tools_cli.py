"""``vibechat tools`` (issue 28.1): each MCP server, started or the one line why not, with its
tools (outside text: sanitised, never markup), the built-in tools and whether each is
enabled; ``--json``; ``--mcp-config FILE``; a broken file is one line and exit 1. A real
subprocess and a real MCP server (tests/mcp_test_server.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import vibechat
from vibechat.engine.paths import config_dir

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")


@pytest.fixture
def mcp_json(tmp_path) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "test": {"command": sys.executable, "args": [SERVER]},
                    "broken": {"command": sys.executable, "args": [SERVER, "--fail-start"]},
                    "off": {"command": "anything", "disabled": True},
                }
            }
        )
    )
    return path


def test_tools_lists_each_server_its_tools_and_the_builtins(mcp_json):
    done = vibechat(
        "tools", "--mcp-config", str(mcp_json), env={"VIBECHAT_BUILTIN_TOOLS": "current_time"}
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"MCP servers ({mcp_json}):" in out
    assert "  test (stdio: " in out and "): started, 8 tools" in out
    assert "    add      Add two whole numbers." in out
    assert "  broken (stdio: " in out
    assert "failed - did not start: mcp_test_server: cannot start: the database is missing" in out
    assert "  off: disabled" in out
    assert "  current_time  enabled  " in out and "  read_file     off      " in out
    # A server's description is outside text: no escape reaches the terminal, markup stays text.
    assert "\x1b" not in out and "\x07" not in out
    assert "    marked   [bold red]Marked up[/] description." in out and "Second line" not in out


def test_tools_json(mcp_json):
    done = vibechat("tools", "--mcp-config", str(mcp_json), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["mcp_config"] == str(mcp_json)
    servers = {s["name"]: s for s in data["servers"]}
    assert servers["test"]["state"] == "started" and servers["test"]["reason"] is None
    add = next(t for t in servers["test"]["tools"] if t["name"] == "add")
    assert add["qualified"] == "test/add" and add["parameters"]["required"] == ["a", "b"]
    assert (
        servers["broken"]["state"] == "failed"
        and "database is missing" in servers["broken"]["reason"]
    )
    assert servers["off"]["state"] == "disabled"
    assert [(b["name"], b["enabled"]) for b in data["builtin"]] == [
        ("current_time", False),
        ("read_file", False),
        ("list_folder", False),
    ]
    assert "\\u001b" not in done.stdout and "\x1b" not in done.stdout


def test_tools_reads_mcp_json_in_the_config_folder_and_says_when_there_is_none():
    done = vibechat("tools")
    assert done.returncode == 0, done.stderr
    assert "(no such file)" in done.stdout and "none configured" in done.stdout
    config_dir().mkdir(parents=True, exist_ok=True)
    (config_dir() / "mcp.json").write_text(
        json.dumps({"mcpServers": {"x": {"command": "y", "disabled": True}}})
    )
    assert "  x: disabled" in vibechat("tools").stdout


def test_a_broken_mcp_json_is_one_line_and_exit_1(tmp_path):
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"a": {"command": "x"},}}')
    done = vibechat("tools", "--mcp-config", str(bad))
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr.startswith(f"vibechat: error: {bad}: not valid JSON")
        and done.stderr.count("\n") == 1
    )
    assert "Traceback" not in done.stderr
    missing = vibechat("tools", "--mcp-config", str(tmp_path / "none.json"))
    assert missing.returncode == 1 and "no such file" in missing.stderr
