"""The chat with a real MCP server over stdio (tests/mcp_test_server.py, written with the SDK)
through engine/tools' registry, as `vibechat` wires it: each call asks; allow, deny and always
allow; Esc cancels a running call; a hanging call ends at tool_timeout; a server that dies
mid-call is one result and the chat goes on; a result with terminal escapes and markup is shown
as plain text. A real Textual app (Pilot) and SQLite file; the recording backend scripts the
model's calls (the model's side of tool calling is tested with the starter and the stub server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fakes import RecordingBackend, send, settle
from helpers import answer, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.tool_block import ToolCallBlock
from vibechat.app.tui.screens.tool_approval import ToolApprovalScreen
from vibechat.engine.chat.history import History
from vibechat.engine.settings.table import Config
from vibechat.engine.tools.approval import ToolApproval
from vibechat.engine.tools.registry import ToolRegistry
from vibechat.engine.turns.tool_calls import ToolCall

SERVER = str(Path(__file__).resolve().parents[2] / "mcp_test_server.py")
SIZE = (110, 36)


@pytest.fixture
def registry(tmp_path_factory):
    """A registry of its own per test: the first test's server dies (a tool that exits mid-call)."""
    mcp = tmp_path_factory.mktemp("mcp") / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"test": {"command": sys.executable, "args": [SERVER]}}})
    )
    with ToolRegistry.load(Config(tool_timeout=3, tool_result_limit=2000), mcp) as tools:
        yield tools


def blocks(app) -> list[ToolCallBlock]:
    return list(app.query(ToolCallBlock))


async def test_calls_ask_first_then_run_on_the_server_and_a_hanging_or_dying_one_is_one_result(
    tmp_path: Path, registry: ToolRegistry
):
    backend = RecordingBackend(reply="Done.")
    backend.tool_script = [
        [
            ToolCall("c1", "add", '{"a": 2, "b": 3}'),
            ToolCall("c2", "escapes", "{}"),
            ToolCall("c3", "echo", '{"text": "no"}'),
        ],
        [ToolCall("c4", "slow", '{"seconds": 30}')],
        [ToolCall("c5", "die", "{}")],
    ]
    approval = ToolApproval()
    app = create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=registry,
        tool_policy=approval,
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the server's tools", bound=60)
        await send(pilot, "go", wait=False)
        # add once, escapes always, echo denied; c4 (slow) once: it hangs past tool_timeout (3 s)
        # and ends as an error result; c5 (die) once: the server exits mid-call.
        for key, call in (
            ("ctrl+y", "c1"),
            ("ctrl+a", "c2"),
            ("escape", "c3"),
            ("ctrl+y", "c4"),
            ("ctrl+y", "c5"),
        ):
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, ToolApprovalScreen),
                f"{call}'s question",
                bound=60,
            )
            screen = app.screen
            assert isinstance(screen, ToolApprovalScreen) and screen.call.id == call
            await answer(pilot, key)
            await wait_for(
                pilot, lambda screen=screen: app.screen is not screen, f"{call}'s answer"
            )
        await wait_for(pilot, lambda: not app.generating, "the last reply", bound=60)
        await settle(pilot)
        shown = blocks(app)
        assert [b.call.id for b in shown] == ["c1", "c2", "c3", "c4", "c5"]
        assert shown[0].text.strip() == "5"
        assert (
            "\x1b" not in shown[1].text and "[bold red]not bold[/]" in shown[1].text
        )  # plain text, no markup
        assert "did not allow" in shown[2].text
        assert shown[3].text and "slept" not in shown[3].text  # stopped at the timeout
        assert shown[4].text  # the dead server's call is one result
        assert approval.always == ("test/escapes",)
        assert app.chat.messages()[-1].text == "Done."  # the chat went on


async def test_esc_cancels_a_running_call_on_the_server(tmp_path: Path, registry: ToolRegistry):
    backend = RecordingBackend(reply="never")
    backend.tool_script = [[ToolCall("c1", "slow", '{"seconds": 30}')]]
    app = create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=registry,
        tool_policy=ToolApproval(always=["test/slow"]),
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the server's tools", bound=60)
        await send(pilot, "go slow", wait=False)
        await wait_for(
            pilot, lambda: blocks(app) and app.tool_rounds.active, "the running call", bound=60
        )
        app.prompt_input.focus()
        await pilot.press("escape")
        await wait_for(pilot, lambda: not app.tool_rounds.active, "the cancelled call", bound=20)
        await settle(pilot)
        assert blocks(app)[0].text and "slept" not in blocks(app)[0].text
        assert len(backend.requests) == 1  # no reply after a stop


async def test_a_server_that_fails_and_a_broken_mcp_json_are_said_once_and_the_chat_goes_on(
    tmp_path: Path,
):
    from helpers import notices
    from vibechat.app.commands.tool_options import tools_for

    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "good": {"command": sys.executable, "args": [SERVER]},
                    "bad": {"command": sys.executable, "args": [SERVER, "--fail-start"]},
                }
            }
        )
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path, said in ((mcp, "MCP server bad"), (broken, "broken.json")):
        registry, approval = tools_for(
            Config(), path, lenient=True
        )  # the chat's way: never stopped by the file
        assert registry is not None
        with registry:
            app = create_app(
                RecordingBackend(reply="fine"),
                blink=False,
                history=History(tmp_path / "h.db"),
                tools=registry,
                tool_policy=approval,
            )
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot)
                await wait_for(
                    pilot,
                    lambda app=app, said=said: any(said in n for n in notices(app)),
                    "the problem said",
                    bound=60,
                )
                await send(pilot, "hello")
                assert app.chat.messages()[-1].text == "fine"
                assert len([n for n in notices(app) if said in n]) == 1


async def test_a_server_writing_garbage_on_stdout_is_one_notice_and_its_tools_still_work(
    tmp_path: Path, capfd
):
    """issue 40, point 6: the SDK's traceback never reaches the terminal the chat draws on."""
    from helpers import notices

    noisy = (
        "import runpy, sys\n"
        "print('hello, I am not JSON-RPC', flush=True)\n"
        "print('nor am I', flush=True)\n"
        f"sys.argv = [{SERVER!r}]\n"
        f"runpy.run_path({SERVER!r}, run_name='__main__')\n"
    )
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"noisy": {"command": sys.executable, "args": ["-c", noisy]}}})
    )
    from vibechat.app.logfile import route_logs_to_file

    route_logs_to_file()  # as `vibechat` sets it up (the conftest puts the loggers back)
    with ToolRegistry.load(Config(tool_timeout=3, tool_result_limit=2000), mcp) as tools:
        app = create_app(
            RecordingBackend(reply="ok"),
            blink=False,
            history=History(tmp_path / "h.db"),
            tools=tools,
            tool_policy=ToolApproval(),
        )
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await wait_for(pilot, lambda: app.tool_rounds.specs, "the server's tools", bound=60)
            await settle(pilot)
            said = [n for n in notices(app) if "noisy" in n]
            assert said == [
                "MCP server noisy wrote something other than JSON-RPC on its stdout "
                "(ignored; the log "
                "file has the details)"
            ]
            assert any(spec.name == "add" for spec in app.tool_rounds.specs)
    assert "Traceback" not in capfd.readouterr().err


async def test_a_server_that_misbehaves_later_is_said_when_it_does_once(tmp_path: Path):
    from helpers import notices

    trigger = tmp_path / "now"
    # The SDK's server diverts stray prints from fd 1 to stderr: the garbage goes to a copy of it.
    late = (
        "import os, runpy, sys, threading, time\n"
        "pipe = os.dup(1)\n"
        "def garbage():\n"
        f"    while not os.path.exists({str(trigger)!r}):\n"
        "        time.sleep(0.05)\n"
        "    for _ in range(3):\n"
        "        os.write(pipe, b'late garbage\\n')\n"
        "threading.Thread(target=garbage, daemon=True).start()\n"
        f"sys.argv = [{SERVER!r}]\n"
        f"runpy.run_path({SERVER!r}, run_name='__main__')\n"
    )
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"late": {"command": sys.executable, "args": ["-c", late]}}})
    )
    with ToolRegistry.load(Config(tool_timeout=3, tool_result_limit=2000), mcp) as tools:
        app = create_app(
            RecordingBackend(reply="ok"),
            blink=False,
            history=History(tmp_path / "h.db"),
            tools=tools,
            tool_policy=ToolApproval(),
        )
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await wait_for(pilot, lambda: app.tool_rounds.specs, "the server's tools", bound=60)
            assert not [
                n for n in notices(app) if "MCP server late" in n
            ]  # it behaved while it started
            trigger.write_text("")
            await wait_for(
                pilot,
                lambda: [n for n in notices(app) if "MCP server late" in n],
                "the line",
                bound=30,
            )
            await settle(pilot)
            assert len([n for n in notices(app) if "MCP server late" in n]) == 1
