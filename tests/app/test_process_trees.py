"""Nothing vibechat starts outlives it (issue 40, point 3): a real `vibechat run` whose model (the
OpenAI stub on 127.0.0.1) calls a tool of a real MCP server over stdio (tests/mcp_test_server.py
``--family``), which starts a child in its own process group and one that leaves it
(``setsid()``) with a child of its own. After a normal end, SIGTERM, SIGHUP and SIGKILL of
vibechat mid-call, the server, its launcher and every one of those processes are gone within a
bounded wait. Before, the server exited on EOF before its launcher noticed, so its group was
never ended; and a process in a session of its own escaped the group in every case."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from openai_stub import fragments

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")
GONE_S = 10.0  # every process must be gone this long after vibechat is
WAIT_S = 60.0  # other waits (the call to start), bounded; nothing is timed


def state_of(pid: int) -> str | None:
    """The process's state letter (R, S, Z, ...), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    return state_of(pid) not in (None, "Z", "X")  # a zombie has ended (whoever adopted it reaps it)


def left_behind(pids: dict[str, int]) -> dict[str, int]:
    """Those of ``pids`` still running after up to GONE_S."""
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(alive(pid) for pid in pids.values()):
        time.sleep(0.05)
    return {name: pid for name, pid in pids.items() if alive(pid)}


def end_for_good(pids: dict[str, int]) -> None:
    """Whatever a failing test left behind, ended (only the test's own processes)."""
    for pid in pids.values():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (
            b"time.sleep(600)" in cmdline
            or b"mcp_test_server" in cmdline
            or b"mcp_launcher" in cmdline
        ):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("how", ["end", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_nothing_an_mcp_server_started_outlives_vibechat(stub, tmp_path: Path, how: str):
    pidfile = tmp_path / "family.json"
    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [SERVER, "--family"]}
    config.write_text(json.dumps({"mcpServers": {"test": server}}))
    seconds = 0 if how == "end" else 600  # else vibechat is ended mid-call
    stub.reply = "Started."
    arguments = json.dumps({"pidfile": str(pidfile), "seconds": seconds})
    stub.tool_deltas = fragments(0, "call_1", "family_of_processes", arguments)
    run = subprocess.Popen(
        [
            str(VIBECHAT_BIN),
            "run",
            "--base-url",
            stub.url,
            "--model",
            "stub-small",
            "--mcp-config",
            str(config),
            "--allow-tool",
            "test/family_of_processes",
            "-p",
            "Start them.",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + WAIT_S
        while not pidfile.exists():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, f"the tool call did not start within {WAIT_S} s"
            time.sleep(0.05)
        pids = json.loads(pidfile.read_text())
        pids["launcher"] = parent_of(pids["server"])
        assert (
            parent_of(pids["launcher"]) == run.pid
        )  # the server runs under its launcher, vibechat's child
        assert all(alive(pid) for pid in pids.values()), pids
        assert os.getsid(pids["escaped"]) != os.getsid(
            pids["server"]
        )  # it left the server's session
        if how != "end":
            run.send_signal(getattr(signal, how))
        out, err = run.communicate(timeout=WAIT_S)
        if how == "end":
            assert run.returncode == 0, err
            assert out.strip() == "Started."
        else:
            assert run.returncode == -getattr(signal, how), err
        assert not left_behind(pids), (
            f"still running after vibechat ended ({how}): {left_behind(pids)} of {pids}"
        )
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(WAIT_S)
        end_for_good(pids)
