"""The chat (``vibechat`` with no command) given a model that is not there, or a FIFO where the
model should be: one line naming the problem and the fix, exit status 1, before the screen opens
(no alternate screen, no escape codes) and with no engine process left behind."""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest

from conftest import VIBECHAT_BIN

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a POSIX pseudo-terminal")

WAIT_S = 60


def chat_in_a_terminal(args: list[str]) -> tuple[int, bytes, int]:
    """``vibechat ARGS`` with a pseudo-terminal on stdin, stdout and stderr (the chat needs
    one); its exit status, everything it wrote, and its process group."""
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(TERM="xterm-256color", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    proc = subprocess.Popen(
        [str(VIBECHAT_BIN), *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        return proc.wait(WAIT_S), bytes(out), proc.pid
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
        os.close(master)


def engines_of(pid_group: int) -> list[str]:
    """The engine processes still running in process group ``pid_group``."""
    found = subprocess.run(["ps", "-eo", "pgid=,args="], capture_output=True, text=True)
    return [
        line
        for line in found.stdout.splitlines()
        if line.split(None, 1)[0] == str(pid_group) and "worker_child" in line
    ]


@pytest.mark.parametrize("kind", ["missing", "fifo"])
def test_a_model_that_cannot_be_opened_is_one_line_before_the_screen(tmp_path, kind):
    model = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(model)
    code, out, group = chat_in_a_terminal(["--model", str(model)])
    text = out.decode("utf-8", "replace")
    lines = [line for line in text.replace("\r", "").splitlines() if line.strip()]
    assert code == 1, text
    # Before the screen: no alternate screen, no escape code at all.
    assert b"\x1b" not in out, text
    assert len(lines) == 1 and lines[0].startswith("vibechat: error: "), text
    expected = "does not exist" if kind == "missing" else "is a FIFO (named pipe)"
    assert expected in lines[0] and str(model) in lines[0]
    assert "Traceback" not in text
    # The engine process the chat starts before it reads its flags ended with it.
    deadline = time.monotonic() + WAIT_S
    while engines_of(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engines_of(group) == []
