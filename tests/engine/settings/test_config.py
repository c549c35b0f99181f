"""The config file (engine/settings/config.py): defaults, file, environment, flags, problems
reported in one line with file, line and key, saving that keeps the user's text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vibechat.app.appconfig import APP_SCHEMA as APP
from vibechat.app.appconfig import BINDING_IDS, AppConfig, save_theme
from vibechat.engine.errors import ConfigError, InvalidParameterError, VibechatError
from vibechat.engine.paths import config_dir, data_dir
from vibechat.engine.settings.config import (
    FIX,
    LoadedConfig,
    Origin,
    check_config_file,
    config_path,
    load_config,
    models_dir,
    read_config_text,
)
from vibechat.engine.settings.config_doc import markdown_table, template, with_table
from vibechat.engine.settings.config_save import save_params, update_config
from vibechat.engine.settings.config_text import key_lines
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.table import SCHEMA, Config

REPO = Path(__file__).resolve().parents[3]
# The file holds the app's settings too (theme, [keys]): the app's table reads it
# (app/appconfig.py).


pytestmark = pytest.mark.usefixtures("no_setting_variables")  # conftest.py


def write(text: str, path: Path | None = None) -> Path:
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_path_is_config_toml_in_the_config_dir_or_vibechat_config(monkeypatch, tmp_path):
    assert config_path() == config_dir() / "config.toml"
    monkeypatch.setenv("VIBECHAT_CONFIG", str(tmp_path / "other.toml"))
    assert config_path() == tmp_path / "other.toml"


def test_no_file_means_defaults():
    loaded = load_config(schema=APP)
    assert isinstance(loaded, LoadedConfig)
    assert loaded.config == AppConfig() and loaded.config.params == SamplingParams()
    assert loaded.exists is False and loaded.problem is None
    assert all(origin == Origin("default") for _, _, origin in loaded.items())
    assert loaded.config.theme == "vibechat-dusk" and loaded.config.keys == {}


def test_file_values_and_the_line_each_came_from():
    path = write(
        "# comment\n"
        'model = "acme/Tiny-GGUF:Q8_0"\n'
        'system_prompt = """\n'
        "Be brief.\n"
        "temperature = 3\n"  # inside a multi-line string: not a key
        '"""\n'
        "context_size = 2048\n"
        "gpu_layers = -1\n"
        "threads = 2\n"
        'theme = "vibechat-paper"\n'
        'models_dir = "models-here"\n'
        "\n"
        "[params]\n"
        "temperature = 0.3\n"
        "top_k = 7\n"
        "max_tokens = 64\n"
        'seed = "none"\n'
        'stop = ["###", "User:"]\n'
        "\n"
        "[keys]\n"
        'help = "f12"\n'
        '"params.reset_all" = "ctrl+r, X"\n'
    )
    loaded = load_config(schema=APP)
    assert loaded.problem is None and loaded.exists
    c = loaded.config
    assert c.model == "acme/Tiny-GGUF:Q8_0" and c.system_prompt == "Be brief.\ntemperature = 3\n"
    assert (c.context_size, c.gpu_layers, c.threads, c.theme) == (2048, -1, 2, "vibechat-paper")
    assert c.models_dir == path.parent / "models-here"  # relative to the file's folder
    assert c.params == SamplingParams(
        temperature=0.3, top_k=7, max_tokens=64, stop=("###", "User:")
    )
    assert c.keys == {"help": "f12", "params.reset_all": "ctrl+r,X"}
    lines = {key: origin.line for key, _, origin in loaded.items() if origin.kind == "file"}
    assert lines == {
        "model": 2,
        "system_prompt": 3,
        "context_size": 7,
        "gpu_layers": 8,
        "threads": 9,
        "theme": 10,
        "models_dir": 11,
        "params.temperature": 14,
        "params.top_k": 15,
        "params.max_tokens": 16,
        "params.seed": 17,
        "params.stop": 18,
        "keys.help": 21,
        "keys.params.reset_all": 22,
    }
    assert str(loaded.origin("params.top_k")) == "file, line 15"
    assert loaded.origin("params.top_p") == Origin("default")


def test_environment_overrides_the_file_and_names_its_variable():
    write('theme = "vibechat-paper"\n[params]\ntemperature = 0.3\ntop_k = 7\n')
    env = {
        "VIBECHAT_TOP_K": "9",
        "VIBECHAT_MODEL": "m.gguf",
        "VIBECHAT_STOP": "a|b",
        "VIBECHAT_CONTEXT_SIZE": "1024",
        "VIBECHAT_SEED": "none",
        "VIBECHAT_THEME": "",
    }
    loaded = load_config(schema=APP, environ=env)
    c = loaded.config
    assert c.params.temperature == 0.3 and c.params.top_k == 9 and c.params.stop == ("a", "b")
    assert c.model == "m.gguf" and c.context_size == 1024 and c.theme == "vibechat-paper"
    assert str(loaded.origin("params.top_k")) == "env VIBECHAT_TOP_K"
    assert loaded.origin("params.temperature").kind == "file"
    assert loaded.origin("theme").kind == "file"  # an empty variable is unset


def test_precedence_flag_over_env_over_file_over_default():
    write("[params]\ntemperature = 0.3\ntop_k = 7\ntop_p = 0.5\n")
    loaded = load_config(schema=APP, environ={"VIBECHAT_TOP_K": "9", "VIBECHAT_TOP_P": "0.6"})
    flagged = loaded.with_flags(
        {"params.top_p": 0.7, "threads": 3}, {"params.top_p": "--top-p", "threads": "--threads"}
    )
    p = flagged.config.params
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.3, 9, 0.7, 0.05)
    assert flagged.config.threads == 3
    assert [
        str(flagged.origin(k))
        for k in ("params.temperature", "params.top_k", "params.top_p", "params.min_p")
    ] == ["file, line 2", "env VIBECHAT_TOP_K", "flag --top-p", "default"]
    with pytest.raises(
        InvalidParameterError, match="^--threads: threads must be between 1 and 1024"
    ):
        loaded.with_flags({"threads": 0}, {"threads": "--threads"})


BAD_FILES = [
    ('model = "x"\n[params]\ntemperature = 9\n', 3, "temperature must be between 0 and 5 (got 9)"),
    (
        '[params]\ntop_k = "many"\n',
        2,
        'top_k must be a whole number between 0 and 1000 (got "many")',
    ),
    ("[params]\ntop_k = 2.5\n", 2, "top_k must be a whole number between 0 and 1000 (got 2.5)"),
    ("context_size = 12\n", 1, "context_size must be between 256 and 1048576 (got 12)"),
    ("context_size = 128\n", 1, "context_size must be between 256 and 1048576 (got 128)"),
    ("threads = true\n", 1, "threads must be a whole number between 1 and 1024 (got True)"),
    ("theme = 3\n", 1, "theme must be a non-empty string (got 3)"),
    ('\n\nthme = "x"\n', 3, "unknown key 'thme' (did you mean 'theme'?)"),
    (
        "temperature = 0.5\n",
        1,
        "unknown key 'temperature' (temperature belongs in the [params] table)",
    ),
    (
        "[params]\ntemprature = 0.5\n",
        2,
        "unknown key 'temprature' in [params] (did you mean 'temperature'?)",
    ),
    ("params = 3\n", 1, "params must be a table ([params])"),
    ("[params]\nstop = [1, 2]\n", 2, "stop must be a list of strings"),
    (
        '[keys]\nhelpp = "f2"\n',
        2,
        "unknown binding id 'helpp' in [keys] (did you mean 'help'?); known: "
        + ", ".join(sorted(BINDING_IDS)),
    ),
    ('[keys]\nparams.reset_all = "x"\n', 2, "quote binding ids that contain a dot"),
    ("[keys]\nhelp = 1\n", 2, "keys.help must be a key string"),
    (
        '[keys]\n\ntoggle_params = "notakey+++"\n',
        3,
        "keys.toggle_params = \"notakey+++\" is not a valid key: 'notakey' is not a "
        "modifier: use alt, ctrl, hyper, "
        'meta, shift, super (keys look like "ctrl+t", "f12", "shift+tab", '
        '"question_mark"; several: '
        '"f12,ctrl+t")',
    ),
    ('[keys]\nhelp = "ctrl+fo"\n', 2, "'fo' is not a key name"),
    ('[keys]\nhelp = "F12"\n', 2, "key names are lower case: did you mean 'f12'?"),
    ('[keys]\nhelp = "f2, esc"\n', 2, "'esc': 'esc' is not a key name (did you mean 'escape'?)"),
    ('[keys]\nhelp = "cntrl+t"\n', 2, "'cntrl' is not a modifier (did you mean 'ctrl'?)"),
    ('[keys]\nhelp = "shift+ctrl+up"\n', 2, "did you mean 'ctrl+shift+up'?"),
    ('[keys]\nhelp = "ctrl+?"\n', 2, "did you mean 'ctrl+question_mark'?"),
    ('[keys]\nhelp = "ctrl+T"\n', 2, "did you mean 'ctrl+t' (or 'ctrl+shift+t')?"),
    ('[keys]\nhelp = "f2,,f3"\n', 2, 'an empty key in "f2,,f3"'),
    ('[keys]\nhelp = "ctrl+"\n', 2, "nothing after the last '+' (the + key is 'plus')"),
    ('[keys]\nhelp = "ctrl++"\n', 2, "an empty modifier between '+' signs (the + key is 'plus')"),
    ("params = { temperature = 7 }\n", 1, "temperature must be between 0 and 5 (got 7)"),
    (
        'backend = "opnai"\n',
        1,
        "backend must be one of llama, openai (got \"opnai\") (did you mean 'openai'?)",
    ),
    ('\nbase_url = "localhost:8080"\n', 2, "base_url must be an http:// or https:// URL"),
    ('api_key_env = "sk-abc123"\n', 1, "api_key_env must be the name of an environment variable"),
    ("timeout = 0\n", 1, "timeout must be between 1 and 86400 (got 0)"),
]


@pytest.mark.parametrize(
    "keys",
    [
        "f12",
        "F",
        "?",
        "+",
        "é",
        "ctrl+t",
        "ctrl+shift+up",
        "alt+x",
        "shift+tab",
        "question_mark",
        "comma",
        "ctrl+full_stop",
        "f24",
        "space",
        "escape, ctrl+q",
        "pageup,pagedown",
        "ctrl+alt+delete".replace("ctrl+alt", "alt+ctrl"),
        "super+1",
    ],
)
def test_keys_textual_can_report_are_accepted(keys):
    write(f'[keys]\nhelp = "{keys}"\n')
    loaded = load_config(schema=APP)
    assert loaded.problem is None
    assert loaded.config.keys == {"help": keys.replace(" ", "")}


def test_remote_server_settings_from_the_file_the_environment_and_flags():
    write(
        'backend = "OpenAI"\nbase_url = "http://127.0.0.1:8080"\napi_key_env = '
        '"MY_KEY"\ntimeout = 30\n'
    )
    config = load_config(schema=APP).config
    assert (config.backend, config.base_url, config.api_key_env, config.timeout) == (
        "openai",
        "http://127.0.0.1:8080/v1",
        "MY_KEY",
        30,
    )
    env = load_config(
        schema=APP,
        environ={
            "VIBECHAT_BACKEND": "llama",
            "VIBECHAT_BASE_URL": "http://h:1/v1/",
            "VIBECHAT_TIMEOUT": "5",
        },
    ).config
    assert (env.backend, env.base_url, env.timeout) == ("llama", "http://h:1/v1", 5)
    problem = load_config(schema=APP, environ={"VIBECHAT_BASE_URL": "h:1"}).problem
    assert problem.startswith(
        "environment variable VIBECHAT_BASE_URL='h:1': base_url must be an http://"
    )
    with pytest.raises(
        InvalidParameterError, match="^--api-key-env: api_key_env must be the name"
    ) as err:
        load_config(schema=APP).with_flags(
            {"api_key_env": "sk-secret-value"}, {"api_key_env": "--api-key-env"}
        )
    assert "sk-secret-value" not in str(err.value)  # a key typed in by mistake is not echoed


@pytest.mark.parametrize(("text", "line", "message"), BAD_FILES)
def test_a_bad_key_is_one_line_with_file_line_and_key_and_only_it_is_left_out(text, line, message):
    path = write(text)
    loaded = load_config(schema=APP)
    problem = loaded.problem
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"config file {path}, line {line}: ")
    assert message in problem
    assert problem.endswith("; fix it with 'vibechat config edit'")
    assert (
        loaded.file_problem is None and loaded.exists
    )  # the file is used: only that key is left out
    assert [str(p) for p in loaded.problems] == [problem]
    assert check_config_file(path, APP) == problem
    assert loaded.problems[0].short.startswith(f"config.toml line {line}: ")
    assert loaded.problems[0].short.endswith(": not applied")
    assert "known:" not in loaded.problems[0].short  # the chat's line: the suggestion, not the list


def test_a_typo_leaves_the_rest_of_the_file_applied_and_every_problem_is_named():
    """The issue's case: base_url set and a typo in [params] still points at the server."""
    path = write(
        'base_url = "http://127.0.0.1:8080"\nmodel = "srv"\ntheme = 3\n\n[params]\n'
        'temprature = 0.5\ntop_k = 7\nseed = "x"\n'
    )
    loaded = load_config(schema=APP)
    assert loaded.file_problem is None
    config = loaded.config
    assert (config.base_url, config.model, config.params.top_k) == (
        "http://127.0.0.1:8080/v1",
        "srv",
        7,
    )
    assert (
        config.theme == "vibechat-dusk" and config.params.seed is None
    )  # the bad values: left out
    problems = [str(p) for p in loaded.problems]
    assert problems[0] == (
        f"config file {path}, line 3: theme must be a non-empty string (got 3); "
        "fix it with 'vibechat config edit'"
    )
    assert problems[1] == (
        f"config file {path}, line 6: unknown key 'temprature' in [params] (did you mean "
        "'temperature'?); known: temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, "
        "seed, logprobs, think_budget, stop, thinking; fix it with 'vibechat config edit'"
    )
    assert (
        problems[2].startswith(f"config file {path}, line 8: seed must be ") and len(problems) == 3
    )
    assert (
        loaded.problem == problems[0] + " (and 2 more problems: 'vibechat config show' lists them)"
    )
    assert [p.short for p in loaded.problems][:2] == [
        "config.toml line 3: theme must be a non-empty string (got 3): not applied",
        "config.toml line 6: unknown key 'temprature' in [params] (did you mean "
        "'temperature'?): not applied",
    ]
    assert loaded.left_out == ("theme", "params.seed")
    assert check_config_file(path, APP) == problems[0]


# (file text, line, column, plain words): every kind of TOML error tomlkit reports.
TOML_ERRORS = [
    (
        'model = "m"\n\n[params]\nsystem = "You are\ntemperature = 0.5\n',
        4,
        10,
        'a string is not closed: a " is missing at the end',
    ),
    ("model = 'C:\\models\n", 1, 9, "a string is not closed: a ' is missing at the end"),
    (
        'system_prompt = """Be brief.\n\nmodel = "m"\n',
        1,
        17,
        'a multi-line string is not closed: the closing """ is missing',
    ),
    (
        "system_prompt = '''Be brief.\n",
        1,
        17,
        "a multi-line string is not closed: the closing ''' is missing",
    ),
    (
        '[params]\nstop = ["###",\n  "User:"\ntop_k = 3\n',
        2,
        8,
        "a list is not closed: a ] is missing",
    ),
    ('[params]\nstop = ["###"\n', 2, 8, "a list is not closed: a ] is missing"),
    ('params = { top_k = 3\ntheme = "x"\n', 1, 10, "an inline table is not closed: a } is missing"),
    ("[params\ntop_k = 1\n", 1, 1, "a table header is not closed: a ] is missing, as in [params]"),
    ("model = gemma\n", 1, 9, 'gemma is not a valid value: text needs quotes ("gemma")'),
    (
        "thinking_expanded = True\n",
        1,
        21,
        "True is not a TOML value: true and false are lower case",
    ),
    ("model = none\n", 1, 9, "none is not a TOML value: TOML has no null; delete the line"),
    ("model =\n", 1, 8, 'no value after = (text needs quotes: key = "text")'),
    ('model == "m"\n', 1, 8, "one = too many: a line is key = value"),
    ("theme\n", 1, 1, "'theme' has no value: a line is key = value, or a comment starting with #"),
    (
        'model = "m" extra\n',
        1,
        13,
        "unexpected 'e' after the value: one key = value a line (a comment starts with #)",
    ),
    ("threads = 4x\n", 1, 11, "4x is not a valid number"),
    ("threads = 1__0\n", 1, 11, "1__0 is not a valid number"),
    ("seed = 2024-13-45\n", 1, 8, "2024-13-45 is not a valid date or time"),
    (
        'models_dir = "C:\\new\\qwen"\n',
        1,
        21,
        "a string has an unknown escape \\q: write \\\\ for a backslash, or use single quotes",
    ),
    ('model = "a\\u12"\n', 1, 11, "a \\u escape needs 4 hex digits"),
    (
        'model = "a\x01b"\n',
        1,
        11,
        "a string holds a control character (U+0001): write it as \\u0001",
    ),
    ("# note\x07\nmodel = 'm'\n", 1, 7, "a comment holds a control character (U+0007): delete it"),
    ("= 3\n", 1, 1, "a line starts with = and no key"),
    (
        "model = 'm'\n:[keys]\n",
        2,
        1,
        "a line cannot start with ':': a line is key = value, a [table] or a # comment",
    ),
    ('model" = "m"\n', 1, 6, "a key cannot contain '\"': a quoted key needs a quote at both ends"),
    ("model = ,\n", 1, 9, "a value cannot start with ',' (text needs quotes"),
    ("[]\n", 1, 1, "[] names no table: write [params] or [keys]"),
    ("my model = 'm'\n", 1, 1, "'my model' is not a valid key: a key with spaces needs quotes"),
    ("\ufeffmodel = 'm'\n", 1, 1, "the file starts with a byte order mark (BOM)"),
    (
        "[params]\ntemperature = 0.5\n\ntemperature = 9\n",
        4,
        None,
        "'temperature' is set twice (first on line 2): keep one",
    ),
    (
        "[params]\ntop_k = 1\n\n[params]\n",
        4,
        None,
        "'params' is set twice (first on line 1): keep one",
    ),
    ("params.top_k = 1\n[params]\ntop_p = 0.5\n", 3, 1, "this table is defined twice"),
]


@pytest.mark.parametrize(("text", "line", "column", "words"), TOML_ERRORS)
def test_toml_errors_in_plain_words_with_line_and_column(text, line, column, words):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    loaded = load_config(schema=APP)
    at = f"config file {path}, line {line}" + (f", column {column}" if column else "")
    problem = loaded.problem
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"{at}: {words}"), problem
    assert problem.endswith("; fix it with 'vibechat config edit'")
    for jargon in ("Unexpected", "Control characters", "\\u000a", "TOML parse error", " col "):
        assert jargon not in problem
    # Not TOML: nothing of the file can apply, and the chat's line says what runs instead.
    assert loaded.file_problem == problem and loaded.config == AppConfig()
    what = problem.split(": ", 1)[1].removesuffix("; fix it with 'vibechat config edit'")
    assert (
        loaded.problems[0].short
        == f"config.toml line {line}: {what}: running on the defaults until it is fixed"
    )


def test_unknown_variables_are_named_with_a_suggestion_and_change_nothing():
    loaded = load_config(
        environ={
            "VIBECHAT_TEMPRATURE": "0.5",
            "VIBECHAT_TOP_K": "9",
            "VIBECHAT_CONFIG_DIR": "/x",
            "VIBECHAT_DATA_DIR": "/y",
            "VIBECHAT_API_KEY": "k",
            "VIBECHAT_ZZZQQQ": "1",
            "VIBECHAT_SERVER_TOKEN": "k",
            "OTHER_TEMPRATURE": "1",
        }
    )
    assert loaded.problem is None  # nothing blocks a run: the variables set nothing
    assert loaded.config.params.top_k == 9 and loaded.config.params.temperature == 0.8
    assert [str(p) for p in loaded.warnings] == [
        "environment variable VIBECHAT_TEMPRATURE: not a vibechat variable (did you mean "
        "VIBECHAT_TEMPERATURE?); "
        "it is ignored: rename or unset it",
        "environment variable VIBECHAT_ZZZQQQ: not a vibechat variable; it is ignored: "
        "rename or unset it",
        "environment variable VIBECHAT_SERVER_TOKEN: not a vibechat variable; it is "
        "ignored: rename or unset it",
    ]
    assert loaded.warnings[0].short == (
        "VIBECHAT_TEMPRATURE: not a vibechat variable (did you mean VIBECHAT_TEMPERATURE?): ignored"
    )
    # The variable the config names as the server's key is vibechat's to read.
    write('api_key_env = "VIBECHAT_SERVER_TOKEN"\n')
    assert load_config(schema=APP, environ={"VIBECHAT_SERVER_TOKEN": "k"}).warnings == ()


def test_every_vibechat_variable_the_code_reads_is_known():
    """An unknown-variable warning about a variable vibechat itself reads would be a lie."""
    import re

    from vibechat.engine.settings.config import known_variables

    found: set[str] = set()
    for folder in ("engine", "app"):
        for source in (REPO / folder).rglob("*.py"):
            found.update(re.findall(r"\b(VIBECHAT_[A-Z0-9_]*[A-Z0-9])\b", source.read_text()))
    assert found - set(known_variables(APP)) == set()


def test_every_bad_variable_is_reported_and_left_out():
    loaded = load_config(
        environ={"VIBECHAT_TEMPERATURE": "hot", "VIBECHAT_TOP_K": "-3", "VIBECHAT_THREADS": "2"}
    )
    assert [p.key for p in loaded.problems] == ["params.temperature", "params.top_k"]
    assert loaded.config.threads == 2
    assert loaded.problem.endswith("(and 1 more problem: 'vibechat config show' lists them)")
    assert loaded.problems[1].short.startswith("VIBECHAT_TOP_K: top_k must be")


def test_the_error_message_of_the_issue():
    path = write(
        'model = "m"\n\ntemperature = 9\n'.replace("\ntemperature", "[params]\ntemperature")
    )
    assert load_config(schema=APP).problem == (
        f"config file {path}, line 3: temperature must be between 0 and 5 "
        f"(got 9); fix it with 'vibechat config edit'"
    )


def test_unreadable_file_is_a_problem_not_a_crash():
    config_path().mkdir(parents=True)  # a directory where the file should be
    loaded = load_config(schema=APP)
    assert loaded.problem and loaded.problem.startswith(
        f"config file {config_path()}: could not be read"
    )
    path = write(b"\xff\xfe bad".decode("latin-1"), config_path().with_name("latin.toml"))
    path.write_bytes(b'theme = "\xff"\n')
    assert "could not be read" in (load_config(path).problem or "")


def test_a_huge_file_is_a_problem_read_no_further():
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"# " + b"x" * (4 << 20) + b"\n")
    loaded = load_config(schema=APP)
    assert loaded.problem == (
        f"config file {path}: is larger than 1 MiB: not a vibechat config file; "
        "fix it with 'vibechat config edit'"
    )


def test_a_bad_variable_names_it_and_only_it_is_left_out():
    write("[params]\ntop_k = 7\n")
    loaded = load_config(environ={"VIBECHAT_TEMPERATURE": "hot", "VIBECHAT_THREADS": "2"})
    assert loaded.file_problem is None and loaded.problems[0].short_where == "VIBECHAT_TEMPERATURE"
    assert loaded.env_problem == (
        "environment variable VIBECHAT_TEMPERATURE='hot': temperature must be a number "
        "between 0 and 5 (got 'hot'); fix or unset it"
    )
    assert loaded.problem == loaded.env_problem
    assert loaded.config.params.temperature == 0.8 and loaded.config.params.top_k == 7
    assert loaded.config.threads == 2
    bad = load_config(schema=APP, environ={"VIBECHAT_CONTEXT_SIZE": "big"}).problem
    assert bad and bad.startswith(
        "environment variable VIBECHAT_CONTEXT_SIZE='big': context_size must be"
    )


def test_vibechat_config_points_at_another_file(monkeypatch, tmp_path):
    write("[params]\ntop_k = 7\n")
    other = write("[params]\ntop_k = 3\n", tmp_path / "elsewhere" / "mine.toml")
    monkeypatch.setenv("VIBECHAT_CONFIG", str(other))
    loaded = load_config(schema=APP)
    assert loaded.path == other and loaded.config.params.top_k == 3
    assert loaded.origin("params.top_k").name == str(other)


USER_FILE = """\
# ~/.config/vibechat/config.toml -- hand-written, keep my notes!

model   = "bartowski/Llama-3.2-1B-Instruct-GGUF"   # the small one
theme = 'vibechat-dusk'

[params]
# cooler than the default
temperature=0.70
top_k    =   40     # keep
seed = 42  # fixed while I compare

# stop strings, one per line
stop = [
    "###",  # markdown separators
]

[keys]
"help" = "f12"  # F1 is taken by tmux
"""


def test_save_params_changes_only_the_values_byte_for_byte():
    path = write(USER_FILE)
    save_params(
        SamplingParams(temperature=0.5, top_k=40, seed=None, min_p=0.1, stop=("###",)), schema=APP
    )
    text = path.read_text()
    expected = USER_FILE.replace("temperature=0.70\n", "temperature=0.5\n").replace(
        "seed = 42  # fixed while I compare\n", ""
    )
    # New keys go at the end of [params]; everything else is as the user wrote it.
    assert text.replace("min_p = 0.1\n", "") == expected
    assert "min_p = 0.1\n" in text
    assert load_config(schema=APP).config.params == SamplingParams(
        temperature=0.5, min_p=0.1, stop=("###",)
    )


def test_saving_the_same_values_leaves_the_file_alone():
    path = write(USER_FILE)
    before = path.stat().st_mtime_ns
    save_params(SamplingParams(temperature=0.7, top_k=40, seed=42, stop=("###",)), schema=APP)
    assert path.read_text() == USER_FILE  # 0.70 stays spelt 0.70
    assert path.stat().st_mtime_ns == before


def test_save_theme_keeps_comments_and_tables():
    path = write(USER_FILE)
    save_theme("vibechat-paper")
    assert path.read_text() == USER_FILE.replace(
        "theme = 'vibechat-dusk'", 'theme = "vibechat-paper"'
    )


def test_saving_into_no_file_starts_from_the_documented_template():
    save_params(SamplingParams(top_k=12), schema=APP)
    text = config_path().read_text()
    assert text.startswith("# vibechat configuration")
    assert "# temperature = 0.8" in text and "top_k = 12" in text
    loaded = load_config(schema=APP)
    assert loaded.problem is None and loaded.config.params == SamplingParams(top_k=12)
    assert loaded.origin("params.top_k").kind == "file"


@pytest.mark.parametrize(("text", "_line", "_message"), BAD_FILES)
def test_a_broken_file_is_never_overwritten(text, _line, _message):
    path = write(text)
    for save in (
        lambda: save_params(SamplingParams(top_k=3), schema=APP),
        lambda: save_theme("vibechat-paper"),
        lambda: update_config({"threads": 2}, schema=APP),
    ):
        with pytest.raises(ConfigError) as info:
            save()
        assert f"config file {path}" in str(info.value)
        assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_an_invalid_value_is_refused_before_writing():
    path = write(USER_FILE)
    with pytest.raises(VibechatError, match="threads must be between 1 and 1024"):
        update_config({"threads": 0}, schema=APP)
    assert path.read_text() == USER_FILE


def test_save_is_atomic_and_keeps_the_file_mode():
    path = write(USER_FILE)
    os.chmod(path, 0o600)
    inode = path.stat().st_ino
    save_theme("vibechat-paper")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_ino != inode  # replaced, not rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml"]


def test_save_writes_through_a_symlinked_file(tmp_path):
    real = write(USER_FILE, tmp_path / "dotfiles" / "vibechat.toml")
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().symlink_to(real)
    save_theme("vibechat-paper")
    assert config_path().is_symlink()
    assert 'theme = "vibechat-paper"' in real.read_text()


def test_template_documents_every_setting_and_loads_as_defaults():
    text = template(APP)
    for key in (
        "model",
        "system_prompt",
        "context_size",
        "gpu_layers",
        "threads",
        "theme",
        "models_dir",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repeat_penalty",
        "max_tokens",
        "seed",
        "stop",
    ):
        assert f"\n# {key} = " in text
    for var in ("VIBECHAT_MODEL", "VIBECHAT_TEMPERATURE", "VIBECHAT_MODELS_DIR", "VIBECHAT_STOP"):
        assert var in text
    assert "params.reset_all" in text and "[params]" in text and "[keys]" in text
    path = write(text)
    loaded = load_config(schema=APP)
    assert loaded.problem is None and loaded.config == AppConfig() and loaded.exists
    # Every commented-out example is valid once uncommented.
    for setting in APP.settings:
        text = text.replace(
            f"\n# {setting.name} = {setting.example}\n", f"\n{setting.name} = {setting.example}\n"
        )
    text = text.replace('\n# "toggle_params" = "f12"\n', '\n"toggle_params" = "f12"\n')
    write(text, path)
    loaded = load_config(schema=APP)
    assert loaded.problem is None
    assert all(origin.kind == "file" for _, _, origin in loaded.items())


def test_key_lines_follow_tables_quotes_and_dotted_keys():
    text = (
        'a = 1\nb.c = 2\ns = """\n[fake]\nx = 1\n"""\n[t]\n"q.r" = 3\n  y = 4\n[t.u]\nz = 5\n'
        "w = '''one line'''\nv = 6\n"
    )
    lines = key_lines(text)
    assert lines[("a",)] == 1 and lines[("b", "c")] == 2 and lines[("b",)] == 2
    assert ("fake",) not in lines and lines[("t",)] == 7
    assert lines[("t", "q.r")] == 8 and lines[("t", "y")] == 9 and lines[("t", "u", "z")] == 11
    assert lines[("t", "u", "v")] == 13


def test_models_dir_env_over_file_over_default(monkeypatch, tmp_path):
    assert models_dir() == data_dir() / "models"
    path = write('models_dir = "store"\n')
    assert models_dir() == path.parent / "store"
    write('models_dir = "~/elsewhere"\n')  # the file changed: read again
    assert models_dir() == Path.home() / "elsewhere"
    monkeypatch.setenv("VIBECHAT_MODELS_DIR", str(tmp_path / "env"))
    assert models_dir() == tmp_path / "env"
    monkeypatch.delenv("VIBECHAT_MODELS_DIR")
    write('models_dir = "store"\n[params]\ntemperature = 9\n')  # a bad key elsewhere: still used
    assert models_dir() == path.parent / "store"
    write('models_dir = "store"\n[params\n')  # not TOML: quietly the default ...
    assert models_dir() == data_dir() / "models"
    assert load_config(schema=APP).problem  # ... while the config itself says what is wrong


def test_the_usage_docs_settings_table_is_the_generated_one_and_dev_py_docs_rewrites_it():
    readme = (REPO / "docs" / "USAGE.md").read_text()
    assert (
        with_table(readme, markdown_table(APP)) == readme
    )  # 'python3 dev.py docs' changes nothing
    stale = readme.replace("| `params.top_k` |", "| `params.top_kk` |", 1)
    assert stale != readme and with_table(stale, markdown_table(APP)) == readme


def test_the_usage_docs_have_the_settings_table_and_a_valid_example():
    readme = (REPO / "docs" / "USAGE.md").read_text()  # the reference (the README links to it)
    assert markdown_table(APP) in readme
    section = readme[readme.index("## Configuration") :]
    example = section[
        section.index("```toml\n") + 8 : section.index("```\n", section.index("```toml"))
    ]
    path = write(example)
    loaded = load_config(path, schema=APP)
    assert loaded.problem is None and loaded.config.keys["toggle_params"] == "ctrl+f2"


def test_the_docs_settings_table_lists_every_setting_with_its_flag_variable_and_key():
    """Issue 26.4: the table in docs/USAGE.md (the README links to it) has a row for exactly the
    settings of the table, each with its flag (and short alias), variable and config key."""
    text = (REPO / "docs" / "USAGE.md").read_text()
    header = "| key | flag | variable | default | what it sets |"
    assert header in text
    rows = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    found = {}
    for row in rows[:-1]:  # the last: keys.<id>, the binding overrides
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        found[cells[0].strip("`")] = (cells[1], cells[2])
    expected = {
        s.key: (
            (f"`{s.flag}`" + (f", `{s.short}`" if s.short else "")) if s.flag else "",
            f"`{s.env}`" if s.env else "",
        )
        for s in APP.settings
    }
    assert found == expected and rows[-1].startswith("| `keys.<id>` |")


def test_the_engine_knows_no_ui_setting_the_app_declares_them_and_reads_keys_generically():
    """Issue 26.1: the chat's own settings (theme, thinking_expanded, the [keys] bindings) and
    Textual's key names are the app's. The engine's settings table has none of them and its
    sources never name them (toml_words.py's syntax help names ``[keys]`` as a table header, a
    word about TOML); the app declares them (``AppConfig``) and hands its table to the engine's
    loader, which checks a text table's entries only through the check the app's field carries."""
    import dataclasses
    import re

    ui = {"theme", "thinking_expanded", "keys"}
    assert ui.isdisjoint(f.name for f in dataclasses.fields(Config)) and ui.isdisjoint(
        SCHEMA.top_level
    )
    assert ui <= {f.name for f in dataclasses.fields(AppConfig)} and ui <= set(APP.top_level)
    named = re.compile(
        r"\btheme|thinking_expanded|THEME|\[keys\]|\bkeys\.|[\"']keys[\"']|key_ids|binding id"
    )
    for source in sorted((REPO / "engine" / "settings").glob("*.py")):
        if source.name != "toml_words.py":
            found = [line for line in source.read_text().splitlines() if named.search(line)]
            assert found == [], f"{source.name} names a UI setting: {found[0]}"
    assert (
        not (REPO / "engine" / "settings" / "keynames.py").exists()
        and (REPO / "app" / "keynames.py").exists()
    )
    # The engine's own table: the app's settings are unknown keys and variables there.
    path = write('theme = "vibechat-paper"\n[keys]\nhelp = "cntrl+t"\n')
    engine = load_config(path, environ={"VIBECHAT_THEME": "vibechat-paper"})
    assert [p.what for p in engine.problems] == [
        "unknown key 'theme'",
        "unknown key 'keys'",
        "not a vibechat variable",
    ]
    assert isinstance(engine.config, Config) and not isinstance(engine.config, AppConfig)
    # The app's: the same file read with its settings, the bad key string named by its check.
    loaded = load_config(path, schema=APP)
    assert isinstance(loaded.config, AppConfig) and loaded.config.theme == "vibechat-paper"
    assert loaded.left_out == ("keys.help",)
    assert "'cntrl' is not a modifier (did you mean 'ctrl'?)" in (loaded.problem or "")


def test_a_new_top_level_key_is_written_among_the_top_level_settings():
    """F4's first theme: never under the comment that leads into [params] (it belongs there)."""
    path = write(template(APP))
    save_theme("vibechat-paper")
    lines = path.read_text().splitlines()
    at = lines.index('theme = "vibechat-paper"')
    assert lines[at - 1] == '# theme = "vibechat-paper"'  # under its own documented example
    assert at < lines.index("[params]")
    write(
        'model = "m"  # mine\n\n# sampling: a bit cooler\n[params]\ntop_k = '
        '3\n\n[keys]\nhelp = "f12"\n'
    )
    update_config({"theme": "vibechat-paper", "threads": 2}, schema=APP)
    assert path.read_text() == (
        'model = "m"  # mine\ntheme = "vibechat-paper"\nthreads = 2\n\n'
        '# sampling: a bit cooler\n[params]\ntop_k = 3\n\n[keys]\nhelp = "f12"\n'
    )
    write("# my settings\n\n# sampling\n[params]\ntop_k = 3\n")
    save_theme("vibechat-paper")
    assert (
        path.read_text()
        == '# my settings\ntheme = "vibechat-paper"\n\n# sampling\n[params]\ntop_k = 3\n'
    )
    write("[params]\ntop_k = 3\n")
    save_theme("vibechat-paper")
    assert path.read_text() == 'theme = "vibechat-paper"\n\n[params]\ntop_k = 3\n'
    write("threads = 2")  # no table, no final newline
    save_theme("vibechat-paper")
    assert path.read_text() == 'threads = 2\ntheme = "vibechat-paper"\n'
    assert load_config(schema=APP).config.theme == "vibechat-paper"


def test_a_mangled_file_is_always_one_line_never_a_traceback():
    """Random damage to a real config (seeded: the same cases on every run): whatever tomlkit
    makes of it, the problem is one line in our words."""
    import random

    good = (
        'model = "m"\nsystem_prompt = """two\nlines"""\n[params]\ntop_k = 3\nstop = ["x",\n "y"]\n'
        "[keys]\n\"help\" = 'f12'\nx = { d = 1, e = [1, 2] }\nv = 2024-01-02\n"
    )
    rng = random.Random(30)
    path = config_path()
    seen = set()
    for _ in range(1500):
        text = list(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text))
            if rng.random() < 0.4:
                del text[at]
            else:
                text.insert(at, rng.choice("\"'[]{}=#\n\\ .,x1\x01\ufeff\r\t+-:T"))
        try:
            read_config_text("".join(text), path)
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and "\r" not in message and "TOML parse error" not in message
            assert message.startswith(f"config file {path}") and message.endswith(FIX)
            seen.add(message.split(": ", 1)[1].split(":")[0][:20])
    assert len(seen) > 20  # many kinds of mistake were made, and worded
