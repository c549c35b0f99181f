"""The command line itself, in real subprocesses and without loading a model: usage
errors are one line (exit 2), --help and --version answer at once."""

from __future__ import annotations

import json
import re
import subprocess
from importlib.metadata import version

import pytest

from helpers import vibechat

_HELP_PAGES: dict[tuple[str, ...], subprocess.CompletedProcess] = {}


def help_page(*path: str) -> subprocess.CompletedProcess:
    """``vibechat PATH... --help`` in a real subprocess, run once per page for this module: a page
    depends on no user file or variable, and several tests read the same pages."""
    if path not in _HELP_PAGES:
        _HELP_PAGES[path] = vibechat(*path, "--help")
    return _HELP_PAGES[path]


@pytest.mark.parametrize(
    ("args", "needle", "command"),
    [
        (
            ["run", "--conversation", "0"],
            "--conversation must be at least 1 (got 0)",
            "vibechat run",
        ),
        (
            ["run", "--cid", "abc"],
            "--conversation must be a whole number (got 'abc')",
            "vibechat run",
        ),
        (["run", "--bogus"], "no such option: --bogus", "vibechat run"),
        (
            ["run", "--temprature", "1"],
            "--temperature",
            "vibechat run",
        ),  # typer's suggestion survives
        (["histroy"], "Did you mean 'history'?", "vibechat"),
        (["--no-such-flag"], "no such option: --no-such-flag", "vibechat"),
        (
            ["history", "list", "-n", "0"],
            "--limit must be at least 1 (got 0)",
            "vibechat history list",
        ),
        (
            ["history", "show", "abc"],
            "ID must be a whole number (got 'abc')",
            "vibechat history show",
        ),
        (["history", "show"], "missing argument 'ID'", "vibechat history show"),
        (["history", "export", "29", "-o", "."], "is a directory", "vibechat history export"),
        (
            ["models", "search", "x", "--limit", "0"],
            "--limit must be at least 1 (got 0)",
            "vibechat models search",
        ),
        (["config", "show", "--jsn"], "no such option: --jsn", "vibechat config show"),
        (["history", "search", ""], "no word to search for", "vibechat history search"),
        (["history", "search", "  !! "], "give at least one word", "vibechat history search"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args, needle, command):
    out = vibechat(*args)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr  # no usage block, no box
    line = out.stderr.rstrip("\n")
    assert line.startswith("vibechat: error: ") and line.endswith(f"(see '{command} --help')")
    assert needle in line
    assert "╭" not in line and "Traceback" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["run", "--help"],
        ["history", "export", "-h"],
        ["models", "--help"],
        ["config", "show", "--help"],
    ],
)
def test_help_still_works(args):
    out = vibechat(*args)
    assert out.returncode == 0, out.stderr
    assert "Usage: vibechat" in out.stdout and out.stderr == ""


def test_a_group_without_a_command_shows_its_help():
    out = vibechat("history")
    assert (
        out.returncode == 2 and "Usage: vibechat history" in out.stdout and "export" in out.stdout
    )


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
    assert not (
        user_dirs["cache"] / "vibechat" / "starter"
    ).exists()  # no model was unpacked or loaded


HELP_PAGES = [
    [],
    ["run"],
    ["models"],
    ["models", "search"],
    ["models", "files"],
    ["models", "pull"],
    ["models", "list"],
    ["models", "show"],
    ["models", "info"],
    ["models", "rm"],
    ["history"],
    ["history", "list"],
    ["history", "show"],
    ["history", "search"],
    ["history", "export"],
    ["history", "rm"],
    ["config"],
    ["config", "path"],
    ["config", "show"],
    ["config", "edit"],
    ["list"],
    ["ls"],
    ["pull"],
    ["show"],
    ["rm"],
]


def test_help_pages_name_values_plainly():
    """No '<bool>' beside a flag, no '<str>' or '<int>' for a value: options say what they take."""
    for args in HELP_PAGES:
        page = help_page(*args).stdout
        for label in ("<bool>", "<str>", "<int", "<float>", "<Path>", "<list", "<path>"):
            assert label not in page, (args, label)
    page = help_page("run").stdout
    for flag, label in (
        ("--temperature", "NUMBER"),
        ("--top-k", "N"),
        ("--model", "MODEL"),
        ("--prompt", "TEXT"),
        ("--conversation", "ID"),
        ("--prompts-file", "FILE.jsonl"),
    ):
        assert any(flag in line and f" {label} " in line for line in page.splitlines()), (
            flag,
            label,
        )


def test_the_run_summary_is_one_line_in_the_command_list():
    page = help_page().stdout
    [line] = [line for line in page.splitlines() if "│ run " in line]
    assert "Answer one prompt, streaming the reply to stdout." in line
    assert "unless" not in page  # the details stay on run's own page
    assert "--prompts-file runs many prompts" in " ".join(help_page("run").stdout.split())


@pytest.mark.parametrize("args", [["run", "-p", "hi"], ["run", "--prompts-file", "-"], []])
def test_draft_tokens_without_drafting_is_an_error_not_silently_ignored(args):
    out = vibechat(*args, "--draft-tokens", "5") if args else vibechat("--draft-tokens", "5")
    assert out.returncode == 1
    if "--prompts-file" in args:  # its results are JSON Lines: one line says it could not start
        assert json.loads(out.stdout)["error"]["kind"] == "error"
    else:
        assert out.stdout == ""
    assert out.stderr == (
        "vibechat: error: --draft-tokens applies only with speculative decoding: add --draft "
        "prompt-lookup, or drop --draft-tokens.\n"
    )


# ------------------------------------------------------------------ help texts as written
def command_tree() -> list[tuple[list[str], object]]:
    """Every command of ``vibechat`` (hidden ones too) with its path, as click builds them."""
    from typer.main import get_command

    from vibechat.app.commands.cli import cli

    def walk(command, path):
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(get_command(cli), []))


def flat(page: str) -> str:
    """A help page's words in one line: no box drawing, line breaks as spaces."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", page).split())


def test_every_help_page_keeps_the_bracketed_words_of_its_help_texts():
    """Rich takes '[thinking]' in a help text for a style tag and drops it ('between  and
    lines'): every bracketed word of every command's and option's help reaches its page."""
    tree = command_tree()
    assert len(tree) > 20  # every page, the hidden shortcuts included
    bracketed = 0
    for path, command in tree:
        texts = [
            command.help or "",
            *(getattr(param, "help", None) or "" for param in command.params),
        ]
        wanted = {" ".join(m.split()) for text in texts for m in re.findall(r"\[[^\[\]]+\]", text)}
        if not wanted:
            continue
        out = help_page(*path)
        assert out.returncode == 0, out.stderr
        page = flat(out.stdout)
        for words in wanted:
            assert words in page, (path, words)
            bracketed += 1
    assert bracketed  # the test looked at some
    run = flat(help_page("run").stdout)
    assert "stderr, between [thinking] and [end of thinking] lines (stdout" in run


# ------------------------------------------------------------------ ollama habits
@pytest.mark.parametrize(
    ("shortcut", "command"),
    [("list", "list"), ("ls", "list"), ("pull", "pull"), ("show", "show"), ("rm", "rm")],
)
def test_ollama_style_shortcuts_are_the_models_commands(shortcut, command):
    short, full = help_page(shortcut), help_page("models", command)
    assert short.returncode == 0 and full.returncode == 0, short.stderr
    assert f"Usage: vibechat {shortcut} [OPTIONS]" in short.stdout

    def body(page: str) -> str:  # the page below its usage line: summary, arguments, options
        return page.split("Usage:", 1)[1].split("\n", 1)[1]

    assert body(short.stdout) == body(full.stdout)


def test_the_shortcuts_keep_the_command_list_short_and_are_named_once():
    page = help_page().stdout
    commands = page.split("Commands", 1)[1].split("╰", 1)[0]
    assert [line.split()[1] for line in commands.splitlines() if line.startswith("│ ")] == [
        "run",
        "tools",
        "models",
        "history",
        "config",
        "presets",
    ]
    assert (
        "ollama-style shortcuts: list (ls), pull, show and rm are the 'models' commands "
        "of the same names." in flat(page)
    )


def test_shortcuts_answer_as_their_models_command(user_dirs):
    listed, shortcut = vibechat("models", "list", "--json"), vibechat("ls", "--json")
    assert (
        shortcut.returncode == 0
        and shortcut.stdout == listed.stdout
        and '"starter"' in shortcut.stdout
    )
    info, shown = (
        vibechat("models", "show", "starter", "--json"),
        vibechat("show", "starter", "--json"),
    )
    assert shown.returncode == 0 and shown.stdout == info.stdout
    refused = vibechat("rm", "starter", "--yes")  # the bundled model: never deleted, and says why
    assert (
        refused.returncode == 1
        and refused.stderr == vibechat("models", "rm", "starter", "--yes").stderr
    )
    missing = vibechat("pull")
    assert missing.returncode == 2
    assert (
        missing.stderr == "vibechat: error: missing argument 'REF' (see 'vibechat pull --help')\n"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["run", "hello there", "-p", "hi"],
            "the prompt is given twice, as PROMPT and with --prompt: give one of them",
        ),
        (
            ["run", "tiny.gguf", "Why is the sky blue?"],
            "'tiny.gguf' is a model, not a prompt: pick the model with --model, e.g. "
            "vibechat run --model tiny.gguf "
            '"Why is the sky blue?"',
        ),
        (
            ["run", "bartowski/Llama-3.2-1B-Instruct-GGUF"],
            "'bartowski/Llama-3.2-1B-Instruct-GGUF' is a model, not a prompt: pick the "
            "model with --model, e.g. "
            'vibechat run --model bartowski/Llama-3.2-1B-Instruct-GGUF "your prompt"',
        ),
        (["run", "starter", "hi"], "'starter' is a model, not a prompt"),  # a local model's name
    ],
)
def test_a_positional_prompt_given_twice_or_naming_a_model_is_a_usage_error(args, said, user_dirs):
    out = vibechat(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"vibechat: error: {said}")
    assert out.stderr.endswith(" (see 'vibechat run --help')\n") and out.stderr.count("\n") == 1
    assert not (user_dirs["cache"] / "vibechat" / "starter").exists()  # refused before any model


def test_a_positional_prompt_does_not_mix_with_a_prompts_file():
    out = vibechat("run", "--prompts-file", "-", "hello", input='{"prompt": "hi"}\n')
    assert (
        out.returncode == 1 and json.loads(out.stdout)["error"]["exit_status"] == 1
    )  # one JSON line
    assert out.stderr == (
        "vibechat: error: --prompts-file and PROMPT do not mix: each line of the file is a prompt "
        "and a new conversation; drop PROMPT.\n"
    )


@pytest.mark.parametrize("path", [(), ("run",)])
def test_help_states_the_true_defaults_of_repeat_penalty_and_max_tokens(path):
    # issue 39, point 7: the pages said 1.0 and "until the model stops"; a completion model gets 1.1
    # and 256
    from vibechat.engine.settings.params import COMPLETION_AUTO

    page = flat(help_page(*path).stdout)
    assert "(default 1.0)" not in page and "until the model stops" not in page
    penalty = page[page.index("--repeat-penalty") : page.index("--max-tokens")]
    tokens = page[page.index("--max-tokens") : page.index("--seed")]
    assert (
        "default auto" in penalty
        and f"{COMPLETION_AUTO['repeat_penalty']:g} for a base model" in penalty
    )
    assert (
        "default auto" in tokens and f"{COMPLETION_AUTO['max_tokens']} for a base model" in tokens
    )
