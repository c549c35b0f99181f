"""The words agree with the program (issue 46, point 7): every ``vibechat ...`` command that
README.md and docs/*.md show names a real command with options it has, and the exit-status
tables say what the program really does for each row a test can trigger without a model.

The commands are read from the documents themselves (code blocks, and inline code that starts
with ``vibechat``) and walked through the real command tree (``typer.main.get_command``), as
click would: a word where a command goes must be one (``models show``), an option must be the
command's own or, before the command, its group's. Placeholders (``MODEL``, ``…``) are
arguments; ``[--json]`` is an option shown as optional.
"""

from __future__ import annotations

import os
import pty
import re
import shlex
import subprocess
from typing import Any

import pytest

from conftest import REPO, VIBECHAT_BIN

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND_START = re.compile(r"(?:^|[|;&]\s*|^\$\s+)vibechat(?:\s|$)")
SHELL_ENDS = {"|", "||", "&&", ";", "<", ">", ">>", "2>", "2>&1"}
ELLIPSES = {"…", "...", '"…"', '"..."'}


def documented_commands() -> list[tuple[str, str]]:
    """``(document, command line)`` for every ``vibechat`` command the documents show, each once."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.DOTALL):
            found += [
                (doc.name, line.strip())
                for line in block.splitlines()
                if COMMAND_START.search(line.strip())
            ]
        prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        found += [
            (doc.name, span)
            for span in re.findall(r"`([^`\n]+)`", prose)
            if COMMAND_START.search(span)
        ]
    return list(dict.fromkeys(found))


def vibechat_words(line: str) -> list[str]:
    """The words of ``line``'s ``vibechat`` command: from ``vibechat`` (after a pipe or a
    ``$`` prompt) to the end, a pipe or a redirection; a ``# comment`` left out."""
    words = shlex.split(line, comments=True)
    start = words.index("vibechat")
    out: list[str] = []
    for word in words[start + 1 :]:
        if word in SHELL_ENDS:
            break
        out.append(word)
    return out


def _is_group(command: Any) -> bool:
    return hasattr(command, "commands")


def _option(command: Any, name: str) -> Any | None:
    """``command``'s option spelt ``name`` (either spelling of a ``--x/--no-x`` flag), or None."""
    for param in command.params:
        if getattr(param, "param_type_name", None) == "option" and name in (
            *param.opts,
            *param.secondary_opts,
        ):
            return param
    return None


def check_command(root: Any, words: list[str]) -> list[str]:
    """What is wrong with ``vibechat WORDS`` by the real command tree: a command that does not
    exist, an option the command does not have, a word given to a command that takes none."""
    command, path, problems = root, ["vibechat"], []
    given = iter(words)
    for raw in given:
        word = raw.strip("[]") if raw.startswith("[") or raw.endswith("]") else raw
        if word in ELLIPSES or not word:
            continue
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            if name in ("-h", "--help"):
                continue
            option = _option(command, name)
            if option is None:
                problems.append(f"'{' '.join(path)}' has no option {name}")
            elif not option.is_flag and not option.count and "=" not in word:
                next(given, None)  # its value
            continue
        if _is_group(command):
            sub = command.commands.get(word)
            if sub is None:
                problems.append(f"'{' '.join(path)}' has no command {word!r}")
                return problems
            command, path = sub, [*path, word]
            continue
        if not any(getattr(p, "param_type_name", None) == "argument" for p in command.params):
            problems.append(f"'{' '.join(path)}' takes no argument, yet is given {word!r}")
    return problems


@pytest.fixture(scope="module")
def cli_tree() -> Any:
    from typer.main import get_command

    from vibechat.app.commands.cli import cli

    return get_command(cli)


def test_the_documents_show_commands():
    """The reading itself: the documents' commands are found, ``models show`` among them."""
    commands = [line for _, line in documented_commands()]
    assert len(commands) > 50
    assert any(line.startswith("vibechat models show") for line in commands)
    assert vibechat_words('echo "x" | vibechat run --json -n 32 > out.json   # a comment') == [
        "run",
        "--json",
        "-n",
        "32",
    ]


@pytest.mark.parametrize(("doc", "line"), documented_commands())
def test_every_documented_command_exists_with_its_options(cli_tree, doc: str, line: str):
    assert check_command(cli_tree, vibechat_words(line)) == [], f"{doc}: {line}"


def test_the_checker_finds_what_is_wrong(cli_tree):
    """The check fails where it should: an unknown command, an unknown option, a word given
    to a command that takes none; an option before the command is its group's."""
    assert check_command(cli_tree, ["models", "shwo", "starter"]) == [
        "'vibechat models' has no command 'shwo'"
    ]
    assert check_command(cli_tree, ["run", "--temprature", "1", "-p", "hi"]) == [
        "'vibechat run' has no option --temprature"
    ]
    assert check_command(cli_tree, ["config", "path", "extra"]) == [
        "'vibechat config path' takes no argument, yet is given 'extra'"
    ]
    assert check_command(cli_tree, ["-t", "0.2", "config", "show", "[--json]"]) == []
    assert (
        check_command(cli_tree, ["history", "export", "12", "[-o", "c12.json]", "[--force]"]) == []
    )


def help_pages(command: Any, path: tuple[str, ...] = ("vibechat",)) -> list[tuple[str, str]]:
    """``(command path, text)`` for every help text of the command tree: each command's help
    and epilog and each parameter's help, as ``--help`` shows them."""
    texts = [
        command.help or "",
        command.epilog or "",
        *(getattr(p, "help", None) or "" for p in command.params),
    ]
    found = [(" ".join(path), text) for text in texts if text]
    for name, sub in getattr(command, "commands", {}).items():
        found += help_pages(sub, (*path, name))
    return found


def test_the_readme_and_the_help_pages_name_real_commands(cli_tree):
    """README: "`vibechat list`, `pull`, `show` and `rm` are the `vibechat models` commands";
    ``--help``: "list (ls), pull, show and rm are the 'models' commands ...". Each name is a
    ``models`` command (``models show`` beside ``models list``) and a shortcut of its own; and
    every command a help page quotes ('vibechat history list') exists with its options."""
    quoted = [
        (where, cmd)
        for where, text in help_pages(cli_tree)
        for cmd in re.findall(r"'(vibechat [^']+)'", text)
    ]
    assert len(quoted) > 10
    for where, cmd in quoted:
        assert check_command(cli_tree, vibechat_words(cmd)) == [], f"'{where} --help' names {cmd!r}"
    readme = " ".join((REPO / "README.md").read_text().split())
    said = re.search(
        r"((?:`[^`]+`(?:, | and ))+`[^`]+`) are the `vibechat models` commands", readme
    )
    assert said, "the README no longer names the ollama-style shortcuts"
    names = [span.removeprefix("vibechat ") for span in re.findall(r"`([^`]+)`", said.group(1))]
    helped = re.search(r"shortcuts: (.*?) are the 'models' commands", cli_tree.epilog or "")
    assert helped, cli_tree.epilog
    assert [w for w in re.findall(r"\w+", helped.group(1)) if w not in ("and", "ls")] == names
    models = cli_tree.commands["models"]
    for name in names:
        assert name in models.commands, f"'vibechat models {name}' is no command"
        short, full = cli_tree.commands[name], models.commands[name]
        assert (short.help, [p.opts for p in short.params]) == (
            full.help,
            [p.opts for p in full.params],
        ), name


def test_models_show_is_the_command_and_info_and_show_answer_the_same(user_dirs):
    """``models show`` beside ``models list``: the command the README's shortcuts name;
    ``models info`` (its old name) and ``vibechat show`` answer the same."""

    def vibechat(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(VIBECHAT_BIN), *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    shown = vibechat("models", "show", "starter", "--json")
    assert shown.returncode == 0, shown.stderr
    assert vibechat("models", "info", "starter", "--json").stdout == shown.stdout
    assert vibechat("show", "starter", "--json").stdout == shown.stdout
    page = vibechat("models", "--help").stdout
    assert re.search(r"│ show\s", page) and not re.search(r"│ info\s", page)


# ------------------------------------------------------------------ exit statuses
# What triggers each row of an exit-status table without loading a model: the words a row must
# contain, and the command lines (after ``vibechat``) that must end with that row's status.
TRIGGERS: dict[str, list[list[str]]] = {
    "a value out of range": [["run", "-p", "hi", "--temperature", "9"]],
    "an unknown model": [["run", "-p", "hi", "--model", "no-such-model"]],
    "a missing or bad model file": [["run", "-p", "hi", "--model", "/nonexistent/x.gguf"]],
    "a server that refuses or cannot be reached": [
        ["run", "-p", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"]
    ],
    "an unknown option": [["run", "--bogus"], ["--no-such-flag"], ["models", "list", "--jsn"]],
    "a missing argument": [
        ["run"],
        ["run", "-p", "   "],
        ["pull"],
        ["models", "show"],
        ["history", "show"],
    ],
    "`-n abc`": [["run", "-n", "abc", "-p", "hi"]],
    "`--ctx abc`": [["run", "--ctx", "abc", "-p", "hi"]],
    "success": [["models", "show", "starter"], ["config", "path"]],
}


def exit_tables() -> list[tuple[str, dict[int, str]]]:
    """``(document, {status: meaning})`` for each ``| status | means |`` table of README.md and
    docs/USAGE.md."""
    tables = []
    for doc in (REPO / "README.md", REPO / "docs" / "USAGE.md"):
        for table in re.findall(
            r"\| status \| means \|\n\s*\| --- \| --- \|\n((?:\s*\|.*\|\n)+)", doc.read_text()
        ):
            rows = [re.match(r"\s*\| (\d+) \| (.*) \|$", line) for line in table.splitlines()]
            tables.append((doc.name, {int(m.group(1)): m.group(2) for m in rows if m}))
    return tables


def test_both_documents_have_an_exit_status_table():
    assert [doc for doc, _ in exit_tables()] == ["README.md", "USAGE.md"]


@pytest.mark.parametrize("words", list(TRIGGERS))
def test_the_exit_status_tables_say_what_the_program_does(user_dirs, words: str):
    """Each row's cheap triggers, run for real: the status is the row's, in every table that
    names the trigger; a failure is one line on stderr, without a traceback."""
    statuses = {
        doc: next((s for s, means in table.items() if words in means), None)
        for doc, table in exit_tables()
    }
    assert statuses["README.md"] is not None, (
        f"the README's exit-status table no longer says {words!r}"
    )
    for args in TRIGGERS[words]:
        out = subprocess.run(
            [str(VIBECHAT_BIN), *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        for doc, status in statuses.items():
            if status is not None:
                assert out.returncode == status, (doc, args, out.returncode, out.stderr)
        if out.returncode:
            assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, (args, out.stderr)


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_run_with_no_prompt_on_a_terminal_is_a_usage_error_naming_the_fix(user_dirs):
    """``vibechat run`` typed at a terminal, with no prompt: exit 2, as a missing argument, in
    one line that says how to give one; nothing is loaded."""
    leader, follower = pty.openpty()
    try:
        out = subprocess.run(
            [str(VIBECHAT_BIN), "run"], stdin=follower, capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("vibechat: error: no prompt: ")
    assert 'vibechat run "' in out.stderr and "--prompt TEXT" in out.stderr
    assert not (
        user_dirs["cache"] / "vibechat" / "starter"
    ).exists()  # no model was unpacked or loaded
