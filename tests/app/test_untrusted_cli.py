"""Issue 13 end to end: text from outside reaches the terminal neither raw nor as a
traceback, and a misbehaving server cannot keep `vibechat run` going. `vibechat run
--backend openai` in a subprocess against the stub server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import VIBECHAT_BIN


def vibechat(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


@pytest.mark.parametrize("flag", [None, "--raw", "--json"])
def test_a_lone_surrogate_from_the_server_is_no_traceback(stub, flag):
    """QA: `UnicodeEncodeError`, exit 1, when the server's JSON carried \\ud800."""
    stub.reply = "Hi \ud800 there"
    out = vibechat(
        "run",
        "--backend",
        "openai",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "Say hello.",
        *([flag] if flag else []),
    )
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr.decode(
        errors="replace"
    )
    text = (
        json.loads(out.stdout)["text"]
        if flag == "--json"
        else out.stdout.decode("utf-8").rstrip("\n")
    )
    assert text == "Hi \ufffd there"


def test_run_n_stops_an_endless_stream(stub):
    """QA: `run -n 5` against an endless stream printed for 30 s (2.9 GB RSS)."""
    stub.mode = "endless"
    out = vibechat(
        "run",
        "--backend",
        "openai",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "Say hello.",
        "-n",
        "5",
        "--json",
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    result = json.loads(out.stdout)
    assert result["text"] == "tok0 tok1 tok2 tok3 tok4 " and result["finish_reason"] == "length"
    assert stub.client_gone.wait(10)
