"""Switching a reasoning model's thinking on or off (engine/settings/think_switch.py): which switch
a template takes (its own variables, read without running it), the real renderer with Qwen3's
``enable_thinking`` on and off, a GGUF carrying such a template on the real llama.cpp engine
(prompt, token count, a generation prompt that opens ``<think>`` unless switched off), the engine
process, the setting's config key / variable / flag, ``run --thinking`` and ``--prompts-file``
against the stub server (``chat_template_kwargs``), and the chat: ``/think`` on a server and its
refusal where the template has no switch, the F2 panel, the status bar."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import worker_threads
from fakes import INFO, RecordingBackend, send, settle
from ggufgen import copy_with_metadata
from helpers import notices, was_notified
from vibechat.app.commands.batch import BatchOptions, run_batch
from vibechat.app.commands.run import execute
from vibechat.app.commands.run_request import RunRequest
from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.settings.config import load_config
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import check_thinking, remote_kwargs, template_variables
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.prompt_format import GEMMA

# Qwen3's own template, cut to what matters here (no tools): a system turn, the turns, the
# assistant's earlier thinking dropped, and the generation prompt with its switch.
QWEN3 = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = "
    "content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
# A variant whose generation prompt opens the thinking block unless it is switched off (as
# Qwen3's thinking-only builds and DeepSeek-R1's distills open it): the reply starts inside.
QWEN3_OPENS = QWEN3.replace(
    "{{- '<think>\\n\\n</think>\\n\\n' }}",
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}",
)
# IBM Granite 3.2's switch: off unless the caller passes thinking=true.
GRANITE = (
    "{%- if thinking %}{{- '<|start_of_role|>system<|end_of_role|>Think "
    "first.<|end_of_text|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|start_of_role|>' + message.role + '<|end_of_role|>' + message.content + "
    "'<|end_of_text|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
)
# gpt-oss: reasoning_effort (medium unless given), no full off.
GPT_OSS = (
    "{%- if not reasoning_effort is defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
    "{{- '<|start|>system<|message|>Reasoning: ' + reasoning_effort + '<|end|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start|>' + message.role + '<|message|>' + message.content + '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)
HI = [ChatMessage("user", "Hi")]


def render(source: str, mode: str) -> str:
    template = ChatTemplate("gguf", source)
    return template.render(HI, variables=template_variables(template.thinking_switch, mode))


# ------------------------------------------------------------------ templates
def test_qwen3s_switch_is_found_and_off_writes_an_empty_thinking_block():
    assert ChatTemplate("gguf", QWEN3).thinking_switch == "enable_thinking"
    assert (
        render(QWEN3, "auto")
        == render(QWEN3, "on")
        == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (
        render(QWEN3, "off")
        == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_granite_and_gpt_oss_switches():
    assert ChatTemplate("gguf", GRANITE).thinking_switch == "thinking"
    assert "Think first." in render(GRANITE, "on")
    assert "Think first." not in render(GRANITE, "off") and render(GRANITE, "off") == render(
        GRANITE, "auto"
    )
    assert ChatTemplate("gguf", GPT_OSS).thinking_switch == "reasoning_effort"
    assert "Reasoning: medium" in render(GPT_OSS, "auto") and "Reasoning: medium" in render(
        GPT_OSS, "on"
    )
    assert "Reasoning: low" in render(GPT_OSS, "off")


def test_templates_without_a_switch():
    # A word in the text, a variable the template sets itself, a message field: no switch.
    for source in (
        GEMMA,
        "{{ 'thinking' }}{{ messages[0].content }}",
        "{% set thinking = true %}{% if thinking %}x{% endif %}",
        "{% for m in messages %}{{ m.thinking }}{% endfor %}",
    ):
        assert ChatTemplate("gguf", source).thinking_switch is None, source
    assert template_variables(None, "off") == {}


def test_the_switch_never_replaces_the_renderers_own_variables():
    template = ChatTemplate("gguf", QWEN3)
    assert template.render(
        HI, variables={"messages": [], "add_generation_prompt": False}
    ) == render(QWEN3, "auto")


def test_modes_check_and_travel_with_the_parameters():
    assert [check_thinking(v) for v in ("AUTO", " on", "off", True, "false", "yes")] == [
        "auto",
        "on",
        "off",
        "on",
        "off",
        "on",
    ]
    with pytest.raises(InvalidParameterError, match="thinking must be one of auto, on, off"):
        SamplingParams(thinking="maybe")
    assert "thinking" not in SamplingParams().to_dict()  # older readers of saved parameters
    off = SamplingParams().set_from_text("thinking", "off")
    assert SamplingParams.from_dict(off.to_dict()) == off and off.thinking == "off"
    assert remote_kwargs("auto") is None
    assert remote_kwargs("off") == {"enable_thinking": False} and remote_kwargs("on") == {
        "enable_thinking": True
    }


def test_config_key_and_variable(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text('[params]\nthinking = "off"\n')
    assert load_config(path, environ={}).config.params.thinking == "off"
    loaded = load_config(path, environ={"VIBECHAT_THINKING": "on"})
    assert (
        loaded.config.params.thinking == "on"
        and str(loaded.origin("params.thinking")) == "env VIBECHAT_THINKING"
    )
    path.write_text('[params]\nthinking = "sometimes"\n')
    problem = load_config(path, environ={}).problem
    assert problem is not None and "thinking must be one of auto, on, off" in problem


# ------------------------------------------------------- the real llama.cpp engine
@pytest.fixture(scope="module")
def qwen3_style(starter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter's weights with a Qwen3-style template whose generation prompt opens
    <think> unless switched off (the starter does not think: what it writes is all
    'thinking' when the prompt opened the block)."""
    return copy_with_metadata(
        starter_path,
        tmp_path_factory.mktemp("qwen3") / "qwen3-style.gguf",
        {"tokenizer.chat_template": QWEN3_OPENS},
    )


def local_reply(backend, mode: str):
    from vibechat.engine.turns.backend import GenerationDone

    backend.reset()
    events = list(
        backend.stream_chat(
            HI, SamplingParams(temperature=0.0, max_tokens=8, seed=1, thinking=mode)
        )
    )
    done = events[-1]
    assert isinstance(done, GenerationDone)
    return done


@pytest.mark.model
def test_the_real_engine_renders_counts_and_splits_with_the_switch(qwen3_style: Path):
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    assert "{%- else %}{{- '<think>\\n' }}" in QWEN3_OPENS
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=qwen3_style, context_size=512, repack="off"
        )
    )
    try:
        info = backend.load()
        assert info.chat_format == "gguf" and info.thinking_switch == "enable_thinking"
        auto, off = backend.count_tokens(HI), backend.count_tokens(HI, "off")
        assert off > auto  # "<think>\n" became "<think>\n\n</think>\n\n"
        assert backend.count_tokens(HI, "on") == auto
        opened = local_reply(backend, "auto")
        assert opened.text == "" and opened.thinking  # the prompt opened <think>: all thinking
        assert opened.stats.prompt_tokens == auto
        answered = local_reply(backend, "off")
        assert answered.thinking == "" and answered.text  # switched off: an answer at once
        assert answered.stats.prompt_tokens == off
        assert answered.params.thinking == "off"
        backend.reset()
        assert backend.prefill([*HI, ChatMessage("assistant", "Hello.")], "off") > 0
    finally:
        backend.close()


@pytest.mark.model
def test_the_starter_has_no_switch(llama_backend):
    assert llama_backend.describe().thinking_switch is None
    messages = [ChatMessage("user", "Name a colour.")]
    assert llama_backend.count_tokens(messages, "off") == llama_backend.count_tokens(messages)


@pytest.mark.model
def test_the_engine_process_counts_with_the_switch(qwen3_style: Path):
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    backend = WorkerBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=qwen3_style, context_size=512, repack="off"
        )
    )
    try:
        assert backend.load().thinking_switch == "enable_thinking"
        assert backend.count_tokens(HI, "off") > backend.count_tokens(HI)
    finally:
        backend.close()


# ------------------------------------------------------------ servers and `run`
def test_the_remote_backend_sends_chat_template_kwargs_only_when_asked(stub):
    backend = stub.backend()
    for mode, sent in (
        ("off", {"enable_thinking": False}),
        ("on", {"enable_thinking": True}),
        ("auto", None),
    ):
        list(backend.stream_chat(HI, SamplingParams(seed=1, thinking=mode)))
        assert stub.last_body.get("chat_template_kwargs") == sent, mode


def vibechat(*args: str):
    import os
    import subprocess

    from conftest import VIBECHAT_BIN

    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def test_run_thinking_off_through_the_cli(stub):
    server = ["--base-url", stub.url, "--model", "stub-small", "--no-save"]
    out = vibechat("run", *server, "-p", "Hi", "--thinking", "off", "--json")
    assert out.returncode == 0, out.stderr
    assert stub.last_body["chat_template_kwargs"] == {"enable_thinking": False}
    assert json.loads(out.stdout)["params"]["thinking"] == "off"
    out = vibechat("run", *server, "-p", "Hi")
    assert out.returncode == 0 and "chat_template_kwargs" not in stub.last_body
    out = vibechat("run", *server, "-p", "Hi", "--thinking", "never")
    assert out.returncode != 0 and not out.stdout
    assert (
        "--thinking: thinking must be one of auto, on, off, low, medium, high (got 'never')"
        in out.stderr
    )
    assert "Traceback" not in out.stderr


def test_prompts_file_takes_the_setting_and_a_per_line_override(stub):
    prompts = io.BytesIO(
        b'{"prompt": "a"}\n{"prompt": "b", "thinking": "on"}\n{"prompt": "c", "thinking": '
        b'"later"}\n'
    )
    out, err = io.StringIO(), io.StringIO()
    options = BatchOptions(system=None, params=SamplingParams(seed=1, thinking="off"))
    code = run_batch(stub.backend(), prompts, "p.jsonl", options, None, out, err)
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["params"]["thinking"] for r in results[:2]] == ["off", "on"]
    assert "thinking must be one of auto, on, off" in results[2]["error"] and code == 1
    assert stub.last_body["chat_template_kwargs"] == {"enable_thinking": True}


def test_run_says_when_a_local_template_has_no_switch():
    out, err = io.StringIO(), io.StringIO()
    code = execute(
        RecordingBackend("Fine."),
        RunRequest(prompt="Hi", system=None, params=SamplingParams(thinking="off")),
        out,
        err,
    )
    assert code == 0 and out.getvalue() == "Fine.\n"
    assert (
        "vibechat: thinking off: this model's template has no switch for thinking ("
        in err.getvalue()
    )
    err = io.StringIO()
    execute(
        RecordingBackend("Fine.", replace(INFO, thinking_switch="enable_thinking")),
        RunRequest(prompt="Hi", system=None, params=SamplingParams(thinking="off")),
        io.StringIO(),
        err,
    )
    assert "no switch" not in err.getvalue()


# ------------------------------------------------------------------- the chat
SIZE = (120, 36)


async def test_think_off_in_the_chat_changes_the_next_request(stub, tmp_path: Path):
    from vibechat.app.tui import create_app

    app = create_app(stub.backend(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        assert "chat_template_kwargs" not in stub.last_body
        assert "think" not in app.status.render().plain
        await send(pilot, "/think off")
        assert was_notified(app, "Thinking off for the next replies")
        assert "think off" in app.status.render().plain
        await send(pilot, "Again")
        assert stub.last_body["chat_template_kwargs"] == {"enable_thinking": False}
        await send(pilot, "/think auto")
        await send(pilot, "Once more")
        assert "chat_template_kwargs" not in stub.last_body
        assert "think" not in app.status.render().plain


async def test_think_is_refused_where_the_template_has_no_switch():
    from vibechat.app.tui import create_app

    backend = RecordingBackend("Sure.")
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/think off")
        messages = notices(app)
        assert any("this model's template has no switch for thinking (" in m for m in messages), (
            messages
        )
        assert app.session.conversation.params.thinking == "auto"
        await send(pilot, "/think sideways")
        assert was_notified(app, "thinking must be one of auto, on, off")


async def test_the_panels_thinking_switch():
    from vibechat.app.tui import create_app
    from vibechat.app.tui.widgets.choice import Choice

    backend = RecordingBackend("Sure.", replace(INFO, thinking_switch="enable_thinking"))
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await pilot.pause()
        choice = app.panel.query_one(Choice)
        choice.focus()
        await pilot.press("right")
        await pilot.pause()
        assert choice.value == "on" and app.session.conversation.params.thinking == "on"
        assert "think on" in app.status.render().plain
        await pilot.press("right")
        await pilot.pause()
        assert app.session.conversation.params.thinking == "off"
        # (typed into the input: Enter on the focused switch would step it on)
        app.prompt_input.focus()
        await send(pilot, "/think auto")  # shown in the panel without echoing back
        assert choice.value == "auto" and "think" not in app.status.render().plain
        await send(pilot, "Hi")
        assert backend.requests[-1][1].thinking == "auto"


@pytest.mark.model
async def test_the_chat_on_a_real_thinking_model_folds_the_thinking_and_leaves_it_out_of_context(
    qwen3_style: Path,
):
    """The real engine with a Qwen3-style template (the generation prompt opens <think>): the
    reply streams as thinking, the chat shows it in a folded block, and the context meter
    then shows what the next prompt sends, without the thinking."""
    from vibechat.app.tui import create_app
    from vibechat.app.tui.conversation.thinking_block import ThinkingBlock
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=qwen3_style, context_size=512, repack="off"
        )
    )
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await send(pilot, "Hi")
            stats = app.replies.last.stats
            assert app.replies.last.thinking and stats.thinking_tokens > 0
            block = app.chat.messages()[-1].query_one(ThinkingBlock)
            assert not block.expanded and str(block.header()).startswith("▸ Thought")
            sent = backend.count_tokens(app.conversation.messages())
            assert app.status.context_used == sent  # what the next prompt sends...
            assert sent < stats.prompt_tokens + stats.completion_tokens  # ...without the thinking
    finally:
        backend.close()
