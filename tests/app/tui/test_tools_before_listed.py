"""A prompt sent while the chat still lists its MCP servers' tools (they are listed in a worker
after the first frame; a server may be slow to start) waits for the listing, says so ("starting
tool servers…"), and is offered the tools the config names; a server that fails to start is its
one notice and the prompt goes on without it; Esc stops the waiting reply before the model is
asked (Ctrl+R asks again). A real Textual app (Pilot), real MCP servers over stdio
(tests/mcp_test_server.py ``--slow-start``), the recording backend (it records the tools each
request was offered)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fakes import RecordingBackend, send
from helpers import notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.engine.chat.history import History
from vibechat.engine.settings.table import Config
from vibechat.engine.tools.approval import ToolApproval
from vibechat.engine.tools.registry import ToolRegistry

SERVER = str(Path(__file__).resolve().parents[2] / "mcp_test_server.py")
SIZE = (110, 36)
# Long enough that a prompt is sent well before the slow server serves.
SLOW_S = "4"
WAITING = "starting tool servers…"


def config(tmp_path: Path, failing: bool = False) -> Path:
    """An mcp.json with a server slow to start, and (``failing``) one that fails to start."""
    servers = {"slow": {"command": sys.executable, "args": [SERVER, "--slow-start", SLOW_S]}}
    if failing:
        servers["bad"] = {"command": sys.executable, "args": [SERVER, "--fail-start"]}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def reply_status(app) -> str:
    """The line under the last reply."""
    reply = app.chat.query(AssistantMessage).last()
    return reply.status_shown.plain.strip()


async def test_a_prompt_sent_while_the_tools_are_listed_waits_and_is_offered_them(tmp_path: Path):
    backend = RecordingBackend(reply="fine")
    with ToolRegistry.load(Config(tool_timeout=3), config(tmp_path, failing=True)) as tools:
        app = create_app(
            backend,
            blink=False,
            history=History(tmp_path / "history.db"),
            tools=tools,
            tool_policy=ToolApproval(),
        )
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.state.model_ready, "the model")
            assert not app.tool_rounds.specs  # the slow server is still starting
            await send(pilot, "hello", wait=False)
            await wait_for(pilot, lambda: backend.offered, "the request", bound=60)
            await wait_for(pilot, lambda: not app.generating, "the reply", bound=30)
            offered = {spec.name for spec in backend.offered[0][0]}
            assert {"echo", "add"} <= offered  # the slow server's tools
            assert app.chat.messages()[-1].text == "fine"
            assert len([n for n in notices(app) if "MCP server bad" in n]) == 1


async def test_esc_stops_a_prompt_waiting_for_the_tools_before_the_model_is_asked(
    tmp_path: Path,
):
    backend = RecordingBackend(reply="again")
    with ToolRegistry.load(Config(tool_timeout=3), config(tmp_path)) as tools:
        app = create_app(
            backend,
            blink=False,
            history=History(tmp_path / "history.db"),
            tools=tools,
            tool_policy=ToolApproval(),
        )
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.state.model_ready, "the model")
            await send(pilot, "hello", wait=False)
            await wait_for(
                pilot, lambda: reply_status(app) == WAITING, "the waiting line", bound=30
            )
            assert app.state.status == WAITING and not backend.requests
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.generating, "the stop")
            assert "stopped" in reply_status(app)
            await wait_for(pilot, lambda: app.tool_rounds.specs, "the server's tools", bound=60)
            await pilot.pause(0.2)
            assert not backend.requests  # the model was never asked
            assert not app.generating
            # The prompt stayed saved: Ctrl+R asks again, with the tools.
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: not app.generating and backend.requests, "the reply")
            assert {"echo", "add"} <= {spec.name for spec in backend.offered[0][0]}
