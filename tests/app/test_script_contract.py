"""What scripts rely on (issue 30, point 3), in real ``vibechat`` subprocesses against the
stub server on 127.0.0.1 (tests/openai_stub.py): with ``--json`` stdout holds exactly one
JSON object, also on failure (``error``: message, kind, exit status); a reply cut by a dying
server reports what is known; ``engine`` describes the server actually used; a value of the
wrong type is a usage error (exit 2) in vibechat's words, in every command; tables piped
stay one row per line; an empty reply says so and exits 4. No model is loaded here."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import VIBECHAT_BIN
from openai_stub import refused_url

KEY = "sk-test-5ecret-KEY-0123456789"


def vibechat(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def one_object(out: subprocess.CompletedProcess) -> dict:
    """stdout is exactly one JSON object, on one line."""
    assert out.stdout.endswith("\n") and out.stdout.count("\n") == 1, (out.stdout, out.stderr)
    obj = json.loads(out.stdout)
    assert isinstance(obj, dict)
    return obj


def failed(out: subprocess.CompletedProcess, status: int, kind: str) -> dict:
    """A failure: one JSON object with ``error``, the same one line on stderr, the exit status."""
    obj = one_object(out)
    assert out.returncode == status, (out.stdout, out.stderr)
    error = obj["error"]
    assert (error["kind"], error["exit_status"]) == (kind, status), error
    assert "\n" not in error["message"] and error["message"]
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("vibechat: error: ") and error["message"] in lines[0]
    return obj


def server_case(stub, case: str) -> list[str]:
    """The command line (after ``run``) for a failure that needs a server, set up on ``stub``."""
    if case == "bad key":
        stub.api_key = KEY
        return [
            "--base-url",
            stub.url,
            "--model",
            "stub-small",
            "-p",
            "Hi",
            "--api-key-env",
            "MY_KEY",
        ]
    if case == "unknown model":
        return ["--base-url", stub.url, "--model", "llama3", "-p", "Hi"]
    if case == "server error":
        stub.mode = "status"
        return ["--base-url", stub.url, "--model", "stub-small", "-p", "Hi"]
    assert case == "prompt beyond the context"
    stub.model_fields = {"meta": {"n_ctx": 256}}  # llama-server says its context
    return [
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "lorem ipsum " * 6000,
    ]  # 72 kB: > 256 tokens


@pytest.mark.parametrize(
    ("case", "kind", "needle"),
    [
        ("bad key", "server", "refused the API key"),
        ("unknown model", "server", "has no model 'llama3'"),
        ("server error", "server", "HTTP 500"),
        ("prompt beyond the context", "context", "256-token context"),
    ],
)
def test_json_on_a_server_failure_is_one_object_with_the_error(stub, case, kind, needle):
    out = vibechat("run", "--json", *server_case(stub, case), env={"MY_KEY": "wrong"})
    obj = failed(out, 1, kind)
    assert needle in obj["error"]["message"]
    assert obj["text"] == "" and obj["params"]["temperature"] == 0.8  # what is known is there
    assert KEY not in out.stdout + out.stderr


def test_json_on_a_failure_before_any_model_is_one_object(tmp_path, user_dirs):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    cases = [
        (["--model", "no-such-model"], "model", "no local model named 'no-such-model'"),
        (["--model", str(empty)], "model", "is empty"),
        (["--base-url", refused_url(), "--model", "m"], "server", "connection refused"),
        (["--temperature", "9"], "value", "temperature must be between 0 and 5"),
    ]
    for args, kind, needle in cases:
        obj = failed(vibechat("run", "-p", "Hi", "--json", *args), 1, kind)
        assert needle in obj["error"]["message"]
    obj = failed(
        vibechat("run", "-p", "Hi", "--json", "--model", "no-such-model", "--top-k", "7"),
        1,
        "model",
    )
    assert obj["model"] == "no-such-model" and obj["params"]["top_k"] == 7 and obj["engine"] is None
    # A config file that cannot be read stops the run: said in the object too.
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('model = "unclosed\n')
    failed(vibechat("run", "-p", "Hi", "--json"), 1, "config")


def test_json_on_a_usage_error_is_one_object_with_exit_2():
    out = vibechat("run", "-p", "Hi", "--json", "-n", "abc")
    obj = one_object(out)
    assert (
        out.returncode == 2 and obj["error"]["kind"] == "usage" and obj["error"]["exit_status"] == 2
    )
    assert obj["error"]["message"].startswith("--max-tokens must be a whole number")
    out = vibechat("run", "-p", "Hi", "--json", "--bogus")
    assert out.returncode == 2 and one_object(out)["error"]["kind"] == "usage"
    out = vibechat("run", "-p", "Hi", "--bogus")  # without --json: stdout stays empty
    assert out.returncode == 2 and out.stdout == ""


def test_a_prompts_file_that_cannot_start_prints_one_json_line(tmp_path, stub):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')
    obj = failed(
        vibechat(
            "run", "--prompts-file", str(prompts), "--base-url", refused_url(), "--model", "m"
        ),
        1,
        "server",
    )
    assert "connection refused" in obj["error"]["message"]
    obj = failed(vibechat("run", "--prompts-file", str(tmp_path / "missing.jsonl")), 1, "error")
    assert "cannot read prompts file" in obj["error"]["message"]


@pytest.mark.parametrize("text", ["", "\n \n"])
def test_no_prompts_on_stdin_is_nothing_to_do_exit_0_and_no_json_line(stub, text):
    """``generate | vibechat run --prompts-file -`` where the generator found nothing: no
    result, one line on stderr, exit status 0 (no failure: nothing was asked)."""
    out = vibechat(
        "run", "--prompts-file", "-", "--base-url", stub.url, "--model", "stub-small", input=text
    )
    assert out.returncode == 0 and out.stdout == "", (out.stdout, out.stderr)
    assert out.stderr == "vibechat: no prompts in stdin (it is empty or blank): nothing to do.\n"


def test_a_reply_cut_by_a_dying_server_reports_what_is_known(stub):
    stub.mode = "cut"  # three words, then the connection drops mid-event
    out = vibechat(
        "run", "--base-url", stub.url, "--model", "stub-small", "-p", "Say hello.", "--json"
    )
    obj = failed(out, 1, "interrupted")
    assert obj["text"] == "Hello there, this" and obj["finish_reason"] == "interrupted"
    stats = obj["stats"]
    assert (
        stats["completion_tokens"] == 3 and stats["thinking_tokens"] == 0
    )  # the pieces that arrived
    assert stats["ttft_ms"] is not None and stats["elapsed_ms"] >= stats["ttft_ms"]
    assert (
        stats["seed"] == stub.last_body["seed"] and stats["prompt_tokens"] is None
    )  # the server never said
    assert obj["engine"]["backend"] == "openai" and obj["engine"]["base_url"] == stub.url


def test_engine_describes_the_server_and_its_model_id(stub):
    # llama-cpp-python's server names a model by its path
    served = "/root/models/gemma-3-1b-it-Q4_K_M.gguf"
    stub.models = [served]
    stub.model_fields = {"meta": {"n_ctx": 4096}}
    out = vibechat("run", "--base-url", stub.url, "-p", "Hi", "--json")
    assert out.returncode == 0, out.stderr
    obj = one_object(out)
    assert obj["model"] == served and obj["model_path"] is None and "error" not in obj
    engine = obj["engine"]
    assert (
        engine["backend"] == "openai"
        and engine["base_url"] == stub.url
        and engine["model"] == served
    )
    assert engine["server"] == stub.url.removesuffix("/v1") and engine["context_size"] == 4096
    for local_only in (
        "kv_cache_type",
        "gpu_layers",
        "n_threads",
        "flash_attn",
        "repack",
        "device",
    ):
        assert local_only not in engine


@pytest.mark.parametrize(
    ("args", "said", "command"),
    [
        (
            ["run", "-p", "hi", "-n", "abc"],
            "--max-tokens must be a whole number between 0 and 1000000",
            "vibechat run",
        ),
        (
            ["run", "-p", "hi", "--top-k", "abc"],
            "--top-k must be a whole number between 0 and 1000",
            "vibechat run",
        ),
        (
            ["run", "-p", "hi", "--temperature", "abc"],
            "--temperature must be a number between 0 and 5",
            "vibechat run",
        ),
        (["run", "-p", "hi", "--seed", "x"], "--seed must be a whole number", "vibechat run"),
        (
            ["run", "-p", "hi", "--ctx", "abc"],
            "--ctx must be a whole number (got 'abc')",
            "vibechat run",
        ),
        (
            ["run", "-p", "hi", "--threads", "many"],
            "--threads must be a whole number (got 'many')",
            "vibechat run",
        ),
        (
            ["-t", "hot"],
            "--temperature must be a number between 0 and 5 (got 'hot')",
            "vibechat",
        ),  # the chat
        (["--ctx", "big"], "--ctx must be a whole number (got 'big')", "vibechat"),
        (
            ["--top-p", "x", "config", "show"],
            "--top-p must be a number between 0 and 1 (got 'x')",
            "vibechat",
        ),
        (
            ["history", "show", "abc"],
            "ID must be a whole number (got 'abc')",
            "vibechat history show",
        ),
        (
            ["history", "list", "-n", "x"],
            "--limit must be a whole number (got 'x')",
            "vibechat history list",
        ),
        (
            ["history", "list", "-n", "0"],
            "--limit must be at least 1 (got 0)",
            "vibechat history list",
        ),
        (
            ["models", "search", "q", "--limit", "y"],
            "--limit must be a whole number (got 'y')",
            "vibechat models search",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_a_usage_error_in_our_words(args, said, command):
    out = vibechat(*args)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    line = out.stderr.rstrip("\n")
    assert out.stderr.count("\n") == 1 and line.startswith(f"vibechat: error: {said}"), out.stderr
    assert line.endswith(f" (see '{command} --help')")
    assert "Input should" not in line and "invalid value" not in line.lower()


def test_ctx_of_the_wrong_type_is_said_exactly():
    out = vibechat("run", "--ctx", "abc", "-p", "hi")
    assert (out.returncode, out.stderr) == (
        2,
        "vibechat: error: --ctx must be a whole number (got 'abc') (see 'vibechat run --help')\n",
    )


def test_tables_piped_keep_one_row_per_line(user_dirs):
    from vibechat.engine.chat.history import History

    title = "A very long title about " + " ".join(f"word{i}" for i in range(40)) + " THE-END"
    history = History().open()
    try:
        cid = history.create(title=title, model="some-model-with-a-long-name-Q4_K_M")
        history.create(title="short", model="m")
    finally:
        history.close()
    out = vibechat("history", "list", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3  # the header and one line per conversation
    row = next(line for line in lines if "THE-END" in line)
    assert (
        row.split()[0] == str(cid) and title in row
    )  # grep finds the row, its id and the whole title


def test_an_empty_reply_says_so_and_exits_4(stub):
    stub.pieces = []  # the server ends its reply at once: finish_reason stop, no text
    out = vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi")
    assert out.returncode == 4 and out.stdout == ""
    assert (
        out.stderr.count("\n") == 1 and "empty" in out.stderr and "finish_reason stop" in out.stderr
    )
    out = vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi", "--json")
    obj = one_object(out)
    assert (
        out.returncode == 4
        and obj["empty"] is True
        and obj["text"] == ""
        and obj["finish_reason"] == "stop"
    )
    assert (obj["error"]["kind"], obj["error"]["exit_status"]) == ("empty", 4)
    assert out.stderr.count("\n") == 1 and "empty" in out.stderr


def test_the_readmes_exit_status_table_is_the_one_run_uses():
    """The README's table lists exactly the statuses run_result defines (each one exercised by a
    test here or in test_cli_run.py / test_structured.py / test_ctrl_c.py), in that order."""
    import re
    from pathlib import Path

    from vibechat.app.commands import run_result

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## One-shot: `vibechat run`") :]
    section = section[: section.index("\n## ", 1)]
    table = [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", section, re.MULTILINE)]
    defined = [0] + sorted(
        v for k, v in vars(run_result).items() if k.startswith("EXIT_") and isinstance(v, int)
    )
    assert table == defined == [0, 1, 2, 3, 4, 130]
