"""A conversation keeps its backend (issue 39, point 3), and piped stdin joins a prompt given
beside it (point 4): `vibechat run` end to end in a subprocess against the stub server on
127.0.0.1 (tests/openai_stub.py), the history read back through `vibechat history`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from openai_stub import StubServer


def vibechat(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def chat_requests(stub: StubServer) -> list[dict]:
    return [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]


def listed() -> list[dict]:
    out = vibechat("history", "list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: error: "), out.stderr
    return lines[0]


@pytest.fixture
def started(stub: StubServer) -> StubServer:
    """A conversation had with stub-small on the stub (a server offering two models)."""
    first = vibechat("run", "--base-url", stub.url, "-m", "stub-small", "hello")
    assert first.returncode == 0, first.stderr
    return stub


def test_continue_goes_on_with_the_conversations_own_server_and_model(started):
    # The standing default (the config file) names nothing of it: the local starter, on this
    # machine.
    out = vibechat("run", "--continue", "and?", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["model"] == "stub-small" and result["engine"]["base_url"] == started.url
    sent = chat_requests(started)[-1]
    assert sent["model"] == "stub-small"
    assert [m["content"] for m in sent["messages"] if m["role"] == "user"] == ["hello", "and?"]
    assert [c["model"] for c in listed()] == ["stub-small"]  # never relabelled


def test_continue_with_the_same_base_url_again_needs_no_model(started):
    out = vibechat("run", "--continue", "--base-url", started.url.removesuffix("/v1"), "and?")
    assert out.returncode == 0, out.stderr  # was: "offers several models: choose one with --model"
    assert chat_requests(started)[-1]["model"] == "stub-small"


def test_a_config_naming_another_server_does_not_move_the_conversation(started, user_dirs):
    with StubServer() as other:
        config = user_dirs["config"] / "vibechat" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f'base_url = "{other.url}"\nmodel = "stub-large"\n')
        out = vibechat("run", "--conversation", str(listed()[0]["id"]), "and?")
        assert out.returncode == 0, out.stderr
        assert chat_requests(other) == []
    assert chat_requests(started)[-1]["model"] == "stub-small"


def test_another_model_or_server_named_on_purpose_is_refused_in_one_line_unless_switched(started):
    asked = len(chat_requests(started))
    line = one_error_line(vibechat("run", "--continue", "-m", "stub-large", "and?"))
    assert "stub-small" in line and "stub-large" in line and "--switch-model" in line
    with StubServer() as other:
        line = one_error_line(vibechat("run", "--continue", "--base-url", other.url, "and?"))
        assert f"127.0.0.1:{other.port}" in line and "--switch-model" in line
        assert chat_requests(other) == []
    line = one_error_line(vibechat("run", "--continue", "--backend", "llama", "and?"))
    assert "--switch-model" in line
    assert len(chat_requests(started)) == asked  # nothing was sent
    switched = vibechat("run", "--continue", "-m", "stub-large", "--switch-model", "and?")
    assert switched.returncode == 0, switched.stderr
    assert chat_requests(started)[-1]["model"] == "stub-large"
    assert len(chat_requests(started)[-1]["messages"]) == 3  # the conversation went on


def test_switch_model_without_a_conversation_is_one_line(stub):
    line = one_error_line(
        vibechat("run", "--base-url", stub.url, "-m", "stub-small", "--switch-model", "hi")
    )
    assert "--switch-model applies only with --continue" in line


def test_a_local_conversation_stays_local_when_the_config_names_a_server(tmp_path, stub):
    """RunPlan alone (nothing is loaded): a conversation had with a file goes on with that file
    and the local engine, whatever base_url the config sets; another file named is refused."""
    from vibechat.app.options import SettingFlags
    from vibechat.app.run_plan import RunFlags, RunPlan
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.chat.history import History
    from vibechat.engine.errors import VibechatError
    from vibechat.engine.settings.config import load_config

    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    history = History().open()
    chat = ChatLog(Conversation(), history, model="Mine", model_path=str(model), source="run")
    chat.add_user("hello")
    history.close()
    config = tmp_path / "config.toml"
    config.write_text(f'base_url = "{stub.url}"\nmodel = "stub-small"\n')
    plan = RunPlan.of(load_config(config, environ={}), RunFlags())
    assert plan.engine.remote
    going_on = plan.open_conversation(no_save=False, continue_latest=True, conversation_id=None)
    assert not going_on.engine.remote and going_on.engine.model == str(model)
    another = RunFlags(SettingFlags(engine={"model": str(tmp_path / "b.gguf")}))
    other = RunPlan.of(load_config(config, environ={}), another)
    with pytest.raises(VibechatError, match="--switch-model"):
        other.open_conversation(no_save=False, continue_latest=True, conversation_id=None)
    Path(model).unlink()  # its file gone: refused, not answered by another model
    with pytest.raises(VibechatError, match="no longer here"):
        plan.open_conversation(no_save=False, continue_latest=True, conversation_id=None)


def test_piped_stdin_and_a_prompt_are_one_prompt_stdin_first(stub):
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "-m",
        "stub-small",
        "--json",
        "Repeat this:",
        input="SECRET\n",
    )
    assert out.returncode == 0, out.stderr
    sent = chat_requests(stub)[-1]["messages"]
    assert [m["content"] for m in sent] == ["SECRET\n\nRepeat this:"]
    result = json.loads(out.stdout)
    assert result["stdin"] == {"included": True, "chars": len("SECRET")}
    shown = json.loads(vibechat("history", "show", str(result["conversation_id"]), "--json").stdout)
    assert shown["messages"][0]["content"] == "SECRET\n\nRepeat this:"
    # An empty pipe adds nothing; a prompt alone has no "stdin" key.
    alone = vibechat(
        "run", "--base-url", stub.url, "-m", "stub-small", "--json", "-p", "Hi", input=""
    )
    assert alone.returncode == 0, alone.stderr
    assert chat_requests(stub)[-1]["messages"][-1]["content"] == "Hi" and "stdin" not in json.loads(
        alone.stdout
    )


def test_piped_stdin_beside_a_prompt_keeps_stdins_size_bound(stub):
    from vibechat.engine.settings.limits import MAX_CONTEXT, prompt_byte_limit

    too_much = "x" * (prompt_byte_limit(MAX_CONTEXT) + 10)
    line = one_error_line(
        vibechat("run", "--base-url", stub.url, "-m", "stub-small", "Sum it up:", input=too_much)
    )
    assert "stdin is larger than" in line
    assert chat_requests(stub) == []


def test_json_says_stdin_was_used_also_when_the_run_fails():
    from openai_stub import refused_url

    out = vibechat(
        "run", "--base-url", refused_url(), "-m", "m", "--json", "Repeat this:", input="SECRET\n"
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    obj = json.loads(out.stdout)
    assert obj["error"] and obj["stdin"] == {"included": True, "chars": len("SECRET")}
