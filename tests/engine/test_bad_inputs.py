"""Files and values from outside that are not what they claim (issue 25): a named pipe, a
device or a folder where vibechat expects a file, endless input, a URL that does not parse.
Each is refused at once in one line, never a hang, an unbounded read or a traceback. The
CLI paths run in subprocesses with a timeout, so a hang fails the test instead of hanging it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from fakes import RecordingBackend
from vibechat.app.commands.batch import BatchOptions, run_batch
from vibechat.engine.errors import InvalidParameterError, VibechatError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.server_url import normalize_base_url

TIMEOUT = 30  # a hang on a FIFO fails here instead of hanging the suite


def vibechat(
    *args: str, env: dict[str, str] | None = None, stdin=subprocess.DEVNULL
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=stdin,
        env={**os.environ, **(env or {})},
    )


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# ----------------------------------------------------------------- config.toml
@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_config_that_is_no_file_is_refused_at_once(tmp_path, kind):
    path = tmp_path / "config.toml"
    if kind == "fifo":
        fifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    out = vibechat("run", "--no-save", "hi", env={"VIBECHAT_CONFIG": str(path)})
    line = one_error_line(out)
    assert out.returncode == 1
    what = {
        "fifo": "is a named pipe (FIFO)",
        "zero": "is a character device",
        "folder": "is a directory",
    }[kind]
    assert line.startswith(
        f"vibechat: error: config file {path}: could not be read: it {what}, not a file"
    ), line
    shown = vibechat("config", "show", env={"VIBECHAT_CONFIG": str(path)})
    assert shown.returncode == 0 and f"{what}, not a file" in shown.stdout


def test_models_dir_from_a_fifo_config_does_not_block(tmp_path):
    path = fifo(tmp_path / "config.toml")
    code = (
        "from vibechat.engine.settings.config import configured_models_dir; "
        "print(configured_models_dir())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "VIBECHAT_CONFIG": str(path)},
        stdin=subprocess.DEVNULL,
    )
    assert (out.returncode, out.stdout) == (0, "None\n"), out.stderr


# ------------------------------------------------------------------ history.db
@pytest.mark.parametrize("name", ["history.db", "history.db-wal", "history.db-shm"])
def test_a_fifo_history_is_refused_at_once(user_dirs, name):
    folder = user_dirs["data"] / "vibechat"
    folder.mkdir(parents=True, exist_ok=True)
    fifo(folder / name)
    out = vibechat("history", "list")
    line = one_error_line(out)
    assert out.returncode == 1
    assert f"{folder / name} is a named pipe (FIFO), not a file" in line and "move it aside" in line


# -------------------------------------------------------------- --prompts-file
@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_prompts_file_that_is_no_file_is_refused_at_once(tmp_path, kind):
    path = {
        "fifo": lambda: fifo(tmp_path / "p.jsonl"),
        "zero": lambda: Path("/dev/zero"),
        "folder": lambda: tmp_path,
    }[kind]()
    out = vibechat("run", "--no-save", "--prompts-file", str(path))
    line = one_error_line(out)
    assert out.returncode == 1
    what = {
        "fifo": "it is a named pipe (FIFO), not a file",
        "zero": "it is a character device, not a file",
        "folder": "it is a folder",
    }[kind]
    assert line.startswith(f"vibechat: error: cannot read prompts file {path}: {what}"), line
    assert json.loads(out.stdout)["error"]["exit_status"] == 1


class _Zeros(io.RawIOBase):
    """/dev/zero on stdin, with a guard: reading more than 64 MiB fails the test (the old
    code read it all, until memory ran out)."""

    def __init__(self) -> None:
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = len(buffer)
        self.total += size
        assert self.total <= 64 << 20, "the prompts were read without a bound"
        buffer[:size] = bytes(size)
        return size


def test_endless_prompts_on_stdin_stop_in_one_line():
    backend = RecordingBackend(reply="ok")
    options = BatchOptions(system=None, params=SamplingParams())
    with pytest.raises(VibechatError, match=r"^stdin line 1 is longer than 16 MiB: not a prompt"):
        run_batch(
            backend,
            io.BufferedReader(_Zeros()),
            "stdin",
            options,
            None,
            io.StringIO(),
            io.StringIO(),
        )


def test_a_line_nested_too_deeply_fails_that_line_only():
    backend = RecordingBackend(reply="Fine")
    deep = '{"prompt": ' + "[" * 1000 + "]" * 1000 + "}"
    prompts = io.BytesIO(f'{{"prompt": "one"}}\n{deep}\n{{"prompt": "two"}}\n'.encode())
    out, err = io.StringIO(), io.StringIO()
    code = run_batch(
        backend,
        prompts,
        "p.jsonl",
        BatchOptions(system=None, params=SamplingParams()),
        None,
        out,
        err,
    )
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 1
    assert [r["line"] for r in got] == [1, 2, 3]
    assert got[0]["text"] == got[2]["text"] == "Fine"
    assert got[1]["error"] == "not a valid request: JSON nested too deeply"
    assert (
        err.getvalue() == "vibechat: p.jsonl line 2: not a valid request: JSON nested too deeply\n"
    )


# -------------------------------------------------------------------- base_url
BAD_URLS = [
    ("http://[::1", "is not a URL: Invalid IPv6 URL"),
    ("http://a b/v1", "is not a URL: it contains a space or a control character"),
]


@pytest.mark.parametrize(("url", "why"), BAD_URLS)
def test_a_base_url_that_does_not_parse_is_one_line(tmp_path, url, why):
    with pytest.raises(InvalidParameterError, match=why):
        normalize_base_url(url)
    flag = vibechat("run", "--no-save", "--base-url", url, "hi")
    assert flag.returncode == 1
    assert one_error_line(flag).startswith(f"vibechat: error: --base-url: base_url {why}")
    env = vibechat("run", "--no-save", "hi", env={"VIBECHAT_BASE_URL": url})
    assert env.returncode == 1 and f"VIBECHAT_BASE_URL={url!r}: base_url {why}" in one_error_line(
        env
    )
    config = tmp_path / "config.toml"
    config.write_text(f"base_url = {json.dumps(url)}\n")
    bad = vibechat("run", "--no-save", "hi", env={"VIBECHAT_CONFIG": str(config)})
    assert bad.returncode == 1 and f"line 1: base_url {why}" in one_error_line(bad)
    shown = vibechat("config", "show", env={"VIBECHAT_CONFIG": str(config)})
    assert (
        shown.returncode == 0
        and "Traceback" not in shown.stderr
        and f"base_url {why}" in shown.stdout
    )


# ------------------------------------------------------------ the chat's start
@pytest.mark.parametrize("terminal", ["stdout", "stdin"])
def test_the_chat_refuses_to_start_without_a_terminal(terminal):
    """`vibechat < /dev/null > out` wrote escape codes into out and hung; now one line, exit 1,
    nothing written to the end that is not a terminal, and no model loaded. One end is a
    pseudo-terminal, the other is not."""
    import pty

    main, secondary = pty.openpty()
    try:
        with open(os.devnull, "rb") as null:
            out = subprocess.run(
                [str(VIBECHAT_BIN)],
                timeout=TIMEOUT,
                stderr=subprocess.PIPE,
                text=True,
                stdin=null if terminal == "stdout" else secondary,
                stdout=secondary if terminal == "stdout" else subprocess.PIPE,
            )
    finally:
        os.close(secondary)
        os.close(main)
    assert out.returncode == 1
    if terminal == "stdin":
        assert out.stdout == ""
    assert one_error_line(out) == (
        "vibechat: error: the chat needs a terminal (stdin and stdout); for scripts "
        "use 'vibechat run'."
    )


# ------------------------------------------------------------- honest bounds
def test_a_server_reply_cut_at_the_bound_while_thinking_says_so(stub, tmp_path):
    """A server that opens <think> and never closes it: at the 2M-character bound `run` printed
    nothing and exited 0; now one line on stderr names the bound (the exit status stays 0)."""
    stub.pieces = ["<think>", *["x" * 65536] * 40]  # 2.6 M characters, 41 events
    out = vibechat("run", "--no-save", "--base-url", stub.url, "-m", "stub-small", "hi")
    assert out.returncode == 0, out.stderr
    assert one_error_line(out) == (
        "vibechat: the reply was cut at vibechat's bound of 2,097,152 characters for a "
        "server's reply while the "
        "model was still thinking: no answer came; ask for a shorter reply: lower --max-tokens."
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    batch = vibechat(
        "run",
        "--no-save",
        "--base-url",
        stub.url,
        "-m",
        "stub-small",
        "--prompts-file",
        str(prompts),
    )
    assert batch.returncode == 0, batch.stderr
    assert json.loads(batch.stdout)["finish_reason"] == "length"
    assert one_error_line(batch) == (
        f"vibechat: {prompts} line 1: the reply was cut at vibechat's bound of 2,097,152 "
        "characters for a server's "
        "reply while the model was still thinking: no answer came; ask for a shorter "
        "reply: lower --max-tokens "
        "(or the line's max_tokens)."
    )
