"""The command line itself, in real subprocesses and without loading a model: usage
errors are one line (exit 2), --help and --version answer at once."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

import pytest

from conftest import VIBECHAT_BIN


def vibechat(*args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(VIBECHAT_BIN), *args], input=input, capture_output=True, text=True,
                          timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "needle", "command"), [
    (["run", "--conversation", "0"], "invalid value for '--conversation'", "vibechat run"),
    (["run", "--cid", "abc"], "valid integer", "vibechat run"),
    (["run", "--bogus"], "no such option: --bogus", "vibechat run"),
    (["run", "--temprature", "1"], "--temperature", "vibechat run"),  # typer's suggestion survives
    (["histroy"], "Did you mean 'history'?", "vibechat"),
    (["--no-such-flag"], "no such option: --no-such-flag", "vibechat"),
    (["history", "list", "-n", "0"], "invalid value for '--limit'", "vibechat history list"),
    (["history", "show", "abc"], "valid integer", "vibechat history show"),
    (["history", "show"], "missing argument 'ID'", "vibechat history show"),
    (["history", "export", "29", "-o", "."], "is a directory", "vibechat history export"),
    (["models", "search", "x", "--limit", "0"], "invalid value for '--limit'", "vibechat models search"),
    (["config", "show", "--jsn"], "no such option: --jsn", "vibechat config show"),
    (["history", "search", ""], "no word to search for", "vibechat history search"),
    (["history", "search", "  !! "], "give at least one word", "vibechat history search"),
])
def test_usage_errors_are_one_line_with_exit_2(args, needle, command):
    out = vibechat(*args)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr  # no usage block, no box
    line = out.stderr.rstrip("\n")
    assert line.startswith("vibechat: error: ") and line.endswith(f"(see '{command} --help')")
    assert needle in line
    assert "╭" not in line and "Traceback" not in line


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["run", "--help"], ["history", "export", "-h"],
                                  ["models", "--help"], ["config", "show", "--help"]])
def test_help_still_works(args):
    out = vibechat(*args)
    assert out.returncode == 0, out.stderr
    assert "Usage: vibechat" in out.stdout and out.stderr == ""


def test_a_group_without_a_command_shows_its_help():
    out = vibechat("history")
    assert out.returncode == 2 and "Usage: vibechat history" in out.stdout and "export" in out.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_names_vibechat_llama_cpp_and_gpu_offload(flag, user_dirs):
    import llama_cpp

    out = vibechat(flag)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"vibechat {version('vibechat')}"
    assert lines[1].startswith(f"llama-cpp-python {version('llama-cpp-python')}")
    offload = llama_cpp.llama_supports_gpu_offload()
    assert lines[2].startswith("GPU offload: yes" if offload else "GPU offload: no")
    assert not (user_dirs["cache"] / "vibechat" / "starter").exists()  # no model was unpacked or loaded


HELP_PAGES = [[], ["run"], ["models"], ["models", "search"], ["models", "files"], ["models", "pull"],
              ["models", "list"], ["models", "info"], ["models", "rm"], ["history"], ["history", "list"],
              ["history", "show"], ["history", "search"], ["history", "export"], ["history", "rm"], ["config"],
              ["config", "path"], ["config", "show"], ["config", "edit"]]


def test_help_pages_name_values_plainly():
    """No '<bool>' beside a flag, no '<str>' or '<int>' for a value: options say what they take."""
    for args in HELP_PAGES:
        page = vibechat(*args, "--help").stdout
        for label in ("<bool>", "<str>", "<int", "<float>", "<Path>", "<list", "<path>"):
            assert label not in page, (args, label)
    page = vibechat("run", "--help").stdout
    for flag, label in (("--temperature", "NUMBER"), ("--top-k", "N"), ("--model", "MODEL"), ("--prompt", "TEXT"),
                        ("--conversation", "ID"), ("--prompts-file", "FILE.jsonl")):
        assert any(flag in line and f" {label} " in line for line in page.splitlines()), (flag, label)


def test_the_run_summary_is_one_line_in_the_command_list():
    page = vibechat("--help").stdout
    [line] = [line for line in page.splitlines() if "│ run " in line]
    assert "Answer one prompt, streaming the reply to stdout." in line
    assert "unless" not in page  # the details stay on run's own page
    assert "--prompts-file runs many prompts" in " ".join(vibechat("run", "--help").stdout.split())


@pytest.mark.parametrize("args", [["run", "-p", "hi"], ["run", "--prompts-file", "-"], []])
def test_draft_tokens_without_drafting_is_an_error_not_silently_ignored(args):
    out = vibechat(*args, "--draft-tokens", "5") if args else vibechat("--draft-tokens", "5")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == ("vibechat: error: --draft-tokens applies only with speculative decoding: add --draft "
                          "prompt-lookup, or drop --draft-tokens.\n")
