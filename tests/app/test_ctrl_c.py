"""Ctrl-C at any moment of ``vibechat run``: while the model loads, while the prompt is evaluated,
while the reply streams (tests/app/test_cli_run.py). Real processes on the starter model, SIGINT
sent when the process says (on stderr, with ``--verbose``) which stage it is in. Each must end with
exit 130, no traceback and no "Exception ignored" (a KeyboardInterrupt raised inside one of
llama.cpp's ctypes callbacks is printed and lost: the run used to go on), and what was said must be
saved."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest

from conftest import VIBECHAT_BIN, default_sigint
from vibechat.engine.chat.history import History

pytestmark = pytest.mark.model

LONG_PROMPT = "Summarise this log:\n" + "\n".join(
    f"{i}. station {i * 7 % 13} reported {i * 37 % 1000} units at {i % 24:02d}:00"
    for i in range(1, 300)
)


def interrupt_when(args: list[str], marker: str) -> tuple[int, str, str]:
    """Run ``vibechat --verbose run ARGS``; send SIGINT when a stderr line contains
    ``marker``; return (exit code, stdout, stderr)."""
    proc = subprocess.Popen(
        [str(VIBECHAT_BIN), "--verbose", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None and proc.stdout is not None
    out: list[str] = []

    def read() -> None:
        out.append(proc.stdout.read())  # type: ignore[union-attr]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    err: list[str] = []
    sent = False
    for line in proc.stderr:
        err.append(line)
        if not sent and marker in line:
            proc.send_signal(signal.SIGINT)
            sent = True
    proc.wait(timeout=120)
    reader.join(timeout=10)
    assert sent, f"never saw {marker!r}:\n{''.join(err)[-2000:]}"
    return proc.returncode, "".join(out), "".join(err)


def assert_clean(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]


def test_ctrl_c_while_the_model_loads(starter_installed):
    # llama.cpp logs every tensor's type while it reads the file: that is mid-load
    code, out, err = interrupt_when(
        ["-p", "Tell me a long story.", "-n", "300"], "llama_model_loader:"
    )
    assert code == 130
    assert_clean(err)
    assert out == ""  # nothing was generated
    # --json prints its object all the same: nothing generated, nothing saved
    code, out, err = interrupt_when(
        ["-p", "Tell me a long story.", "--json"], "llama_model_loader:"
    )
    assert code == 130
    assert_clean(err)
    result = json.loads(out)
    assert (
        result["finish_reason"] == "cancelled"
        and result["text"] == ""
        and result["conversation_id"] is None
    )


def test_ctrl_c_while_the_prompt_is_evaluated_saves_the_prompt_and_a_stopped_reply(
    starter_installed,
):
    # "loaded ..." is logged once the model is in memory, just before the long prompt's evaluation.
    # The signal lands anywhere from there (still inside load(), while the prompt is saved, before
    # the request starts, or during the evaluation of its ~6,000 tokens, which takes seconds on
    # any CPU), and each of those moments ends the same way: that is what is asserted.
    code, out, err = interrupt_when(
        ["-p", LONG_PROMPT, "--ctx", "8192", "--json"], "vibechat.llama_cpp: loaded "
    )
    assert code == 130
    assert_clean(err)
    result = json.loads(out)
    assert result["finish_reason"] == "cancelled"
    assert (
        result["stats"]["completion_tokens"] <= 1
    )  # stopped in the prompt, not after a long reply
    with History() as history:
        conversation = history.get(history.latest().id)
    user, reply = conversation.messages
    assert user.content == LONG_PROMPT and reply.status == "stopped"
