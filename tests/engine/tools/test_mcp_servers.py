"""MCP servers (issue 28.1, 28.5): a real server written with the SDK (tests/mcp_test_server.py)
over stdio, started when first needed, listed, called; a hanging call times out and a
cancelled one stops, and the server answers the next; a server that dies mid-call is one
error result and the others go on; one that fails or hangs on start is one line; a server
sees only the environment its config names; no server outlives its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from vibechat.engine.tools.mcp_config import parse_mcp_config
from vibechat.engine.tools.mcp_reading import result_of
from vibechat.engine.tools.mcp_servers import FAILED, NOT_STARTED, STARTED, McpServers
from vibechat.engine.turns.tool_calls import ToolSpec

SERVER = str(Path(__file__).resolve().parents[2] / "mcp_test_server.py")


def entry(*args: str, **env: str) -> dict:
    return {"command": sys.executable, "args": [SERVER, *args], **({"env": env} if env else {})}


def manager(servers: dict, **kwargs) -> McpServers:
    return McpServers(parse_mcp_config({"mcpServers": servers}, Path("mcp.json")), **kwargs)


@pytest.fixture(scope="module")
def two():
    """Two copies of the test server (their tools share names), started once for the module."""
    with manager(
        {"a": entry("a", GIVEN="from-config"), "b": entry("b")}, result_limit=5_000
    ) as servers:
        yield servers


def by(servers: McpServers) -> dict[str, ToolSpec]:
    return {spec.qualified: spec for spec in servers.tools()}


def test_servers_start_when_first_needed_and_list_their_tools_under_unique_safe_names(two):
    assert {s.name: s.state for s in two.statuses()} in (
        {"a": NOT_STARTED, "b": NOT_STARTED},
        {"a": STARTED, "b": STARTED},
    )  # another test may go first
    specs = two.tools()
    assert {s.name: s.state for s in two.statuses()} == {"a": STARTED, "b": STARTED}
    names = [spec.name for spec in specs]
    assert len(set(names)) == len(names)
    # Both servers have "echo": each is prefixed with its server's name.
    tools = {spec.qualified: spec for spec in specs}
    assert tools["a/echo"].name == "a_echo" and tools["b/echo"].name == "b_echo"
    assert tools["a/add"].parameters["properties"]["a"]["type"] == "integer"
    assert tools["a/echo"].description == "Say the text back."
    assert all(spec.to_openai()["function"]["name"] == spec.name for spec in specs)


def test_a_call_runs_with_typed_arguments_and_a_bad_argument_is_an_error_result(two):
    tools = by(two)
    assert two.call(tools["a/add"], {"a": 2, "b": 40}, timeout=30).text == "42"
    bad = two.call(tools["a/add"], {"a": "two", "b": 1}, timeout=30)
    assert bad.is_error and "valid integer" in bad.text


def test_a_result_with_escapes_and_markup_is_sanitised_and_markup_stays_text(two):
    result = two.call(by(two)["a/escapes"], {}, timeout=30)
    assert "\x1b" not in result.text and "\x07" not in result.text
    assert "[bold red]not bold[/]" in result.text and result.text.endswith("red done")


def test_a_result_over_the_limit_is_cut_with_a_note(two):
    result = two.call(by(two)["a/huge"], {}, timeout=30)
    assert not result.is_error
    assert result.text.startswith("x" * 5_000) and "x" * 5_001 not in result.text
    assert result.text.endswith(
        "[cut: the result was 1,000,000 characters; the first 5,000 are shown]"
    )


def test_a_hanging_call_times_out_and_the_server_answers_the_next(two):
    tools = by(two)
    result = two.call(tools["a/slow"], {"seconds": 60}, timeout=1)
    assert result.is_error and "longer than 1 s" in result.text
    assert two.call(tools["a/echo"], {"text": "still here"}, timeout=30).text == "still here"


def test_a_cancelled_call_returns_at_once_as_an_error_and_the_server_goes_on(two):
    tools = by(two)
    cancel = threading.Event()
    outcome = {}
    caller = threading.Thread(
        target=lambda: outcome.setdefault(
            "r", two.call(tools["a/slow"], {"seconds": 60}, timeout=300, cancel=cancel)
        )
    )
    caller.start()
    cancel.set()
    caller.join(timeout=30)
    assert not caller.is_alive()
    assert outcome["r"].is_error and "cancelled" in outcome["r"].text
    assert two.call(tools["a/echo"], {"text": "after"}, timeout=30).text == "after"


def test_the_server_sees_only_what_its_config_names_plus_what_it_needs_to_start(two, monkeypatch):
    tools = by(two)
    # The test process's own variables (a secret, say) are not passed on; PATH is.
    assert "VIBECHAT_CONFIG_DIR" in os.environ
    assert two.call(tools["a/env"], {"name": "VIBECHAT_CONFIG_DIR"}, timeout=30).text == "<unset>"
    assert two.call(tools["a/env"], {"name": "GIVEN"}, timeout=30).text == "from-config"
    assert two.call(tools["b/env"], {"name": "GIVEN"}, timeout=30).text == "<unset>"
    assert two.call(tools["a/env"], {"name": "PATH"}, timeout=30).text == os.environ["PATH"]


def test_a_server_that_fails_or_hangs_on_start_is_one_line_and_the_rest_goes_on():
    with manager(
        {
            "ok": entry("ok"),
            "broken": entry("--fail-start"),
            "missing": {"command": "/no/such/server"},
            "stuck": entry("--hang-start"),
        },
        start_timeout=5,
    ) as servers:
        specs = servers.tools()
        assert {spec.server for spec in specs} == {"ok"}
        status = {s.name: s for s in servers.statuses()}
        assert status["ok"].state == STARTED and len(status["ok"].tools) == 8
        assert status["broken"].state == FAILED
        assert (
            status["broken"].reason
            == "did not start: mcp_test_server: cannot start: the database is missing"
        )
        assert status["missing"].state == FAILED and "/no/such/server" in status["missing"].reason
        assert (
            status["stuck"].state == FAILED
            and "did not answer within 5 s" in status["stuck"].reason
        )
        assert all("\n" not in s.reason for s in status.values())
        down = servers.call(ToolSpec("x", server="broken", tool="echo"), {"text": "x"}, timeout=5)
        assert down.is_error and "is not running" in down.text


def test_a_server_that_dies_mid_call_is_one_error_result_and_the_others_go_on():
    with manager({"dies": entry("dies"), "lives": entry("lives")}) as servers:
        tools = by(servers)
        died = servers.call(tools["dies/die"], {}, timeout=30)
        assert died.is_error and "stopped during the call" in died.text
        assert {s.name: s.state for s in servers.statuses()} == {"dies": FAILED, "lives": STARTED}
        again = servers.call(tools["dies/echo"], {"text": "x"}, timeout=30)
        assert again.is_error and "is not running" in again.text
        assert servers.call(tools["lives/echo"], {"text": "ok"}, timeout=30).text == "ok"
        assert [spec.server for spec in servers.tools()] == ["lives"] * 8


def test_non_text_blocks_are_a_one_line_note():
    from mcp_types import CallToolResult, ImageContent, TextContent

    result = result_of(
        CallToolResult(
            content=[TextContent(text="a chart:"), ImageContent(data="AAAA", mime_type="image/png")]
        )
    )
    assert result.text == "a chart:\n[an image (image/png), not shown]" and not result.is_error
    assert result_of(CallToolResult(content=[])).text == "(the tool returned nothing)"


# ---------------------------------------------------------------- no orphans
OWNER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from vibechat.engine.tools.mcp_config import parse_mcp_config
    from vibechat.engine.tools.mcp_servers import McpServers
    pidfile, server, mode = sys.argv[1:4]
    entry = {"command": sys.executable, "args": [server, "--pidfile", pidfile]}
    config = parse_mcp_config({"mcpServers": {"s": entry}}, Path("mcp.json"))
    servers = McpServers(config)
    specs = {spec.qualified: spec for spec in servers.tools()}
    print("started", flush=True)
    if mode == "hang":  # killed mid-call
        print("calling", flush=True)
        servers.call(specs["s/slow"], {"seconds": 600}, timeout=600)
    elif mode == "exit":  # a normal exit, close() never called: atexit stops the servers
        sys.exit(0)
    servers.close()
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead (its parent, init, reaps it soon).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("mode", ["close", "exit", "sigkill"])
@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and the parent-death launcher are POSIX's")
def test_no_server_outlives_its_owner(tmp_path, mode):
    pidfile = tmp_path / "server.pid"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(pidfile), SERVER, "hang" if mode == "sigkill" else mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip() == "started", owner.stderr.read() if owner.stderr else ""
        pid = int(pidfile.read_text())
        assert alive(pid)
        if mode == "sigkill":
            assert owner.stdout.readline().strip() == "calling"
            owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        assert wait_gone(pid), f"the server {pid} outlived its owner ({mode})"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if pidfile.exists() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_streamable_http_server_is_listed_and_called(tmp_path):
    import socket

    with socket.socket() as probe:  # a free port (the server binds it a moment later)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, SERVER, "web", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    "the HTTP server did not start"
                )
                time.sleep(0.05)
        with manager(
            {
                "web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Test": "1"}},
                "gone": {"url": "http://127.0.0.1:9/mcp"},
            },
            start_timeout=15,
        ) as servers:
            tools = by(servers)
            assert tools["web/add"].name == "add"
            assert servers.call(tools["web/add"], {"a": 20, "b": 22}, timeout=30).text == "42"
            web, gone = servers.statuses()
            assert web.state == STARTED
            assert (
                gone.state == FAILED
                and gone.reason.startswith("did not start")
                and "\n" not in gone.reason
            )
    finally:
        server.kill()
        server.wait()


def test_a_servers_tool_list_is_bounded():
    from vibechat.engine.tools.mcp_reading import MAX_DESCRIPTION_CHARS, MAX_TOOLS

    with manager({"many": entry("many", "--many")}) as servers:
        specs = servers.tools()
        assert len(specs) == MAX_TOOLS
        [status] = servers.statuses()
        assert status.state == STARTED and status.reason.startswith(
            f"{8 + 150 - MAX_TOOLS} tool(s) left out"
        )
        long = next(spec for spec in specs if spec.name == "t000")
        assert len(long.description) == MAX_DESCRIPTION_CHARS + 1 and long.description.endswith("…")


def test_a_schema_that_is_not_an_object_or_too_large_is_left_out():
    """The SDK's server always writes object schemas: another server may not (a unit test of
    the listing, with the SDK's own types)."""
    import asyncio

    from mcp_types import ListToolsResult, Tool

    from vibechat.engine.tools.mcp_reading import MAX_SCHEMA_CHARS, list_tools

    class Listing:
        async def list_tools(self, cursor=None):
            return ListToolsResult(
                tools=[
                    Tool(name="ok", input_schema={"type": "object", "properties": {}}),
                    Tool(name="array", input_schema={"type": "array"}),
                    Tool(
                        name="big",
                        input_schema={"type": "object", "description": "x" * MAX_SCHEMA_CHARS},
                    ),
                    Tool(name="esc\x1b[2J", input_schema={"type": "object"}),
                ]
            )

    tools, note = asyncio.run(list_tools(Listing()))
    assert [t[0] for t in tools] == ["ok"] and note.startswith("3 tool(s) left out")


def test_a_chatty_servers_stderr_file_is_kept_small(monkeypatch):
    import vibechat.engine.tools.mcp_servers as mcp_servers

    monkeypatch.setattr(mcp_servers, "STDERR_CHECK_S", 0.05)
    with manager({"noisy": entry("noisy", "--noisy")}) as servers:
        servers.start()
        server = servers._servers["noisy"]
        assert server.state == STARTED
        deadline = time.monotonic() + 30
        # Until the file was cut and its tail written back (the cut is a truncate then a write:
        # a look between the two sees it empty).
        while (
            os.fstat(server.errlog.fileno()).st_size > mcp_servers.MAX_STDERR_BYTES
            or server.stderr_tail() != "the last line"
        ):
            assert time.monotonic() < deadline, (
                "the stderr file was not cut to its tail "
                f"({os.fstat(server.errlog.fileno()).st_size} bytes, "
                f"last line {server.stderr_tail()!r})"
            )
            time.sleep(0.05)
        assert servers.call(by(servers)["noisy/echo"], {"text": "fine"}, timeout=30).text == "fine"
