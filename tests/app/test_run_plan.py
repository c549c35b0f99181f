"""One plan, one report (issue 26, point 4): the chat, ``run`` and ``run --prompts-file`` decide
what to run through one ``RunPlan`` (config + preset + flags + the conversation continued),
and every JSON object a run prints comes from ``RunResult.to_json()``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from vibechat.app.options import SamplingChoice, SettingFlags
from vibechat.app.report import RunResult
from vibechat.app.run_plan import RunFlags, RunPlan
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.settings.config import config_path, load_config
from vibechat.engine.settings.params import SamplingParams

PRESET = """\
[params]
min_p = 0.1

[presets.short]
system = "You answer in one word."
context_size = 4096
[presets.short.params]
temperature = 0.2
top_k = 7
"""


def write_config(text: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


class _Unloaded:
    """Stands in for the backend: the commands' plans are compared, no model is run."""

    def close(self) -> None:
        pass


def test_the_chat_run_and_prompts_file_run_the_same_plan_from_the_same_inputs(
    monkeypatch, tmp_path
):
    from typer.testing import CliRunner

    import vibechat.app.tui as tui_package
    from vibechat.app import backends
    from vibechat.app.commands import batch as batch_cmd
    from vibechat.app.commands import run as run_cmd
    from vibechat.app.commands.cli import cli

    write_config(PRESET)
    built: list[RunPlan] = []
    of = RunPlan.of.__func__  # type: ignore[attr-defined]

    def spy(cls, loaded, flags):
        plan = of(cls, loaded, flags)
        built.append(plan)
        return plan

    seen: dict[str, dict] = {}

    def run_tui(*, engine, params, system, config, save, **_tools):
        seen["chat"] = {"engine": engine, "params": params, "system": system}
        return 0

    def make_backend(engine, pull=None, **kw):
        seen["backend"] = {"engine": engine, "kv_snapshots": kw.get("kv_snapshots", True)}
        return _Unloaded()

    def execute(backend, request, out, err, chat=None):
        seen["run"] = {
            "engine": seen.pop("backend")["engine"],
            "params": request.params,
            "system": request.system,
        }
        return 0

    def run_batch(backend, prompts, source, options, history, out, err, lines=None):
        made = seen.pop("backend")
        assert made["kv_snapshots"] is False
        seen["batch"] = {
            "engine": made["engine"],
            "params": options.params,
            "system": options.system,
        }
        return 0

    monkeypatch.setattr(RunPlan, "of", classmethod(spy))
    monkeypatch.setattr(tui_package, "run_tui", run_tui)
    monkeypatch.setattr(backends, "make_backend", make_backend)
    monkeypatch.setattr(run_cmd, "execute", execute)
    monkeypatch.setattr(batch_cmd, "run_batch", run_batch)
    flags = ["--preset", "short", "--top-k", "9", "--model", "some.gguf"]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')
    runner = CliRunner()
    for args in (
        [*flags],
        ["run", *flags, "-p", "Hi"],
        ["run", *flags, "--prompts-file", str(prompts)],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
    assert len(built) == 3  # each command built its plan once, through RunPlan
    # The same plan; --prompts-file only takes no KV snapshots (each line is a conversation of its
    # own: make_backend's kv_snapshots=False, asserted above), leaving the setting as it is.
    assert seen["chat"] == seen["run"] == seen["batch"]
    plan = built[0]
    assert seen["chat"] == {"engine": plan.engine, "params": plan.params, "system": plan.system}
    # flags > preset > file
    assert (plan.params.top_k, plan.params.temperature, plan.params.min_p) == (9, 0.2, 0.1)
    assert plan.system == "You answer in one word."
    assert (plan.engine.model, plan.engine.context_size) == ("some.gguf", 4096)


def saved_conversation(params: SamplingParams, system: str | None) -> int:
    history = History().open()
    chat = ChatLog(Conversation(system=system, params=params), history, source="run")
    chat.add_user("Name a colour.")
    assert chat.conversation_id is not None
    history.close()
    return chat.conversation_id


def continue_plan(flags: RunFlags, conversation_id: int) -> RunPlan:
    plan = RunPlan.of(load_config(write_config(PRESET), environ={}), flags)
    return plan.open_conversation(
        no_save=False, continue_latest=False, conversation_id=conversation_id
    )


def test_continuing_keeps_the_conversations_setup_under_the_preset_and_the_flags():
    cid = saved_conversation(SamplingParams(temperature=0.9, top_k=5, top_p=0.4), "Be brief.")
    plain = continue_plan(
        RunFlags(SettingFlags(sampling=SamplingChoice(values={"top_p": "0.6"}))), cid
    )
    assert plain.chat is not None and plain.chat.conversation_id == cid
    # the conversation's own parameters (not the file's min_p 0.1), under the flag
    assert (
        plain.params.temperature,
        plain.params.top_k,
        plain.params.top_p,
        plain.params.min_p,
    ) == (0.9, 5, 0.6, 0.05)
    assert plain.system is None  # None: the conversation's own system prompt goes on

    # issue 30: `run --continue --preset` ignored the preset; now flags > preset > the conversation
    preset = continue_plan(
        RunFlags(SettingFlags(sampling=SamplingChoice(values={"top_k": "3"})), "short"), cid
    )
    assert (preset.params.temperature, preset.params.top_k, preset.params.top_p) == (0.2, 3, 0.4)
    assert preset.system == "You answer in one word."
    assert preset.engine.context_size == 4096


def test_the_json_objects_all_come_from_one_to_json():
    params = SamplingParams(seed=5)
    failed = RunResult(
        model="m", params=params, error={"message": "no", "kind": "value", "exit_status": 1}
    )
    obj = failed.to_json()
    assert list(obj) == [
        "text",
        "thinking",
        "model",
        "model_path",
        "conversation_id",
        "params",
        "prompt_format",
        "finish_reason",
        "stats",
        "engine",
        "compacted_from",
        "left_out_messages",
        "error",
    ]
    assert obj["model"] == "m" and obj["stats"]["seed"] == 5 and obj["engine"] is None
    line = RunResult(
        line=3, request_id="a", params=params, finish_reason="stop", empty=True
    ).to_json()
    assert list(line) == [
        "line",
        "id",
        "text",
        "thinking",
        "model",
        "conversation_id",
        "params",
        "finish_reason",
        "stats",
        "empty",
    ]
    assert RunResult(line=4, line_error="bad JSON", conversation_id=2).to_json() == {
        "line": 4,
        "error": "bad JSON",
        "conversation_id": 2,
    }


def vibechat(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


@pytest.mark.model
def test_run_continue_with_a_preset_applies_the_preset_over_the_conversation(starter_installed):
    env = {"VIBECHAT_CONFIG": str(write_config(PRESET))}
    first = vibechat(
        "run", "-p", "Name a colour.", "-t", "0.9", "--top-k", "5", "-n", "2", "--json", **env
    )
    assert first.returncode == 0, first.stderr
    cid = json.loads(first.stdout)["conversation_id"]
    again = vibechat(
        "run",
        "--continue",
        "--preset",
        "short",
        "--top-p",
        "0.5",
        "-p",
        "Another?",
        "-n",
        "2",
        "--json",
        **env,
    )
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["conversation_id"] == cid
    used = result["params"]
    assert (used["temperature"], used["top_k"], used["top_p"]) == (
        0.2,
        7,
        0.5,
    )  # preset over it, the flag on top
    shown = json.loads(vibechat("history", "show", str(cid), "--json", **env).stdout)
    assert shown["system"] == "You answer in one word."
