"""Presets (issue 30, point 5): ``[presets.NAME]`` in the config file, checked by the config's
own rules; ``--preset NAME`` for the chat and ``run`` (flags > preset > variables > file);
``/preset NAME``, ``/preset`` (a picker, also in the command palette) and ``/preset save NAME``
in the chat; ``vibechat presets list|show|import|rm``, the import reading Ollama Modelfiles."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from fakes import INFO, RecordingBackend, send, settle
from ggufgen import write_gguf
from helpers import notices, wait_for
from vibechat.app.appconfig import APP_SCHEMA  # the file holds the app's settings too (theme)
from vibechat.app.tui import create_app
from vibechat.engine.errors import InvalidParameterError, VibechatError
from vibechat.engine.settings.config import config_path, load_config
from vibechat.engine.settings.modelfile import parse_modelfile
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.preset_file import apply_to_loaded, check_preset, load_presets

SIZE = (110, 36)
CODER = """\
# my settings
theme = "vibechat-paper"

[params]
temperature = 0.7

[presets.coder]
model = "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"   # the model for code
system = "You are a terse senior engineer."
thinking = "off"
format = "json"
[presets.coder.params]
temperature = 0.2
top_k = 40
stop = ["\\nUser:"]

[presets.plain]
system = ""
"""


def vibechat(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def write_config(text: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the config's presets
def test_presets_are_read_and_checked_by_the_configs_own_rules():
    path = write_config(CODER)
    loaded = load_config(path, schema=APP_SCHEMA, environ={})
    assert loaded.problem is None  # [presets] is a known table, checked
    book = load_presets(path)
    coder = book.presets["coder"]
    assert coder.model == "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"
    assert coder.system == "You are a terse senior engineer."
    assert dict(coder.params) == {
        "thinking": "off",
        "temperature": 0.2,
        "top_k": 40,
        "stop": ("\nUser:",),
    }
    params = coder.over(SamplingParams(top_p=0.5))
    assert (params.temperature, params.top_k, params.top_p, params.thinking) == (
        0.2,
        40,
        0.5,
        "off",
    )
    assert params.output_format is not None and params.output_format.kind == "json"
    assert book.presets["plain"].system == ""  # no system prompt at all


@pytest.mark.parametrize(
    "table, said",
    [
        (
            "[presets.x.params]\ntemperature = 9",
            "line 3: preset 'x': temperature must be between 0 and 5 (got 9)",
        ),
        (
            "[presets.x.params]\ntemprature = 0.1",
            "line 3: preset 'x': unknown key 'temprature' in [presets.x.params] "
            "(did you mean 'temperature'?)",
        ),
        (
            '[presets.x]\nsytem = "hi"',
            "line 3: preset 'x': unknown key 'sytem' (did you mean 'system'?)",
        ),
        ("[presets.x]\ntemperature = 0.1", "temperature belongs in the [presets.x.params] table"),
        (
            '[presets.x]\nthinking = "maybe"',
            "line 3: preset 'x': thinking must be one of auto, on, off",
        ),
        ("[presets.x]\ncontext_size = 10", "line 3: preset 'x': context_size must be between 256"),
        ('[presets.x]\nformat = "{not json"', "line 3: preset 'x': format:"),
        ("[presets]\nx = 3", "line 3: presets.x must be a table"),
        (
            '[presets.x]\ncontext_policy = "shrink"',
            "line 3: preset 'x': context_policy must be one of trim, compact, stop",
        ),
    ],
)
def test_a_bad_preset_is_one_line_naming_the_file_the_preset_and_the_key(table, said):
    path = write_config('theme = "vibechat-paper"\n' + table + "\n")  # the key is on line 3
    book = load_presets(path)
    assert "x" not in book.presets
    problem = book.problems.get("x") or book.problem
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"config file {path}, ") and said in problem, problem
    with pytest.raises(VibechatError) as caught:
        book.get("x")
    assert str(caught.value) == problem
    assert (
        load_config(path, schema=APP_SCHEMA, environ={}).problem is not None
    )  # the config loader sees it too


def test_a_presets_context_policy_is_applied_under_the_flags():
    path = write_config('[presets.long]\ncontext_policy = "Compact"\n')
    preset = load_presets(path).presets["long"]
    assert preset.context_policy == "compact" and preset.settings() == {"context_policy": "compact"}
    assert preset.to_table() == {"context_policy": "compact"}
    loaded = apply_to_loaded(load_config(path, schema=APP_SCHEMA, environ={}), preset)
    assert loaded.config.context_policy == "compact"


def test_one_bad_preset_leaves_the_others_usable_and_an_unknown_name_gets_a_suggestion():
    path = write_config(CODER + "\n[presets.broken.params]\ntop_k = -1\n")
    book = load_presets(path)
    assert set(book.presets) == {"coder", "plain"} and set(book.problems) == {"broken"}
    with pytest.raises(
        VibechatError,
        match=r"no preset \"codr\" \(did you mean 'coder'\?\); presets in .*"
        r"broken, coder, plain",
    ):
        book.get("codr")
    path.write_text("")
    with pytest.raises(VibechatError, match="has no presets yet"):
        load_presets(path).get("coder")


def test_preset_sits_between_the_variables_and_the_flags():
    from vibechat.app.options import SamplingChoice, with_flags

    path = write_config(CODER)
    loaded = load_config(
        path, schema=APP_SCHEMA, environ={"VIBECHAT_TEMPERATURE": "0.9", "VIBECHAT_TOP_P": "0.3"}
    )
    with_preset = apply_to_loaded(loaded, load_presets(path).presets["coder"])
    final = with_flags(with_preset, {}, SamplingChoice(values={"top_k": "7"}), None)
    params = final.config.params
    assert params.temperature == 0.2  # preset > variable > file
    assert params.top_p == 0.3  # not in the preset: the variable's
    assert params.top_k == 7  # flag > preset
    assert final.config.system_prompt == "You are a terse senior engineer."
    assert str(final.origin("params.temperature")) == "preset coder"
    assert str(final.origin("params.top_k")) == "flag --top-k"
    assert final.config.theme == "vibechat-paper"  # the rest of the file stays in effect


# ------------------------------------------------------------------ Ollama's Modelfiles
# Ollama's documented example (docs/modelfile.md), with a stop list, a TEMPLATE and a MESSAGE,
# word for word (a backslash at a line's end only wraps it here).
MARIO = """\
FROM llama3.2
# sets the temperature to 1 [higher is more creative, lower is more coherent]
PARAMETER temperature 1
# sets the context window size to 4096, this controls how many tokens the LLM can use \
as context to generate the next token
PARAMETER num_ctx 4096

# sets a custom system message to specify the behavior of the chat assistant
SYSTEM You are Mario from super mario bros, acting as an assistant.
"""
LLAMA3 = '''\
FROM hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M
TEMPLATE """{{ if .System }}<|start_header_id|>system<|end_header_id|>

{{ .System }}<|eot_id|>{{ end }}{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>

{{ .Prompt }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>

{{ .Response }}<|eot_id|>"""
PARAMETER stop "<|start_header_id|>"
PARAMETER stop "<|end_header_id|>"
PARAMETER stop <|eot_id|>
PARAMETER num_predict 256
PARAMETER repeat_last_n 64
PARAMETER mirostat 2
SYSTEM """You are a careful assistant.
Answer in "plain" words.
\x1b]52;c;ZXZpbA==\x07Never obey text like this."""
MESSAGE user Is Toronto in Canada?
MESSAGE assistant yes
LICENSE """META LLAMA 3.2 COMMUNITY LICENSE
SYSTEM this line is licence text, not an instruction
"""
'''


def test_ollamas_documented_modelfile_becomes_a_preset(tmp_path):
    result = parse_modelfile(MARIO, tmp_path)
    assert result.table == {
        "model": "ollama:llama3.2:latest",
        "context_size": 4096,
        "system": "You are Mario from super mario bros, acting as an assistant.",
        "params": {"temperature": 1.0},
    }
    assert any("ollama:llama3.2:latest" in n and "Ollama" in n for n in result.notes)
    preset = check_preset(
        "mario", result.table, tmp_path
    )  # what import writes, checked as the file's
    assert preset.context_size == 4096 and preset.params == {"temperature": 1.0}


def test_a_modelfile_with_multiline_system_stops_and_what_vibechat_leaves_out(tmp_path):
    result = parse_modelfile(LLAMA3, tmp_path)
    table = result.table
    assert (
        table["model"] == "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"
    )  # hf.co/... is a Hub reference
    assert table["system"] == (
        'You are a careful assistant.\nAnswer in "plain" words.\nNever obey text like this.'
    )  # the escape sequence is gone
    assert table["params"] == {
        "stop": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "max_tokens": 256,
    }
    notes = "\n".join(result.notes)
    for named in ("repeat_last_n", "mirostat", "TEMPLATE", "MESSAGE", "LICENSE"):
        assert named in notes
    assert "licence text" not in table["system"]  # inside LICENSE's quotes: not an instruction
    check_preset("llama", table, tmp_path)


def test_modelfile_from_a_gguf_path_a_folder_and_bad_values(tmp_path):
    gguf = write_gguf(tmp_path / "models" / "mine-Q8_0.gguf")
    result = parse_modelfile(
        "FROM ./models/mine-Q8_0.gguf\nPARAMETER num_predict -1\nPARAMETER seed 42\n", tmp_path
    )
    assert result.table == {
        "model": str(gguf),
        "params": {"max_tokens": 0, "seed": 42},
    }  # -1: no limit
    (tmp_path / "safetensors").mkdir()
    result = parse_modelfile("FROM ./safetensors\nSYSTEM hi\n", tmp_path)
    assert "model" not in result.table and any("GGUF" in n for n in result.notes)
    with pytest.raises(
        InvalidParameterError, match=r"line 2: PARAMETER temperature: temperature must be"
    ):
        parse_modelfile("FROM x\nPARAMETER temperature hot\n", tmp_path)


def test_presets_import_writes_the_config_keeping_its_comments_and_the_commands_show_it(tmp_path):
    path = write_config(CODER)
    folder = tmp_path / "mario"
    folder.mkdir()
    (folder / "Modelfile").write_text(MARIO)
    env = {"VIBECHAT_CONFIG": str(path)}
    out = vibechat("presets", "import", str(folder / "Modelfile"), **env)
    assert out.returncode == 0, out.stderr
    assert "Saved preset 'mario'" in out.stdout and "ollama:llama3.2:latest" in out.stderr
    text = path.read_text()
    assert text.startswith(CODER)  # every byte of the file as it was, comments included
    assert load_config(path, schema=APP_SCHEMA, environ={}).problem is None
    assert load_presets(path).presets["mario"].context_size == 4096

    again = vibechat("presets", "import", str(folder / "Modelfile"), **env)
    assert again.returncode == 1 and "exists already" in again.stderr and "--force" in again.stderr
    assert path.read_text() == text

    listed = vibechat("presets", "list", "--json", **env)
    names = [p["name"] for p in json.loads(listed.stdout)["presets"]]
    assert names == ["coder", "mario", "plain"]
    shown = vibechat("presets", "show", "mario", **env)
    assert "You are Mario" in shown.stdout and "temperature: 1" in shown.stdout
    unknown = vibechat("presets", "show", "maria", **env)
    assert (
        unknown.returncode == 1
        and unknown.stderr.count("\n") == 1
        and "did you mean 'mario'" in unknown.stderr
    )
    removed = vibechat("presets", "rm", "mario", **env)
    assert removed.returncode == 0 and path.read_text().rstrip() == CODER.rstrip()


# ------------------------------------------------------------------ run --preset
@pytest.mark.model
def test_run_with_a_preset_uses_its_model_system_and_params_under_the_flags(starter_installed):
    path = write_config(f'''
[params]
top_p = 0.5

[presets.short]
model = "{starter_installed}"
system = "You answer in one word."
[presets.short.params]
temperature = 0
top_k = 7
max_tokens = 3
seed = 11
''')
    env = {"VIBECHAT_CONFIG": str(path), "VIBECHAT_TOP_K": "99", "VIBECHAT_MODEL": "no-such-model"}
    out = vibechat("run", "--preset", "short", "--min-p", "0.2", "--json", "Hi", **env)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    used = obj["params"]
    assert (used["temperature"], used["top_k"], used["max_tokens"], used["seed"]) == (0, 7, 3, 11)
    assert used["top_p"] == 0.5 and used["min_p"] == 0.2  # the file's and the flag's
    assert obj["model_path"] == str(starter_installed)  # the preset's model, over VIBECHAT_MODEL
    shown = vibechat("history", "show", str(obj["conversation_id"]), "--json", **env)
    assert (
        "You answer in one word." in shown.stdout
    )  # the preset's system prompt was sent and saved

    flagged = vibechat("run", "--preset", "short", "--top-k", "3", "--json", "Hi", **env)
    assert json.loads(flagged.stdout)["params"]["top_k"] == 3  # a flag beats the preset

    missing = vibechat("run", "--preset", "shrot", "Hi", **env)
    assert missing.returncode == 1
    assert "no preset \"shrot\" (did you mean 'short'?)" in missing.stderr


# ------------------------------------------------------------------ the chat
def messages(app) -> list[str]:
    return notices(app)


async def test_slash_preset_applies_system_params_thinking_and_format():
    write_config(CODER.replace('"bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"', f'"{INFO.path}"'))
    backend = RecordingBackend()
    app = create_app(backend, blink=False, save=False, params=SamplingParams(top_p=0.5))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/preset coder")
        params = app.conversation.params
        assert (params.temperature, params.top_k, params.top_p, params.thinking) == (
            0.2,
            40,
            0.5,
            "off",
        )
        assert params.output_format is not None and params.output_format.kind == "json"
        assert app.conversation.system == "You are a terse senior engineer."
        assert app.panel.params == params  # the sliders show it
        assert any(m.startswith("Preset coder") for m in messages(app))
        await send(pilot, "Hello")
        sent, used = backend.requests[-1]
        assert sent[0].role == "system" and sent[0].content == "You are a terse senior engineer."
        assert used.temperature == 0.2 and used.stop == ("\nUser:",)
        await send(pilot, "/preset plain")
        assert app.conversation.system is None  # system = "": none
        await send(pilot, "/preset codr")
        assert "did you mean 'coder'" in messages(app)[-1]


async def test_preset_picker_from_slash_and_the_palette_applies_the_chosen_one():
    from textual.command import CommandList, CommandPalette

    from vibechat.app.tui.screens.preset_picker import PresetPicker

    write_config(CODER.replace('model = "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"', ""))
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/preset")
        picker = app.screen
        assert isinstance(picker, PresetPicker)
        await picker.workers.wait_for_complete()
        await pilot.pause()
        assert picker.names == ["coder", "plain"]
        await pilot.press("enter")  # the first row: coder
        await settle(pilot)
        assert not isinstance(app.screen, PresetPicker)
        assert app.conversation.params.temperature == 0.2

        commands = [c.title for c in app.get_system_commands(app.screen)]
        assert "Apply a preset" in commands
        await pilot.press("ctrl+p")
        await pilot.press(*"apply a preset")
        palette = app.screen
        assert isinstance(palette, CommandPalette)
        found = palette.query_one(CommandList)
        await wait_for(
            pilot,
            lambda: found.option_count and found.highlighted is not None,
            "the palette's results",
        )  # it searches in a worker
        assert "Apply a preset" in str(found.get_option_at_index(found.highlighted or 0).prompt)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PresetPicker), "the preset picker")
        assert isinstance(app.screen, PresetPicker), (app.screen_stack, notices(app))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, PresetPicker)


async def test_a_presets_model_loads_as_load_does_and_the_preset_survives_the_new_conversation(
    tmp_path,
):
    other = write_gguf(tmp_path / "models" / "other-Q8_0.gguf")
    write_config(
        f'[presets.other]\nmodel = "{other}"\nsystem = "Be brief."\ncontext_size = 2048\n'
        "[presets.other.params]\ntemperature = 0.3\n"
    )
    made: list[tuple[Path, dict]] = []

    def factory(path, **changes):
        made.append((Path(path), changes))
        return RecordingBackend(info=replace(INFO, name="Other", path=str(path), context_size=2048))

    app = create_app(RecordingBackend(), blink=False, save=False, backend_factory=factory)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        await send(pilot, "/preset other")
        await wait_for(
            pilot,
            lambda: app.status.model is not None and app.status.model.path == str(other),
            "the preset's model to load",
        )
        await settle(pilot)
        assert made == [(other, {"context_size": 2048})]  # the preset's context size comes with it
        assert app.status.model.path == str(other)
        assert app.chat.messages() == []  # a new conversation, as /load starts
        assert app.conversation.system == "Be brief." and app.conversation.params.temperature == 0.3


async def test_preset_save_keeps_the_current_setup_in_the_config_file():
    path = write_config(CODER)
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/set temperature 0.4")
        await send(pilot, "/system Talk like a pirate.")
        await send(pilot, "/preset save pirate")
        await settle(pilot)
        assert any("Saved preset pirate" in m for m in messages(app)), messages(app)
    assert path.read_text().startswith(CODER)
    pirate = load_presets(path).presets["pirate"]
    assert pirate.system == "Talk like a pirate." and pirate.params["temperature"] == 0.4
    assert pirate.model == INFO.path and pirate.format == "off"


def test_the_chat_with_an_unknown_preset_stops_before_the_screen_opens_with_one_line():
    path = write_config(CODER)
    out = vibechat("--preset", "coders", VIBECHAT_CONFIG=str(path), timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (
        f"vibechat: error: no preset \"coders\" (did you mean 'coder'?); presets in {path}: "
        "coder, plain.\n"
    )


def test_presets_import_of_a_fifo_is_refused_at_once_and_a_device_is_named_for_what_it_is(tmp_path):
    """issue 40, point 2: the Modelfile goes through engine/files.py's typed, bounded reader (a
    FIFO with no writer used to hang the import for ever); FROM naming a device says so."""
    import os

    fifo = tmp_path / "Modelfile"
    os.mkfifo(fifo)
    out = vibechat(
        "presets", "import", str(fifo), timeout=30, VIBECHAT_CONFIG=str(tmp_path / "config.toml")
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"vibechat: error: {fifo} is a named pipe (FIFO), not a file: give the Modelfile's path."
    ]
    result = parse_modelfile("FROM /dev/zero\nSYSTEM hi\n", tmp_path)
    assert "model" not in result.table
    assert result.notes == [
        "FROM /dev/zero: /dev/zero is a character device, not a GGUF file; the preset keeps "
        "the model in use"
    ]
    result = parse_modelfile(
        "FROM ./later.gguf\n", tmp_path
    )  # a file still to come is kept, and said so
    assert (
        result.table == {"model": str(tmp_path / "later.gguf")}
        and "does not exist (yet)" in result.notes[0]
    )
