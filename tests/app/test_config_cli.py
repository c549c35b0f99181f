"""`vibechat config path | show | edit`, and the config applied by `vibechat run`, in real
subprocesses of the installed `vibechat`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import vibechat
from vibechat.engine.paths import config_dir
from vibechat.engine.settings.config import config_path

pytestmark = pytest.mark.usefixtures("no_setting_variables")  # conftest.py


def write(text: str, path: Path | None = None) -> Path:
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def editor(tmp_path: Path, code: str) -> str:
    """An $EDITOR command: a Python script that gets the file's path as its last argument."""
    script = tmp_path / "fake_editor.py"
    script.write_text("import sys\nfrom pathlib import Path\npath = Path(sys.argv[-1])\n" + code)
    return f"{sys.executable} {script} --wait"


BROKEN = 'theme = "vibechat-paper"\n\n[params]\ntemperature = 9\n'


def test_path(tmp_path):
    out = vibechat("config", "path")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{config_dir() / 'config.toml'}\n"
    other = tmp_path / "other.toml"
    assert vibechat("config", "path", env={"VIBECHAT_CONFIG": str(other)}).stdout == f"{other}\n"


def test_show_values_and_where_each_comes_from():
    path = write("# mine\nthreads = 3\n\n[params]\ntemperature = 0.3\ntop_k = 7\n")
    out = vibechat("--top-p", "0.7", "config", "show", env={"VIBECHAT_TOP_K": "9"})
    assert out.returncode == 0, out.stderr
    lines = {
        line.split()[0]: line.split(None, 1)[1]
        for line in out.stdout.splitlines()
        if line.startswith(("threads ", "params."))
    }
    assert out.stdout.startswith(f"config file: {path}\n")
    assert lines["threads"].split() == ["3", "file,", "line", "2"]
    assert lines["params.temperature"].split() == ["0.3", "file,", "line", "5"]
    assert lines["params.top_k"].split() == ["9", "env", "VIBECHAT_TOP_K"]
    assert lines["params.top_p"].split() == ["0.7", "flag", "--top-p"]
    assert lines["params.min_p"].split() == ["0.05", "default"]

    data = json.loads(
        vibechat("--top-p", "0.7", "config", "show", "--json", env={"VIBECHAT_TOP_K": "9"}).stdout
    )
    assert data["path"] == str(path) and data["exists"] is True and data["problem"] is None
    s = data["settings"]
    assert s["params.temperature"] == {"value": 0.3, "source": "file", "file": str(path), "line": 5}
    assert s["params.top_k"] == {"value": 9, "source": "env", "variable": "VIBECHAT_TOP_K"}
    assert s["params.top_p"] == {"value": 0.7, "source": "flag", "flag": "--top-p"}
    assert s["model"] == {"value": None, "source": "default"}
    assert s["theme"] == {"value": "vibechat-dusk", "source": "default"}


def test_show_with_no_file_says_how_to_create_it():
    out = vibechat("config", "show")
    assert out.returncode == 0, out.stderr
    assert "not created yet: 'vibechat config edit' creates it" in out.stdout
    assert json.loads(vibechat("config", "show", "--json").stdout)["exists"] is False


PYTHON_WORDS = re.compile(r"(?<![\w.])(None|True|False)(?![\w.])|\[\]|\(\)")


def shown_values(stdout: str) -> dict[str, str]:
    """``config show``'s table as {setting: value}."""
    rows = stdout.split("\nsetting ", 1)[1].splitlines()[1:]
    return {
        line.split()[0]: line[line.index(" ") :].rsplit("  ", 1)[0].strip()
        for line in rows
        if line[:1].isalpha()
    }


def test_show_speaks_to_people_not_python():
    """No Python repr in the table: booleans as the file writes them, nothing as (none), a
    stop list as its quoted strings."""
    out = vibechat("config", "show")
    assert out.returncode == 0, out.stderr
    assert not PYTHON_WORDS.search(out.stdout), PYTHON_WORDS.search(out.stdout)
    values = shown_values(out.stdout)
    assert values["thinking_expanded"] == "false" and values["params.stop"] == "(none)"
    assert (
        values["params.seed"] == "(none)" and values["params.max_tokens"] == "(auto)"
    )  # the model's default
    write('thinking_expanded = true\n\n[params]\nstop = ["\\nUser:", "END"]\n')
    out = vibechat("config", "show")
    assert not PYTHON_WORDS.search(out.stdout), PYTHON_WORDS.search(out.stdout)
    values = shown_values(out.stdout)
    assert values["thinking_expanded"].split()[0] == "true"
    assert values["params.stop"].startswith('"\\nUser:", "END"')


def test_a_broken_file_still_shows_paths_and_the_problem():
    path = write(BROKEN)
    problem = (
        f"config file {path}, line 4: temperature must be between 0 and 5 (got 9); "
        "fix it with 'vibechat config edit'"
    )
    assert vibechat("config", "path").stdout == f"{path}\n"
    out = vibechat("config", "show")
    assert out.returncode == 0, out.stderr
    assert f"problem: {problem}\n" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert "(the values below are in effect: they leave out params.temperature)\n" in out.stdout
    data = json.loads(vibechat("config", "show", "--json").stdout)
    assert data["problem"] == problem and data["problems"] == [problem]
    assert data["left_out"] == ["params.temperature"]
    # Only the bad value is left out: the rest of the file applies.
    assert data["settings"]["theme"] == {
        "value": "vibechat-paper",
        "source": "file",
        "file": str(path),
        "line": 1,
    }
    assert data["settings"]["params.temperature"] == {"value": 0.8, "source": "default"}
    assert path.read_text() == BROKEN


def test_run_fails_in_one_line_on_a_broken_config():
    path = write(BROKEN)
    out = vibechat("run", "-p", "hi")
    assert out.returncode == 1
    assert out.stderr == (
        f"vibechat: error: config file {path}, line 4: temperature must be between 0 and 5 "
        f"(got 9); fix it with 'vibechat config edit'\n"
    )
    assert out.stdout == ""


def test_a_key_textual_cannot_report_is_one_line_in_run_and_config_show():
    path = write('[keys]\ntoggle_params = "notakey+++"\n')
    problem = (
        f'config file {path}, line 2: keys.toggle_params = "notakey+++" is not a valid '
        "key: 'notakey' is "
        'not a modifier: use alt, ctrl, hyper, meta, shift, super (keys look like "ctrl+t", "f12", '
        '"shift+tab", "question_mark"; several: "f12,ctrl+t"); fix it with \'vibechat config edit\''
    )
    out = vibechat("run", "-p", "hi")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == f"vibechat: error: {problem}\n"
    show = vibechat("config", "show")
    assert show.returncode == 0, show.stderr
    assert f"problem: {problem}\n" in show.stdout
    assert [line for line in show.stdout.splitlines() if "notakey" in line] == [
        f"problem: {problem}"
    ]
    assert json.loads(vibechat("config", "show", "--json").stdout)["problem"] == problem


def test_run_fails_in_one_line_on_a_bad_variable():
    out = vibechat("run", "-p", "hi", env={"VIBECHAT_TEMPERATURE": "hot"})
    assert out.returncode == 1
    assert out.stderr == (
        "vibechat: error: environment variable VIBECHAT_TEMPERATURE='hot': temperature must be "
        "a number between 0 and 5 (got 'hot'); fix or unset it\n"
    )


def test_run_uses_the_configured_model(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    write(f'model = "{missing}"\n')
    out = vibechat("run", "-p", "hi")
    assert out.returncode == 1 and str(missing) in out.stderr
    assert len(out.stderr.splitlines()) == 1


def test_edit_creates_the_documented_template_and_checks_the_result(tmp_path):
    path = config_path()
    code = (
        "text = path.read_text()\n"
        "assert '# vibechat configuration' in text\n"
        "path.write_text(text.replace('# top_k = 40', 'top_k = 12'))\n"
    )
    out = vibechat("config", "edit", env={"EDITOR": editor(tmp_path, code), "VISUAL": ""})
    assert out.returncode == 0, out.stderr
    assert f"Created {path}" in out.stderr and f"{path}: OK" in out.stderr
    data = json.loads(vibechat("config", "show", "--json").stdout)
    assert data["settings"]["params.top_k"]["value"] == 12
    assert data["settings"]["params.top_k"]["source"] == "file"


def test_edit_reports_a_problem_in_one_line(tmp_path):
    path = write("[params]\ntop_k = 40\n")
    code = "path.write_text(path.read_text() + 'temprature = 0.5\\n')\n"
    out = vibechat("config", "edit", env={"VISUAL": editor(tmp_path, code), "EDITOR": "false"})
    assert out.returncode == 1
    assert out.stderr == (
        f"vibechat: error: config file {path}, line 3: unknown key 'temprature' in [params] "
        "(did you mean 'temperature'?); known: temperature, top_k, top_p, min_p, repeat_penalty, "
        "max_tokens, seed, logprobs, think_budget, stop, thinking; fix it with "
        "'vibechat config edit'\n"
    )


def test_edit_reports_every_problem_one_line_each(tmp_path):
    path = write("[params]\ntop_k = 40\n")
    code = "path.write_text('theme = 3\\n' + path.read_text() + 'temprature = 0.5\\n')\n"
    out = vibechat("config", "edit", env={"VISUAL": editor(tmp_path, code)})
    assert out.returncode == 1
    assert [line.split(": ", 3)[2:] for line in out.stderr.splitlines()] == [
        [
            f"config file {path}, line 1",
            "theme must be a non-empty string (got 3); fix it with 'vibechat config edit'",
        ],
        [
            f"config file {path}, line 4",
            "unknown key 'temprature' in [params] (did you mean 'temperature'?); known: "
            "temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, logprobs, "
            "think_budget, stop, thinking; fix it with "
            "'vibechat config edit'",
        ],
    ]
    assert all(line.startswith("vibechat: error: config file") for line in out.stderr.splitlines())


def test_edit_opens_a_broken_file_so_it_can_be_fixed(tmp_path):
    path = write(BROKEN)
    code = "path.write_text(path.read_text().replace('temperature = 9', 'temperature = 0.9'))\n"
    out = vibechat("config", "edit", env={"EDITOR": editor(tmp_path, code)})
    assert out.returncode == 0, out.stderr
    assert "Created" not in out.stderr
    assert path.read_text() == BROKEN.replace("= 9", "= 0.9")


def test_edit_with_a_failing_editor_says_so(tmp_path):
    out = vibechat("config", "edit", env={"EDITOR": editor(tmp_path, "raise SystemExit(3)\n")})
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].startswith("vibechat: error: the editor ")
    assert "exited with status 3" in out.stderr and out.stderr.count("vibechat: error") == 1
    out = vibechat("config", "edit", env={"EDITOR": str(tmp_path / "no-such-editor")})
    assert out.returncode == 1 and "could not start the editor" in out.stderr


@pytest.mark.model
def test_run_precedence_flag_over_env_over_file(starter_installed):
    write("[params]\ntemperature = 0.3\ntop_k = 7\ntop_p = 0.5\nmax_tokens = 3\nseed = 11\n")
    out = vibechat(
        "run",
        "-p",
        "Hello",
        "--json",
        "--top-p",
        "0.7",
        env={"VIBECHAT_TOP_K": "9", "VIBECHAT_TOP_P": "0.6"},
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    params = json.loads(out.stdout)["params"]
    assert params["temperature"] == 0.3  # file
    assert params["top_k"] == 9  # env over file
    assert params["top_p"] == 0.7  # flag over env
    assert params["max_tokens"] == 3 and params["seed"] == 11  # file
    assert params["min_p"] == 0.05  # default
    assert json.loads(out.stdout)["stats"]["completion_tokens"] <= 3


def test_the_chat_gets_the_effective_config_and_starts_despite_a_broken_file(monkeypatch):
    """In-process: `vibechat` (no command) hands run_tui the values in effect and the problem."""
    from typer.testing import CliRunner

    import vibechat.app.tui as tui
    from vibechat.app.commands.cli import cli

    seen: dict = {}
    monkeypatch.setattr(tui, "run_tui", lambda **kw: seen.update(kw))
    path = write(BROKEN)
    result = CliRunner().invoke(
        cli, ["--top-k", "5", "--threads", "2"], env={"VIBECHAT_TEMPERATURE": "0.2"}
    )
    assert result.exit_code == 0, result.output
    assert seen["params"].top_k == 5 and seen["params"].temperature == 0.2
    assert seen["engine"].threads == 2 and seen["system"] is None
    assert seen["config"].problem.startswith(f"config file {path}, line 4")
    assert str(seen["config"].origin("params.top_k")) == "flag --top-k"


NOT_TOML = 'model = "m"\n\n[params]\nsystem = "You are\ntop_k = 3\n'


def test_run_refuses_a_file_that_is_not_toml_in_one_line_of_plain_words():
    path = write(NOT_TOML)
    out = vibechat("run", "-p", "hi")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (
        f'vibechat: error: config file {path}, line 4, column 10: a string is not closed: a " is '
        "missing at the end; fix it with 'vibechat config edit'\n"
    )
    show = vibechat("config", "show")
    assert show.returncode == 0, show.stderr
    assert (
        "(the values below are in effect: the whole file is left out until it is fixed)"
        in show.stdout
    )
    assert json.loads(vibechat("config", "show", "--json").stdout)["left_out"] == "file"


def test_run_refuses_a_file_with_several_problems_naming_the_first_and_counting_the_rest():
    path = write("theme = 3\n[params]\ntemprature = 0.5\n")
    out = vibechat("run", "-p", "hi")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1
    assert out.stderr == (
        f"vibechat: error: config file {path}, line 1: theme must be a non-empty string (got 3); "
        "fix it with 'vibechat config edit' (and 1 more problem: 'vibechat config show' lists "
        "them)\n"
    )


def test_an_unknown_variable_is_named_and_the_run_goes_on(stub):
    out = vibechat(
        "run",
        "-p",
        "hi",
        "--no-save",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        env={"VIBECHAT_TEMPRATURE": "0.5"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == stub.reply
    assert out.stderr.splitlines()[0] == (
        "vibechat: warning: environment variable VIBECHAT_TEMPRATURE: not a vibechat "
        "variable (did you mean "
        "VIBECHAT_TEMPERATURE?); it is ignored: rename or unset it"
    )
    assert "temperature" not in stub.last_body or stub.last_body["temperature"] == 0.8


def test_config_check_lists_every_problem_and_fails_and_passes_a_good_file():
    out = vibechat("config", "check")
    assert (
        out.returncode == 0 and out.stderr == f"{config_path()}: OK (no file: the defaults apply)\n"
    )
    path = write("theme = 3\n[params]\ntemprature = 0.5\ntop_k = 3\n")
    out = vibechat("config", "check", env={"VIBECHAT_TOP_P": "2", "VIBECHAT_THEME_NAME": "x"})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "vibechat: warning: environment variable VIBECHAT_THEME_NAME: not a vibechat "
        "variable; it is ignored: "
        "rename or unset it",
        f"vibechat: error: config file {path}, line 1: theme must be a non-empty string "
        "(got 3); fix it with "
        "'vibechat config edit'",
        f"vibechat: error: config file {path}, line 3: unknown key 'temprature' in "
        "[params] (did you mean "
        "'temperature'?); known: temperature, top_k, top_p, min_p, repeat_penalty, "
        "max_tokens, seed, logprobs, think_budget, stop, thinking; "
        "fix it with 'vibechat config edit'",
        "vibechat: error: environment variable VIBECHAT_TOP_P='2': top_p must be between "
        "0 and 1 (got 2); fix or "
        "unset it",
    ]
    write("[params]\ntop_k = 3\n")
    out = vibechat("config", "check", env={"VIBECHAT_TEMPRATURE": "1"})  # a warning alone passes
    assert out.returncode == 0
    assert out.stderr.splitlines()[-1] == f"{path}: OK"
