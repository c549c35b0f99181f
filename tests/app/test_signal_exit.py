"""``SignalExit`` (app/terminal.py) on its own, in a process of its own with a stand-in app whose
exit never comes (an interface that hangs): the first signal asks the app to exit with
128 + the signal; a second one, or ``FORCE_EXIT_S`` later, ends the process at once, the
terminal's modes turned off first. (The real chat: tests/app/test_terminal_restore.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from vibechat.app.terminal import RESTORE

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

SCRIPT = textwrap.dedent("""
    import asyncio, os, signal, sys
    import vibechat.app.terminal as terminal

    terminal.FORCE_EXIT_S = float(sys.argv[2])

    class HungApp:  # asked to exit, it never does (or it did, and the process hangs after it)
        is_running = sys.argv[3] == "interface"

        def exit(self, result=None, return_code=0, message=None):
            print(f"exit asked: {return_code}", flush=True)

    async def main():
        terminal.SignalExit(HungApp()).install()
        for _ in range(int(sys.argv[1])):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.2)
        await asyncio.sleep(30)
        print("not ended", flush=True)

    asyncio.run(main())
""")


def run(signals: int, force_after: float, hung: str = "interface") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(signals), str(force_after), hung],
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    "signals, force_after, hung",
    [(2, 60.0, "interface"), (1, 0.5, "interface"), (1, 0.5, "after the interface")],
    ids=["second signal", "timer", "timer, the interface ended"],
)
def test_a_chat_that_does_not_end_after_a_signal_is_ended_with_its_terminal_restored(
    signals, force_after, hung
):
    """The last case: the interface has ended (``is_running`` false) but the process has not (a
    worker thread the interpreter waits for, an engine that does not close): it is ended too."""
    done = run(signals, force_after, hung)
    assert done.returncode == 128 + signal.SIGTERM, done
    assert done.stdout.startswith(b"exit asked: 143\n")  # first, as Ctrl+Q would
    assert done.stdout.endswith(RESTORE) and b"not ended" not in done.stdout
    assert b"Traceback" not in done.stderr
