"""Starts a stdio MCP server so that neither it nor anything it starts outlives vibechat: run
as a script (``python -I -S mcp_launcher.py PARENT_PID COMMAND [ARGS...]``), never imported by
vibechat.

The SDK starts the launcher in a session (process group) of its own and, when vibechat closes
the server, closes its stdin and waits for the launcher to exit; only a launcher still running
2 s later gets its group ended. A server exits on that EOF at once, and its children, which
the SDK never sees, would run on; so would everything if vibechat is killed (SIGKILL, a crash)
with a server mid-call. So the launcher is the server's keeper:

- it is a *subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): every descendant whose parent dies
  is reparented to it, not to init, even one that left the group with ``setsid()``;
- it forks the server (stdin and stdout are the server's alone), which dies with the launcher
  (``PR_SET_PDEATHSIG``, SIGKILL), and is told when vibechat dies (``PR_SET_PDEATHSIG``,
  SIGTERM; and it checks its parent every ``POLL_S``, where there is no prctl);
- whenever it ends (the server exited, vibechat is gone, or a signal came), it ends every
  descendant: SIGTERM to the group and to each child, a short grace, then SIGKILL to each
  child, round by round (the children of a killed child are its children next), until it has
  none left; then it exits, with the server's status.

A signal to the launcher (SIGTERM, SIGINT, SIGHUP) is passed on to the server first. Only the
standard library (it runs with ``-I -S``, quick to start); POSIX only, the subreaper and the
death signal Linux only (elsewhere: the group and the parent check, as before).

Imports inside functions are deliberate: ctypes (Linux's prctl) is imported only where a
launched server is tied to its parent.
"""

import os
import signal
import sys
import time

# How often the server and the parent are checked.
POLL_S = 0.1
# SIGTERM to SIGKILL for what is left once the server exited or vibechat is gone ...
GRACE_S = 0.5
# ... and after a signal to the launcher: the server gets it first (SDK: SIGKILL at 2 s).
SIGNAL_GRACE_S = 1.0
# Rounds of SIGKILL at most (each reaches one level deeper of a tree).
KILL_ROUNDS = 64
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, value: int) -> bool:
    """Linux's prctl(option, value); False where there is none or it failed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _children() -> list[int]:
    """This process's children (zombies included), from /proc; [] where it cannot tell."""
    me = os.getpid()
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return []
    listed = False
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", encoding="ascii") as handle:
                found.update(int(pid) for pid in handle.read().split())
            listed = True
        except (OSError, ValueError):
            continue
    if listed:
        return sorted(found)
    # A kernel without CONFIG_PROC_CHILDREN: every process's parent.
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.add(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return sorted(found)


def _reap() -> bool:
    """Reap every child that ended; False once there is no child left at all."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
        if pid == 0:
            return True


def _signal_children(signum: int, skip: set[int] | None = None) -> None:
    """Send ``signum`` to every child (but those in ``skip``, to which it then adds them)."""
    for pid in _children():
        if skip is not None:
            if pid in skip:
                continue
            skip.add(pid)
        try:
            # A child not reaped yet: its pid cannot be another's.
            os.kill(pid, signum)
        except OSError:
            pass


def end_descendants(grace: float) -> None:
    """End everything this process started, however deep and whichever session it is in:
    SIGTERM to the group and to every child (those adopted meanwhile too), up to ``grace`` for
    them to end, then SIGKILL to every child, round by round, until none is left (bounded)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    try:
        # The group (the launcher ignores it).
        os.killpg(0, signal.SIGTERM)
    except OSError:
        pass
    termed: set[int] = set()
    deadline = time.monotonic() + grace
    while _reap() and time.monotonic() < deadline:
        # Orphans adopted since (a server's setsid() child).
        _signal_children(signal.SIGTERM, termed)
        time.sleep(0.02)
    for _ in range(KILL_ROUNDS):
        if not _reap():
            return
        _signal_children(signal.SIGKILL)
        time.sleep(0.02)
    # Still some (no /proc): at least the group, launcher included, ends.
    try:
        os.killpg(0, signal.SIGKILL)
    except OSError:
        pass


def _start_server(command: list[str]) -> int:
    """Fork the server; it dies with the launcher (SIGKILL), however the launcher ends."""
    launcher = os.getpid()
    child = os.fork()
    if child == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # The launcher died before the death signal was set.
        if os.getppid() != launcher:
            os._exit(1)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
    return child


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("mcp_launcher: usage: PARENT_PID COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command = argv[1:]
    signalled: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # vibechat's death (its thread's, too) wakes us at once; it may be gone already.
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return 1
    child = _start_server(command)
    # The pipes are the server's: when it exits, vibechat sees them close.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return _watch(child, parent, signalled)


def _watch(child: int, parent: int, signalled: list[int]) -> int:
    """Until the server exits, vibechat is gone, or a signal comes; then end everything."""
    passed = 0
    while True:
        # Passed on to the server, which then ends (or is ended).
        while passed < len(signalled):
            try:
                os.kill(child, signalled[passed])
            except OSError:
                pass
            passed += 1
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pid, status = child, 0
        except InterruptedError:
            continue
        if pid == child:
            end_descendants(GRACE_S)
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if os.getppid() != parent:
            end_descendants(GRACE_S)
            return 1
        if signalled:
            end_descendants(SIGNAL_GRACE_S)
            return 128 + signalled[0]
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
