"""ollama's habits in the chat (issue 24, point 4): ``/set parameter NAME VALUE`` and ollama's
parameter names, ``/set`` and its confirmations for people (no ``None``/``False``/``[]``),
``/show info|parameters|system|template``, ``/load MODEL_OR_PATH`` and Ctrl+D on an empty
input. The real app with a recording backend, the real starter model where loading matters,
the stub OpenAI-compatible server for a remote backend."""

from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest

from conftest import worker_threads
from fakes import INFO, RecordingBackend, send, settle
from ggufgen import write_gguf
from helpers import notices
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.help_screen import HelpScreen
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.models.resolve import all_models
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
from vibechat.engine.remote.options import OpenAIOptions
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams

SIZE = (110, 36)
REPR = re.compile(r"\b(None|False|True)\b|\[\]|\(\)")  # Python reprs that must never reach people


def last_note(app) -> str:
    notes = [m for m in app.chat.messages() if m.role == "note"]
    assert notes, "no note in the chat"
    return notes[-1].text


def info_rows(text: str) -> dict[str, str]:
    """``/show info``'s ``label  value`` lines (a value's next lines are indented)."""
    rows: dict[str, str] = {}
    label = ""
    for line in text.splitlines():
        if line.startswith(" "):
            rows[label] += " " + line.strip()
        else:
            label, value = line.split("  ", 1)
            rows[label] = value.strip()
    return rows


def messages(app) -> list[str]:
    return notices(app)


async def test_set_takes_ollamas_syntax_and_names():
    backend = RecordingBackend()
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/set parameter temperature 0.5")
        await send(pilot, "/set parameter num_predict 64")
        await send(pilot, "/set parameter top_k 12")
        await send(pilot, "/set parameter stop ### END")  # ollama: one stop string a word
        await send(pilot, "/set parameter repeat_penalty 1.2")
        await send(pilot, "/set system You are a pirate.")
        assert backend.requests == []
        await send(pilot, "ahoy")
        sent, params = backend.requests[-1]
        assert (params.temperature, params.max_tokens, params.top_k, params.repeat_penalty) == (
            0.5,
            64,
            12,
            1.2,
        )
        assert params.stop == ("###", "END")
        assert sent[0].role == "system" and sent[0].content == "You are a pirate."
        assert "max_tokens = 64" in messages(app)

        # num_ctx is no sampling parameter: the chat says what it is and how to change it
        await send(pilot, "/set parameter num_ctx 8192")
        shown = messages(app)[-1]
        assert "engine setting" in shown and "--ctx" in shown and "context_size" in shown
        await send(pilot, "/set num_gpu 10")
        assert "GPU layers slider" in messages(app)[-1]
        # an unknown one: the names known, and how /set is written
        await send(pilot, "/set parameter mirostat 2")
        assert (
            "unknown parameter 'mirostat'" in messages(app)[-1]
            and "/set parameter NAME VALUE" in messages(app)[-1]
        )
        assert app.conversation.params == params.replace(seed=None)
        await send(pilot, "/set think")  # ollama's switch: the model has no thinking switch here
        assert "Thinking stays as the model does" in messages(app)[-1]


async def test_set_alone_and_its_confirmations_are_for_people():
    app = create_app(
        RecordingBackend(),
        blink=False,
        save=False,
        params=SamplingParams(temperature=0.7, stop=("\nUser:",)),
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/set")
        listed = last_note(app)
        assert not REPR.search(listed), listed
        rows = dict(line.split(None, 1) for line in listed.splitlines()[1:])
        assert (
            rows["temperature"] == "0.7"
            and rows["max_tokens"] == "auto"
            and rows["seed"] == "random"
        )
        assert (
            rows["stop"] == '"\\nUser:"'
            and rows["format"] == "free text"
            and rows["thinking"] == "auto"
        )

        await send(pilot, "/set stop")
        await send(pilot, "/set seed 42")
        await send(pilot, "/set seed random")
        await send(pilot, "/set max_tokens none")
        said = messages(app)[-4:]
        assert said == ["stop = none", "seed = 42", "seed = random", "max_tokens = no limit"]
        await send(pilot, "/show parameters")
        assert "stop            none" in last_note(app) and not REPR.search(last_note(app))


async def test_show_and_show_info_and_json_name_the_prompt_format_in_the_same_words():
    # issue 39, point 7: `vibechat show starter` said "chat template no (vibechat picks a built-in
    # format by architecture)" where /show info and --json said completion
    import json
    import subprocess

    from conftest import VIBECHAT_BIN
    from vibechat.app.report import engine_dict

    def show(*args: str) -> str:
        out = subprocess.run(
            [str(VIBECHAT_BIN), "show", "starter", *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    shown = json.loads(show("--json"))
    assert shown["prompt_format"] == "completion" and shown["prompt_format_reason"]
    [row] = [
        line.split("prompt format", 1)[1].strip()
        for line in show().splitlines()
        if "prompt format" in line
    ]
    assert row == f"completion ({shown['prompt_format_reason']})"
    info = replace(INFO, chat_format="completion", chat_format_reason=shown["prompt_format_reason"])
    assert engine_dict(info)["prompt_format"] == shown["prompt_format"]  # run --json's words
    app = create_app(RecordingBackend(info=info), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/show info")
        assert info_rows(last_note(app))["prompt format"] == row


async def test_show_info_describes_the_model_its_context_format_and_parameters(tmp_path):
    path = write_gguf(
        tmp_path / "tiny-chat-Q4_K_M.gguf",
        chat_template="{{ bos_token }}{% for m in messages %}"
        "<|{{ m.role }}|>{{ m.content }}{% endfor %}",
    )
    info = replace(INFO, path=str(path), trained_context=32768, context_size=4096)
    app = create_app(RecordingBackend(info=info), blink=False, save=False, system="Be brief.")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/show info")
        text = last_note(app)
        rows = info_rows(text)
        assert rows["model"] == "Fake 1B" and rows["file"].startswith(str(path))
        assert rows["architecture"] == "llama · Q4_K_M · 16 layers"
        assert rows["context"] == "4,096 tokens (trained on 32,768)"
        assert rows["runs on"].startswith(
            "CPU (no GPU offload in this build) · 2 threads · KV f16 64 MiB"
        )
        assert rows["images"].startswith(
            "none (a vision model takes them with its projector: --mmproj"
        )
        assert (
            rows["prompt format"].startswith("chat template (gguf)")
            and "/show template" in rows["prompt format"]
        )
        assert (
            rows["parameters"].startswith("temperature 0.8 · top_k 40")
            and "· seed random ·" in rows["parameters"]
            and "think_budget off · thinking auto" in rows["parameters"]
        )
        assert rows["system"] == "Be brief."
        assert not REPR.search(text), text
        await send(pilot, "/show")
        assert last_note(app) == text
        await send(pilot, "/show system")
        assert last_note(app) == "System prompt: Be brief."
        await send(pilot, "/show template")
        assert last_note(app).endswith("<|{{ m.role }}|>{{ m.content }}{% endfor %}")
        await send(pilot, "/show modelfile")
        assert "/show info|parameters|system|template" in messages(app)[-1]


async def test_show_info_on_a_server_says_what_is_known(stub):
    stub.model_fields = {"meta": {"n_ctx": 8192, "n_ctx_train": 131072}}
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model="stub-small"))
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/show info")
        rows = info_rows(last_note(app))
        assert rows["model"] == "stub-small" and rows["server"].startswith(
            f"http://127.0.0.1:{stub.port}"
        )
        assert rows["context"] == "8,192 tokens (trained on 131,072)"
        assert rows["prompt format"].startswith("chat template (server)") and "file" not in rows

        # /load ID on a server: another of its models (a new conversation)
        await send(pilot, "/load stub-large")
        await settle(pilot)
        assert app.status.model.name == "stub-large"
        await send(pilot, "/load nothing-like-it")
        await settle(pilot)
        assert app.status.model.name == "stub-large"
        assert any("has no model 'nothing-like-it'" in m for m in messages(app))


@pytest.mark.model
async def test_load_by_path_and_by_name_on_the_real_model(starter_installed, tmp_path):
    """``/load PATH`` loads another file (a new conversation, as F3), remembers it (listed
    next time), and a bad path, folder, impostor or name is one line with the current
    model kept; ``/load NAME`` goes back by name."""
    copy = tmp_path / "mine" / "gemma-copy-Q4_K_M.gguf"
    copy.parent.mkdir()
    os.link(starter_installed, copy)
    html = tmp_path / "mine" / "page.gguf"
    html.write_text("<!DOCTYPE html><html>Sign in</html>")

    def factory(p):
        return LlamaCppBackend(
            LlamaCppOptions(threads=worker_threads(), model_path=p, context_size=1024, repack="off")
        )

    app = create_app(
        factory(starter_installed),
        params=SamplingParams(temperature=0, max_tokens=4),
        backend_factory=factory,
        blink=False,
        save=False,
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        assert len(app.chat.messages()) == 2
        await send(pilot, f"/load {copy}")
        await settle(pilot)
        assert app.status.model.path == str(copy) and app.status.state == "ready"
        assert app.chat.messages() == []  # a new conversation, as F3's switch
        assert any("Loaded file:gemma-copy-Q4_K_M" in m for m in messages(app))
        assert [m.name for m in all_models() if m.source == "file"] == ["file:gemma-copy-Q4_K_M"]
        await send(pilot, "Hi")
        assert app.status.stats.completion_tokens > 0
        await send(pilot, "/show info")  # what the real file says about itself
        rows = info_rows(last_note(app))
        assert rows["model"] == "Gemma 3 270m" and rows["file"].startswith(
            f"{copy} · 253"
        )  # the GGUF's name
        assert rows["architecture"] == "gemma3 · Q4_K_M · 18 layers" and rows["context"].startswith(
            "1,024 tokens"
        )
        assert "the file's own chat template" not in rows["prompt format"]  # the starter has none

        loaded = app.backend
        for bad, why in (
            (tmp_path / "none.gguf", "does not exist"),
            (copy.parent, "is a directory"),
            (html, "HTML page"),
            ("no-such-model", "no local model named"),
        ):
            await send(pilot, f"/load {bad}")
            await settle(pilot)
            said = messages(app)[-1]
            assert why in said and "current model stays loaded" in said and "\n" not in said, said
            assert app.backend is loaded
        await send(pilot, "/load starter")
        await settle(pilot)
        assert app.status.model.path == str(starter_installed)
    app.backend.close()


async def test_load_alone_opens_the_picker_and_a_session_without_a_factory_says_so():
    from vibechat.app.tui.screens.model_picker import ModelPicker

    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/load")
        assert isinstance(app.screen, ModelPicker)
        await pilot.press("escape")
        await send(pilot, "/load starter")
        assert "cannot switch models" in messages(app)[-1]


async def test_ctrl_d_deletes_in_a_full_input_and_quits_from_an_empty_one():
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("abc")
        app.prompt_input.move_cursor((0, 1))
        await pilot.press("ctrl+d")  # as before: the character on the right goes
        assert app.prompt_input.text == "ac" and app.is_running
        await pilot.press("ctrl+d", "ctrl+d")
        assert (
            app.prompt_input.text == "a" and app.is_running
        )  # nothing right of the cursor: nothing happens
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        help_text = "\n".join(str(s.render()) for s in app.screen.query("Static"))
        assert re.search(r"\^d +Quit if the input is empty", help_text)
        await pilot.press("escape", "backspace")
        assert app.prompt_input.text == ""
        await pilot.press("ctrl+d")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_save_says_conversations_save_themselves_and_how_to_keep_the_parameters():
    """ollama's /save makes a model of the session; here nothing needs saving, and it says so."""
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/save mymodel")
        said = last_note(app)
        assert "saved as you go" in said and "Ctrl+S" in said
        assert not [n for n in messages(app) if "Unknown command" in n]
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/save")
        assert "not being saved" in last_note(app)


def test_show_info_names_the_projector_a_vision_model_sees_images_through():
    from vibechat.app.tui.screens.show_info import info_text
    from vibechat.engine.settings.params import SamplingParams

    rows = info_rows(
        info_text(
            replace(INFO, projector="mmproj-gemma-3-4b-it-f16.gguf\x1b[2J"), SamplingParams(), None
        )
    )
    assert rows["images"] == "through mmproj-gemma-3-4b-it-f16.gguf"  # the escape is gone
