"""A real MCP server for the tests, written with the official SDK (``MCPServer``, stdio): ``python
tests/mcp_test_server.py [NAME]``. Its tools cover what a client must survive: a plain call (echo),
typed arguments (add), a call that hangs (slow), a server that dies mid-call (die), a result and a
description with terminal escapes and Rich markup (escapes, marked), a result over any sane bound
(huge), and what the server's environment holds (env).

``--fail-start`` exits before speaking MCP (a server that fails to start); ``--hang-start``
never answers (a server that hangs on start); ``--slow-start SECONDS`` waits that long before it
serves (a server slow to start). ``--pidfile FILE`` writes the server's pid
(the orphan tests look for it after its owner is killed). ``--http PORT`` serves
streamable HTTP on 127.0.0.1:PORT (path ``/mcp``) instead of stdio. ``--many`` adds 150
tools (more than a client keeps), the first with a description of 10,000 characters;
``--noisy`` writes 2 MiB to stderr first. ``--family`` adds ``family_of_processes``: a child
in the server's group, and one in a session of its own with a child of its own (the tests that
nothing outlives vibechat).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SLEEPER = "import time; time.sleep(600)"
# A process that leaves the server's group (setsid), starts a child of its own, says both pids.
ESCAPER = (
    "import os, subprocess, sys, time; os.setsid(); "
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print(os.getpid(), c.pid, flush=True); time.sleep(600)"
)


def main(argv: list[str]) -> None:
    args = list(argv)
    name = "test"
    if "--pidfile" in args:
        at = args.index("--pidfile")
        with open(args[at + 1], "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        del args[at : at + 2]
    if "--fail-start" in args:
        print("mcp_test_server: cannot start: the database is missing", file=sys.stderr)
        raise SystemExit(3)
    if "--noisy" in args:  # 2 MiB of stderr before it serves
        for _ in range(2048):
            sys.stderr.write("n" * 1023 + "\n")
        sys.stderr.write("the last line\n")
        sys.stderr.flush()
    if "--slow-start" in args:
        at = args.index("--slow-start")
        time.sleep(float(args[at + 1]))
        del args[at : at + 2]
    if "--hang-start" in args:
        while True:
            time.sleep(60)
    if args and not args[0].startswith("--"):
        name = args[0]

    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name)

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two whole numbers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Sleep for some seconds, then say so.")
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Die mid-call (the process exits at once).")
    def die() -> str:
        os._exit(7)

    @server.tool(description="Text with terminal escapes and Rich markup.")
    def escapes() -> str:
        return "\x1b[2J\x1b]0;pwned\x07[bold red]not bold[/] \x1b[31mred\x1b[0m done"

    @server.tool(description="A result of about a megabyte.")
    def huge() -> str:
        return "x" * 1_000_000

    @server.tool(description="The value of one environment variable, or <unset>.")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(
        description="\x1b]0;pwned\x07[bold red]Marked up[/] "
        "\x1b[31mdescription\x1b[0m.\nSecond line."
    )
    def marked() -> str:
        return "ok"

    if "--family" in args:  # a tool that starts a process tree of the server's own
        server.tool(
            description="Start a family of processes (their pids to a file), then wait "
            "some seconds."
        )(family_of_processes)

    if (
        "--many" in args
    ):  # more tools than a client keeps, one with a description of 10,000 characters
        for n in range(150):
            server.tool(name=f"t{n:03d}", description="long " * 2_000 if n == 0 else f"Tool {n}.")(
                lambda: "ok"
            )

    if "--http" in args:  # streamable HTTP on 127.0.0.1:PORT, path /mcp
        server.run("streamable-http", host="127.0.0.1", port=int(args[args.index("--http") + 1]))
    else:
        server.run("stdio")


def family_of_processes(pidfile: str, seconds: float = 0) -> str:
    """Start a child in this server's group and one in a session of its own (with a child of
    its own: a grandchild of the server), write all their pids and the server's to ``pidfile``
    (JSON), then sleep ``seconds``. Each would sleep 10 minutes unless ended."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], **quiet)
    escaper = subprocess.Popen(
        [sys.executable, "-c", ESCAPER], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    assert escaper.stdout is not None
    escaped, grandchild = (int(pid) for pid in escaper.stdout.readline().split())
    pids = {"server": os.getpid(), "child": child.pid, "escaped": escaped, "grandchild": grandchild}
    with open(pidfile + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(pids, handle)
    os.replace(pidfile + ".tmp", pidfile)
    time.sleep(seconds)
    return "started " + " ".join(map(str, pids.values()))


if __name__ == "__main__":
    main(sys.argv[1:])
