"""`vibechat run --backend openai` end to end in a subprocess, against the stub server on
127.0.0.1 (tests/openai_stub.py): the reply, the history, and one clear line (exit 1) for
each failure, with a cut reply kept and marked interrupted. The real server's end-to-end
run is in test_openai_server.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import vibechat
from openai_stub import refused_url

KEY = "sk-test-5ecret-KEY-0123456789"


def history(cid: int) -> dict:
    out = vibechat("history", "show", str(cid), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def latest() -> dict:
    listed = json.loads(vibechat("history", "list", "--json").stdout)
    return history(listed[0]["id"])


def error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: error: "), out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


def test_run_streams_the_servers_reply_and_saves_it(stub):
    out = vibechat(
        "run",
        "--backend",
        "openai",
        "--base-url",
        stub.url,
        "--model",
        "stub-large",
        "-p",
        "Say hello.",
        "--stats",
        "--top-k",
        "5",
        "--seed",
        "7",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == stub.reply + "\n"
    assert f"openai · http://127.0.0.1:{stub.port}" in out.stderr and "threads" not in out.stderr
    assert stub.last_body["model"] == "stub-large" and stub.last_body["top_k"] == 5
    saved = latest()
    assert saved["model"] == "stub-large" and saved["model_path"] == f"{stub.url}/models/stub-large"
    assert [(m["role"], m["status"]) for m in saved["messages"]] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]


def test_base_url_alone_means_the_openai_backend_and_json_reports_the_server_model(stub):
    stub.models = ["only-model"]
    out = vibechat("run", "--base-url", stub.url.removesuffix("/v1"), "-p", "Hi", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert (
        obj["model"] == "only-model"
        and obj["text"] == stub.reply
        and obj["finish_reason"] == "stop"
    )
    assert obj["stats"]["prompt_tokens"] == 21  # the server's usage


def test_the_config_file_and_variables_select_the_server(stub, user_dirs):
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'backend = "openai"\nbase_url = "{stub.url}"\nmodel = "stub-small"\n')
    out = vibechat("run", "-p", "Hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == stub.reply
    shown = json.loads(vibechat("config", "show", "--json").stdout)
    assert json.dumps(shown).count(stub.url) >= 1
    # VIBECHAT_BACKEND=llama wins over the file (and the flag over both).
    config.write_text(f'base_url = "{stub.url}"\nmodel = "stub-small"\n')
    out = vibechat("run", "-p", "Hi", "--backend", "openai", env={"VIBECHAT_BACKEND": "llama"})
    assert out.returncode == 0, out.stderr


def test_a_cut_stream_keeps_the_partial_reply_marked_interrupted(stub):
    stub.mode = "cut"
    out = vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Say hello.")
    line = error_line(out)
    assert "dropped mid-reply; the partial reply is kept, marked interrupted" in line
    assert out.stdout == "Hello there, this\n"  # what arrived stays printed
    saved = latest()
    reply = saved["messages"][1]
    assert (reply["role"], reply["content"], reply["status"]) == (
        "assistant",
        "Hello there, this",
        "interrupted",
    )
    assert "dropped mid-reply" in reply["error"]
    # --json prints the partial reply too, as an object saying so.
    out = vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Again.", "--json")
    error_line(out)
    obj = json.loads(out.stdout)
    assert obj["text"] == "Hello there, this" and obj["finish_reason"] == "interrupted"
    assert obj["error"]["kind"] == "interrupted" and "dropped mid-reply" in obj["error"]["message"]
    assert (
        "Ctrl+R" not in obj["error"]["message"]
    )  # a message for every front end, not the chat's key
    # the seed sent is reported; the pieces that arrived are counted; what the server never sent is
    # unknown, not zero
    assert obj["params"]["seed"] == obj["stats"]["seed"] == stub.last_body["seed"]
    assert obj["stats"]["completion_tokens"] == 3 and obj["stats"]["prompt_tokens"] is None
    # The conversation continues with the partial reply in it.
    stub.mode = "ok"
    out = vibechat(
        "run", "--base-url", stub.url, "--model", "stub-small", "--continue", "-p", "Go on."
    )
    assert out.returncode == 0, out.stderr
    sent = stub.last_body["messages"]
    assert sent[-2] == {"role": "assistant", "content": "Hello there, this"}


def test_a_stalled_server_times_out_with_a_clear_message(stub):
    stub.mode = "stall"
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "Hi",
        env={"VIBECHAT_TIMEOUT": "1"},
    )
    line = error_line(out)
    assert "sent nothing for 1 s mid-reply" in line and "VIBECHAT_TIMEOUT" in line
    assert latest()["messages"][1]["status"] == "interrupted"


def test_the_api_key_is_sent_but_never_shown(stub):
    stub.api_key = KEY
    out = vibechat(
        "--verbose",
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "Hi",
        env={"VIBECHAT_API_KEY": KEY},
    )
    assert out.returncode == 0, out.stderr
    assert "vibechat.openai: POST http://127.0.0.1" in out.stderr  # the log is on ...
    assert KEY not in out.stdout + out.stderr  # ... and never shows the key
    # A wrong key: the message names the variable, not the value, even in --verbose logs.
    stub.auth_message = f"Incorrect API key provided: {KEY}"
    stub.api_key = "another"
    out = vibechat(
        "--verbose",
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "-p",
        "Hi",
        "--api-key-env",
        "MY_SERVER_KEY",
        env={"MY_SERVER_KEY": KEY},
    )
    assert out.returncode == 1
    assert "refused the API key" in out.stderr and "MY_SERVER_KEY" in out.stderr
    assert KEY not in out.stdout + out.stderr
    assert KEY not in json.dumps(json.loads(vibechat("history", "list", "--json").stdout))


def test_no_key_for_a_server_that_needs_one(stub):
    stub.api_key = KEY
    line = error_line(vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi"))
    assert "needs an API key (HTTP 401: Invalid API key); put it in VIBECHAT_API_KEY" in line
    line = error_line(
        vibechat("run", "--base-url", stub.url, "--api-key-env", "NOT_SET_HERE", "-p", "Hi")
    )
    assert "NOT_SET_HERE" in line and "is not set" in line


@pytest.mark.parametrize(
    ("setup", "args", "needle"),
    [
        (
            None,
            ["--model", "llama3"],
            "has no model 'llama3'; it offers stub-small, stub-large (choose with --model)",
        ),
        (None, [], "several models: choose one with --model (stub-small, stub-large)"),
        (
            "500",
            ["--model", "stub-small"],
            "failed (HTTP 500: CUDA out of memory); see the server's log",
        ),
    ],
)
def test_server_side_problems_are_one_line(stub, setup, args, needle):
    if setup == "500":
        stub.mode = "status"
    assert needle in error_line(vibechat("run", "--base-url", stub.url, *args, "-p", "Hi"))


def test_connection_refused_and_a_missing_base_url():
    line = error_line(vibechat("run", "--base-url", refused_url(), "--model", "m", "-p", "Hi"))
    assert "connection refused; start the server, or check --base-url" in line
    line = error_line(vibechat("run", "--backend", "openai", "--model", "m", "-p", "Hi"))
    assert "needs the server's address: pass --base-url URL" in line
    line = error_line(vibechat("run", "--backend", "ollama", "-p", "Hi"))
    assert "--backend: backend must be one of llama, openai" in line
    line = error_line(vibechat("run", "--base-url", "localhost:8080", "-p", "Hi"))
    assert "--base-url: base_url must be an http:// or https:// URL" in line


def test_help_lists_the_remote_flags():
    out = vibechat("run", "--help")
    for flag in ("--backend", "--base-url", "--api-key-env"):
        assert flag in out.stdout
