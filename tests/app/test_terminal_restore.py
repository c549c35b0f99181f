"""The real ``vibechat`` chat in a pseudo-terminal: quitting it (Ctrl+Q) after its engine
process crashed mid-reply leaves the terminal as it was, exactly as a quit without a crash
does. Every mode the app turned on (alternate screen, mouse reporting, bracketed paste,
focus events, the kitty keyboard protocol, no line wrap, the hidden cursor) is turned off
after the last time it was turned on, the tty's settings (echo, canonical input) are the
ones it had before, the exit status is 0, and nothing like a traceback was printed (the
engine's fault handler writes to its own pipe, never to the terminal).

The clean quit is the baseline: the same checks pass there, so they can tell. SIGTERM, SIGHUP
and SIGINT mid-reply end the chat as Ctrl+Q does: the same checks, the reply saved as stopped
with its text so far, the engine process ended (issue 40, point 4)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import sqlite3
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, default_sigint
from vibechat.engine.llama.worker_child import CRASH_HOOK_ENV

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(os.name != "posix", reason="a POSIX pseudo-terminal"),
]

COLUMNS, ROWS = 100, 30
WAIT_S = 120  # every wait below is bounded by this; nothing is timed
PROMPT = "Write a long story about a dragon who learns to bake bread."

# (turned on, turned off): the modes Textual's Linux driver sets, as it writes them.
MODES = {
    "alternate screen": (b"\x1b[?1049h", b"\x1b[?1049l"),
    "mouse (VT200)": (b"\x1b[?1000h", b"\x1b[?1000l"),
    "mouse (any event)": (b"\x1b[?1003h", b"\x1b[?1003l"),
    "mouse (urxvt)": (b"\x1b[?1015h", b"\x1b[?1015l"),
    "mouse (SGR)": (b"\x1b[?1006h", b"\x1b[?1006l"),
    "bracketed paste": (b"\x1b[?2004h", b"\x1b[?2004l"),
    "focus events": (b"\x1b[?1004h", b"\x1b[?1004l"),
    "hidden cursor": (b"\x1b[?25l", b"\x1b[?25h"),
    "no line wrap": (b"\x1b[?7l", b"\x1b[?7h"),
}
KITTY_ON = re.compile(rb"\x1b\[>\d+u")
KITTY_OFF = b"\x1b[<u"
ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\|[@-Z\\-_])"
)


class Terminal:
    """The chat on the slave side of a pseudo-terminal of COLUMNS x ROWS; everything it
    writes is collected from the master side by a thread."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        program: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """``vibechat ARGS``; ``program``: another command line that starts the chat
        (``python3 dev.py chat``), run in ``cwd``."""
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.tty_before = termios.tcgetattr(self.slave)
        self.output = bytearray()
        self._lock = threading.Lock()

        def controlling_tty() -> None:
            """A new session whose controlling terminal is this one, SIGINT as a terminal's
            foreground job gets it (a background job, as CI may run the suite, starts with SIGINT
            ignored, and the chat keeps a signal that was ignored: conftest.default_sigint)."""
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            default_sigint()

        self.proc = subprocess.Popen(
            [*(program or [str(VIBECHAT_BIN)]), *args],
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            env=env,
            close_fds=True,
            start_new_session=True,
            preexec_fn=controlling_tty,
            cwd=cwd,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="pty-reader")
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError as exc:  # EIO: every slave side is closed
                if exc.errno != errno.EIO:
                    raise
                return
            if not data:
                return
            with self._lock:
                self.output += data

    def raw(self) -> bytes:
        with self._lock:
            return bytes(self.output)

    def text(self) -> str:
        """What was written, control sequences taken out (no screen emulation: words
        written in one piece are found, which is what the waits below look for)."""
        return ESCAPES.sub("", self.raw().decode("utf-8", "replace"))

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait_for(self, needle: str, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while needle not in self.text():
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the chat exited ({self.proc.returncode}) before "
                    f"{what}:\n{self.text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"waited {WAIT_S} s for {what}:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def quit(self) -> int:
        """Ctrl+Q; the exit status. The tty settings are read before the slave side closes."""
        self.type(b"\x11")
        try:
            code = self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the chat did not quit within {WAIT_S} s:\n{self.text()[-3000:]}")
        self.tty_after = termios.tcgetattr(self.slave)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT_S)
        os.close(self.slave)  # the reader sees EIO once the output is drained
        self._reader.join(WAIT_S)
        os.close(self.master)


@pytest.fixture
def chat_env(starter_installed: Path) -> dict[str, str]:
    """The test's user dirs (conftest), the starter model as the default, a plain xterm."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "TEXTUAL", "TEXTUAL_DRIVER")
        and not k.startswith("PYTEST")
    }
    env.update(TERM="xterm-256color", COLORTERM="truecolor", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    env.pop("TEXTUAL_ALLOW_SIGNALS", None)
    return env


def chat_until_quit(
    env: dict[str, str], prompt: str, answered: str, max_tokens: int
) -> tuple[int, Terminal]:
    """Open the chat, wait for the model, send ``prompt``, wait until ``answered`` shows,
    quit; the exit status and the terminal (closed)."""
    term = Terminal(["--temperature", "0", "--max-tokens", str(max_tokens), "--ctx", "2048"], env)
    try:
        term.wait_for("Enter sends", "the model to load")  # the welcome line once it is ready
        term.type(prompt.encode())
        term.wait_for(prompt[-20:], "the prompt to show in the input")
        term.type(b"\r")
        term.wait_for(answered, f"{answered!r} on the screen")
        code = term.quit()
    finally:
        term.close()
    return code, term


def assert_terminal_restored(term: Terminal, code: int, expected: int = 0) -> None:
    """Every mode off after it was last turned on, the tty's settings as before, exit status
    ``expected``, no traceback."""
    out = term.raw()
    screen = term.text()
    assert code == expected, screen[-3000:]
    for name, (on, off) in MODES.items():
        last_on = out.rfind(on)
        assert last_on >= 0, (
            f"{name}: never turned on ({on!r}): not what this test knows of the driver"
        )
        assert out.find(off, last_on) > last_on, (
            f"{name}: still on at exit ({off!r} never came after {on!r})"
        )
    kitty = list(KITTY_ON.finditer(out))
    if kitty:  # TEXTUAL's DISABLE_KITTY_KEY turns it off altogether
        assert out.find(KITTY_OFF, kitty[-1].end()) >= 0, (
            "the kitty keyboard protocol is still on at exit"
        )
    # the cursor is shown at the end (after the last hide), on the normal screen
    assert out.rfind(b"\x1b[?25h") > out.rfind(b"\x1b[?25l")
    assert out.rfind(b"\x1b[?1049l") > out.rfind(b"\x1b[?1049h")
    # the tty's own settings: echo, canonical input, signals, flow control as they were
    assert term.tty_after == term.tty_before
    for bad in (
        "Traceback",
        "Fatal Python error",
        "Exception ignored",
        "Segmentation fault",
        "Error in atexit",
    ):
        assert bad not in screen, screen[-3000:]


def test_a_clean_quit_restores_the_terminal(chat_env):
    """The baseline: a reply, then Ctrl+Q."""
    code, term = chat_until_quit(chat_env, "List three colours.", "tok/s", 24)
    assert_terminal_restored(term, code)


def test_quitting_after_the_engine_crashed_mid_reply_restores_the_terminal(chat_env):
    # The engine process sends itself SIGSEGV once its first piece of the reply was sent
    # (engine/llama/worker_child.py _crash_hook): mid-reply, every time, without racing a signal.
    chat_env[CRASH_HOOK_ENV] = "reply:SIGSEGV"
    code, term = chat_until_quit(chat_env, PROMPT, "SIGSEGV", 400)
    assert "mid-reply" in term.text()
    assert_terminal_restored(term, code)
    reports = list((Path(chat_env["VIBECHAT_STATE_DIR"]) / "crashes").iterdir())
    assert len(reports) == 1 and "SIGSEGV" in reports[0].read_text()


def saved_reply(env: dict[str, str]) -> tuple[str, str] | None:
    """The last saved reply in the chat's history (its status and text), read as it is written
    (read-only: the chat's own database under the test's data folder), or None."""
    path = Path(env["VIBECHAT_DATA_DIR"]) / "history.db"
    if not path.exists():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            row = db.execute(
                "SELECT status, content FROM messages WHERE role = 'assistant' "
                "ORDER BY id DESC LIMIT 1"
            ).fetchone()
    except sqlite3.Error:  # not created yet
        return None
    return (str(row[0]), str(row[1])) if row else None


def wait_for_pieces(term: Terminal, env: dict[str, str], count: int) -> str:
    """Wait until the streaming reply was saved with ``count`` different texts (so at least that
    many pieces came); the text saved last."""
    seen: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while len(seen) < count:
        if term.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no reply of {count} pieces streaming ({seen}):\n{term.text()[-3000:]}")
        reply = saved_reply(env)
        if (
            reply is not None
            and reply[0] == "streaming"
            and reply[1].strip()
            and reply[1] not in seen
        ):
            seen.append(reply[1])
        time.sleep(0.05)
    return seen[-1]


def engine_process_of(chat_pid: int) -> int | None:
    """The chat's engine process (``python -m vibechat.engine.llama.worker_child``, its child), if
    running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            int(stat_line.rsplit(")", 1)[1].split()[1]) == chat_pid
            and b"vibechat.engine.llama.worker_child" in cmdline
        ):
            return int(entry.name)
    return None


def wait_gone(pid: int) -> bool:
    """The process ended and was reaped (no /proc entry left), within 10 s."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda sig: sig.name
)
def test_a_signal_mid_reply_restores_the_terminal_and_keeps_the_reply(chat_env, sig):
    """SIGTERM, SIGHUP or SIGINT sent to the chat while a reply streams (``kill``, a closing
    terminal window, a service manager) ends it as Ctrl+Q does: the terminal as it was (every
    mode off, the cursor shown, the tty's settings), exit status 128 + the signal, no
    traceback; the reply saved as stopped with its text so far; the engine process ended and
    reaped. Before, the signal ended the chat on the spot: the alternate screen, mouse
    reporting and the hidden cursor stayed on."""
    chat_env[CRASH_HOOK_ENV] = (
        "reply:slow1.0"  # a piece a second: the reply is still coming at the signal
    )
    term = Terminal(["--temperature", "0", "--max-tokens", "400", "--ctx", "2048"], chat_env)
    engine = None
    try:
        term.wait_for("Enter sends", "the model to load")
        term.type(PROMPT.encode())
        term.wait_for(PROMPT[-20:], "the prompt to show in the input")
        term.type(b"\r")
        text = wait_for_pieces(term, chat_env, 1)
        engine = engine_process_of(term.proc.pid)
        assert engine is not None
        term.proc.send_signal(sig)
        try:
            code = term.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the chat did not end within {WAIT_S} s of {sig.name}:\n{term.text()[-3000:]}"
            )
        term.tty_after = termios.tcgetattr(term.slave)
        assert_terminal_restored(term, code, 128 + sig)
        status, saved = saved_reply(chat_env) or ("", "")
        assert status == "stopped" and saved.startswith(text), (status, saved, text)
        assert wait_gone(engine), f"the engine process {engine} outlived the chat"
    finally:
        if engine is not None and Path(f"/proc/{engine}").exists():
            os.kill(engine, signal.SIGKILL)
        term.close()


CRASHING_CHAT = """\
from vibechat.app.tui.shell.app import VibechatApp

def crash(self):
    raise RuntimeError("an injected crash in the chat's own code")

VibechatApp.action_help = crash  # F1 now fails inside the chat
from vibechat.app.commands.cli import main
main()
"""


def test_a_crash_in_the_chats_own_code_restores_the_terminal(chat_env):
    """A bug in the chat itself (an exception in an action, here F1's): the terminal is
    restored all the same (every mode off, the cursor shown, the tty's settings) and the exit
    status is not 0. The traceback is shown, once the screen is the terminal's again: a bug
    report needs it."""
    python = str(VIBECHAT_BIN.parent / "python")
    term = Terminal([], chat_env, program=[python, "-c", CRASHING_CHAT])
    try:
        term.wait_for("Enter sends", "the model to load")
        term.type(b"\x1bOP")  # F1
        try:
            code = term.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the chat did not end after its crash:\n{term.text()[-3000:]}")
        term.tty_after = termios.tcgetattr(term.slave)
    finally:
        term.close()
    out, screen = term.raw(), term.text()
    assert code != 0 and "an injected crash in the chat's own code" in screen, screen[-3000:]
    for name, (on, off) in MODES.items():
        last_on = out.rfind(on)
        assert last_on >= 0 and out.find(off, last_on) > last_on, (
            f"{name}: still on after the crash"
        )
    assert out.rfind(b"\x1b[?25h") > out.rfind(b"\x1b[?25l")
    assert out.rfind(b"\x1b[?1049l") > out.rfind(b"\x1b[?1049h")
    assert term.tty_after == term.tty_before
