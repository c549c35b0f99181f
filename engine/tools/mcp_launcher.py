"""Starts a stdio MCP server so that it cannot outlive vibechat: run as a script
(``python -I -S mcp_launcher.py PARENT_PID COMMAND [ARGS...]``), never imported by vibechat.

The SDK starts the server in a session (process group) of its own and stops that group when
vibechat closes it; but vibechat may be killed (SIGKILL, a crash) with a server mid-call,
which would then run on, an orphan. This launcher is that group's leader: it forks the
server (stdin and stdout are the server's alone) and watches its own parent; when the parent
is gone (reparented: vibechat died) it stops the whole group, SIGTERM then SIGKILL. When the
server ends, the launcher ends with its status. A signal to the launcher is passed on.

Only the standard library (it runs with ``-I -S``, quick to start); POSIX only.
"""

import os
import signal
import sys
import time

POLL_S = 0.2  # how often the parent is checked
GRACE_S = 2.0  # SIGTERM to SIGKILL


def _stop_group() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        except ChildProcessError:
            break
    os.killpg(0, signal.SIGKILL)  # the launcher too


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("mcp_launcher: usage: PARENT_PID COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command = argv[1:]
    if os.getppid() != parent:  # vibechat is gone already
        return 1
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
    # The pipes are the server's: when it exits, vibechat sees them close.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except OSError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if os.getppid() != parent:
            _stop_group()
            return 1
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
