"""`vibechat run` with tools, end to end: a real `vibechat` subprocess, the OpenAI stub server on
127.0.0.1 as the model (it streams tool calls), and a real MCP server over stdio (written with
the SDK: tests/mcp_test_server.py) as the tool. `run` never asks: only --allow-tool runs a call;
any other is denied with one stderr line, and the model is told."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import VIBECHAT_BIN
from openai_stub import fragments

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")


def vibechat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def mcp_file(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps({"mcpServers": {"test": {"command": sys.executable, "args": [SERVER]}}})
    )
    return path


def test_an_allowed_call_runs_on_the_mcp_server_and_the_model_answers_with_its_result(
    stub, tmp_path: Path
):
    stub.reply = "Five."
    stub.tool_deltas = fragments(0, "call_1", "add", '{"a": 2, "b": 3}')
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--mcp-config",
        str(mcp_file(tmp_path)),
        "--allow-tool",
        "test/add",
        "-p",
        "What is 2 + 3?",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["text"] == "Five."
    assert obj["tool_calls"] == [
        {
            "id": "call_1",
            "name": "add",
            "tool": "test/add",
            "arguments": '{"a": 2, "b": 3}',
            "ran": True,
            "error": False,
            "result": "5",
        }
    ]
    sent = stub.last_body["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool"]
    assert sent[-1]["tool_call_id"] == "call_1" and sent[-1]["content"].strip() == "5"
    first = [r for r in stub.requests if r["path"].endswith("/chat/completions")][0]
    assert any(t["function"]["name"] == "add" for t in first["body"]["tools"])
    shown = json.loads(
        vibechat("history", "show", str(json.loads(out.stdout)["conversation_id"]), "--json").stdout
    )
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert shown["messages"][2]["tool_name"] == "test/add"


def test_without_allow_tool_the_call_is_denied_with_one_line_and_the_model_is_told(
    stub, tmp_path: Path
):
    stub.reply = "I may not."
    stub.tool_deltas = fragments(0, "call_1", "escapes", "{}")
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--mcp-config",
        str(mcp_file(tmp_path)),
        "-p",
        "Try it.",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "I may not."
    lines = [line for line in out.stderr.splitlines() if "denied" in line]
    assert lines == [
        "vibechat: denied the model's call to test/escapes (--allow-tool test/escapes allows it)"
    ]
    assert "did not allow" in stub.last_body["messages"][-1]["content"]


def test_a_bad_allow_tool_pattern_and_required_without_tools_are_one_line(stub, tmp_path: Path):
    out = vibechat(
        "run", "--base-url", stub.url, "--model", "stub-small", "--allow-tool", "a/b/c", "-p", "Hi"
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "--allow-tool" in out.stderr
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--tool-choice",
        "required",
        "-p",
        "Hi",
    )
    assert (
        out.returncode != 0
        and "no tools are configured" in out.stderr
        and "Traceback" not in out.stderr
    )


def test_with_no_tools_configured_the_registry_and_its_event_loop_are_not_even_imported():
    code = (
        "import sys\n"
        "from vibechat.engine.settings.table import Config\n"
        "from vibechat.app.commands.tool_options import tools_for\n"
        "assert tools_for(Config(), None)[0] is None\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith(('vibechat.engine.tools.registry', 'asyncio', 'mcp'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tool_choice_none_in_the_config_or_its_variable_offers_no_tools(
    stub, tmp_path: Path, user_dirs
):
    # issue 39, point 7: VIBECHAT_TOOL_CHOICE was "not a vibechat variable"; only --tool-choice none
    # silenced tools
    base = (
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--mcp-config",
        str(mcp_file(tmp_path)),
        "-p",
        "Hi",
    )
    out = subprocess.run(
        [str(VIBECHAT_BIN), *base],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "VIBECHAT_TOOL_CHOICE": "none"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and out.stdout.strip() == stub.reply
    assert "tools" not in stub.last_body  # none offered
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('tool_choice = "none"\n[presets.plain]\ntool_choice = "none"\n')
    asked = len(stub.requests)
    assert vibechat(*base).returncode == 0 and "tools" not in stub.last_body
    config.write_text('[presets.plain]\ntool_choice = "none"\n')  # per model: a preset naming it
    assert vibechat(*base, "--preset", "plain").returncode == 0 and "tools" not in stub.last_body
    assert vibechat(*base).returncode == 0 and "tools" in stub.last_body  # without it: offered
    assert len(stub.requests) > asked
    shown = json.loads(
        subprocess.run(
            [str(VIBECHAT_BIN), "config", "show", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "VIBECHAT_TOOL_CHOICE": "NONE"},
        ).stdout
    )
    assert "VIBECHAT_TOOL_CHOICE" in json.dumps(shown) and '"none"' in json.dumps(shown)
    bad = subprocess.run(
        [str(VIBECHAT_BIN), *base],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "VIBECHAT_TOOL_CHOICE": "never"},
    )
    assert (
        "tool_choice must be one of auto, none, required" in bad.stderr
        and "Traceback" not in bad.stderr
    )


def test_the_no_tool_support_note_is_said_only_with_verbose(starter_installed, user_dirs):
    # issue 39, point 7: every run on a model without tool support printed it on stderr
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('builtin_tools = ["current_time"]\n')
    args = ("run", "-p", "Hi", "-n", "2", "--no-save")
    quiet = vibechat(*args)
    assert quiet.returncode in (0, 4), quiet.stderr
    assert "no tool support" not in quiet.stderr
    told = subprocess.run(
        [str(VIBECHAT_BIN), "--verbose", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    assert told.returncode in (0, 4), told.stderr
    said = [
        line
        for line in told.stderr.splitlines()
        if line.startswith("vibechat:") and "no tool support" in line
    ]
    assert said == [
        "vibechat: Gemma 3 270m's chat template has no tool support: it is offered no tools."
    ]


def test_the_chat_is_offered_no_tools_when_tool_choice_is_none(tmp_path: Path):
    from dataclasses import replace

    from vibechat.app.commands.tool_options import chat_tools
    from vibechat.engine.settings.table import Config

    config = Config(builtin_tools=("current_time",))
    registry, _ = chat_tools(config, mcp_file(tmp_path))
    assert registry is not None
    registry.close()
    assert chat_tools(replace(config, tool_choice="none"), mcp_file(tmp_path))[0] is None
    required, _ = chat_tools(
        replace(config, tool_choice="required"), mcp_file(tmp_path)
    )  # run's alone
    assert required is not None
    required.close()


DEEP = (
    '{"a":' + "[" * 20_000 + "]" * 20_000 + "}"
)  # 40 KB: under the length bound, past any depth bound


def test_arguments_nested_too_deeply_are_one_line_the_model_is_told_and_the_conversation_continues(
    stub, tmp_path: Path
):
    stub.reply = "Sorry."
    stub.tool_deltas = fragments(0, "call_1", "add", DEEP, size=4000)
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--mcp-config",
        str(mcp_file(tmp_path)),
        "--allow-tool",
        "test/add",
        "-p",
        "Add.",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "vibechat: did not run the model's call to test/add: the arguments are "
        "too deeply nested (more than 64 levels of [ and {); write them flatter."
    ]
    obj = json.loads(out.stdout)
    assert obj["text"] == "Sorry."
    assert (
        obj["tool_calls"][0]["error"] is True
        and "too deeply nested" in obj["tool_calls"][0]["result"]
    )
    assert "nested" in stub.last_body["messages"][-1]["content"]
    # The saved conversation holds that turn; it opens and goes on.
    stub.tool_deltas = []
    stub.reply = "Still here."
    again = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--continue",
        "-p",
        "And now?",
        "--json",
    )
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert json.loads(again.stdout)["text"] == "Still here."
    shown = vibechat("history", "show", str(obj["conversation_id"]), "--json")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr


def test_a_server_writing_garbage_on_stdout_is_one_line_on_stderr_never_a_traceback(
    stub, tmp_path: Path
):
    """issue 40, point 6: the MCP SDK logged ~22 lines of traceback ("Failed to parse JSONRPC
    message from server") on stderr. Third-party loggers go to the log file; the user sees one
    line naming the server."""
    noisy = (
        "import runpy, sys\n"
        "print('hello, I am not JSON-RPC', flush=True)\n"
        'print(\'{"neither": "am I"}\', flush=True)\n'
        f"sys.argv = [{SERVER!r}]\n"
        f"runpy.run_path({SERVER!r}, run_name='__main__')\n"
    )
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps({"mcpServers": {"noisy": {"command": sys.executable, "args": ["-c", noisy]}}})
    )
    stub.reply = "Five."
    stub.tool_deltas = fragments(0, "call_1", "add", '{"a": 2, "b": 3}')
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--mcp-config",
        str(path),
        "--allow-tool",
        "noisy/add",
        "-p",
        "What is 2 + 3?",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "JSONRPC" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "vibechat: MCP server noisy wrote something other than JSON-RPC on its "
        "stdout (ignored; the log file has the details)"
    ]
    assert json.loads(out.stdout)["tool_calls"][0]["result"] == "5"  # the server still served
    log = (Path(os.environ["VIBECHAT_STATE_DIR"]) / "vibechat.log").read_text()
    assert "Failed to parse JSONRPC message from server" in log and "Traceback" in log
