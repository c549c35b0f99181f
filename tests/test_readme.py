"""Every command README.md shows is run here, for real, as a newcomer would type it.

The commands are read from the README itself: each line of a ```sh block, and each inline
code span that starts like a command (``vibechat ...``, ``python3 ...``, ``source ...``).
Each must have a runner below, so a command added to the README without a test fails
``test_every_readme_command_is_run_by_a_test``. They run in a shell, with the test's own
user directories (conftest), the starter model installed, ``.venv/bin`` on the PATH, and,
for the Hub, the fake Hub on 127.0.0.1 serving the starter's bytes under the README's
repository name (so the pulled model is a real GGUF that really loads).

``python3 dev.py test`` is the suite itself: it is checked to be what CI runs (``.ci/run``),
not run from inside itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO, VIBECHAT_BIN

README = REPO / "README.md"
PULL_REF = "lmstudio-community/gemma-3-1b-it-GGUF"
WAIT_S = 180  # a bound on each command, never a timing assertion
SHELL_START = re.compile(r"^(vibechat|python3|source|rm|echo)\b")
# Inline spans that name a command in prose ("`vibechat run` streams ..."), not commands to type.
NAMES = {"vibechat", "vibechat run", "vibechat models", "rm"}


def readme_commands() -> list[str]:
    """The README's commands, in order, each once."""
    text = README.read_text()
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        found += [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    found += [
        span
        for span in re.findall(r"`([^`\n]+)`", prose)
        if SHELL_START.match(span) and span not in NAMES
    ]
    return list(dict.fromkeys(found))


def shell(
    command: str, env: dict[str, str], cwd: Path = REPO, stdin: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


@pytest.fixture
def env(starter_installed: Path) -> dict[str, str]:
    """The test's environment (user dirs in tmp_path), ``vibechat`` on the PATH."""
    out = dict(os.environ)
    out["PATH"] = f"{VIBECHAT_BIN.parent}{os.pathsep}{out.get('PATH', '')}"
    for name in [k for k in out if k.startswith("PYTEST") or k in ("COLUMNS", "LINES")]:
        del out[name]
    return out


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr
    return result


# ------------------------------------------------------------------- the runners
def run_dev_chat(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """``python3 dev.py chat``: set-up is done (the suite runs in the same .venv), so it opens
    the chat on the starter; the welcome says what the starter is; Ctrl+Q quits with 0."""
    from test_terminal_restore import Terminal

    term = Terminal([], env, program=[sys.executable, str(REPO / "dev.py"), "chat"], cwd=REPO)
    try:
        term.wait_for("This is the starter", "the chat to open on the starter model")
        assert term.quit() == 0
    finally:
        term.close()


def run_dev_test(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """The suite itself: CI's script runs exactly this command."""
    lines = [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[-1] == command


def run_dev_quick(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """The inner loop: every test but the real model's (tests/test_dev.py checks the marking)."""
    from test_dev import load_dev

    dev = load_dev()
    assert dev.pytest_args(command.split()[3:]) == ["-m", "not model", *dev.parallel_args()]


def run_activate(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    plain = {k: v for k, v in env.items() if k != "PATH"} | {"PATH": "/usr/bin:/bin"}
    out = ok(shell(f"{command} && command -v vibechat", plain))
    assert Path(out.stdout.strip()).resolve() == VIBECHAT_BIN.resolve()


def run_pull_then_chat(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """``models pull`` from the (fake) Hub, then the chat on the pulled model."""
    from test_terminal_restore import Terminal

    hub = request.getfixturevalue("fake_hub")
    starter = request.getfixturevalue("starter_installed")
    hub.add_repo(PULL_REF, {"gemma-3-1b-it-Q4_K_M.gguf": starter.read_bytes()})
    env = env | {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
    if command.startswith("vibechat models pull"):
        out = ok(shell(command, env))
        assert PULL_REF in out.stdout
        listed = json.loads(ok(shell("vibechat models list --json", env)).stdout)
        assert any(m["source"] == "vibechat" and PULL_REF in m["name"] for m in listed)
        return
    ok(shell(f"vibechat models pull {PULL_REF}", env))
    args = command.split()[1:]
    term = Terminal(args, env)
    try:
        term.wait_for("Enter sends", "the pulled model to load")
        assert "could not be loaded" not in term.text()
        assert term.quit() == 0
    finally:
        term.close()


def run_one_shot(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """A ``vibechat run`` example on the starter: it ends by itself, exit 0, a reply."""
    out = ok(shell(command, env))
    assert out.stdout.strip()
    if "--json " in command + " ":
        result = json.loads(out.stdout)
        assert result["text"].strip() and result["finish_reason"] in ("stop", "length")
        assert result["prompt_format"] == "completion"
    if "--json-schema" in command:
        json.loads(out.stdout)  # the reply itself is JSON


def run_plain(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """A command that answers at once (no model): exit 0, something printed, no traceback."""
    out = ok(shell(command, env | {"EDITOR": "true", "VISUAL": "true"}))
    assert out.stdout.strip() or command.startswith("vibechat config edit")


def run_uninstall(command: str, env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """With the platform's default folders (a fresh HOME, no XDG or VIBECHAT_* overrides),
    everything ``config path --all`` lists lies under what the README's ``rm -rf`` deletes,
    and after it none of it is left."""
    home = request.getfixturevalue("tmp_path") / "fresh-home"
    home.mkdir()
    plain = {k: v for k, v in env.items() if not k.startswith(("XDG_", "VIBECHAT_"))} | {
        "HOME": str(home)
    }
    listed = ok(shell("vibechat config path --all", plain)).stdout.splitlines()
    folders = [Path(line.split("\t")[1]) for line in listed]
    removed = [Path(p.replace("~", str(home))) for p in command.split()[2:]]
    for folder in folders:
        assert any(folder == r or r in folder.parents for r in removed), (
            f"{folder} is left by the uninstall"
        )
        target = folder if folder.suffix != ".toml" else folder.parent
        target.mkdir(parents=True, exist_ok=True)
        (target / "something").write_text("x")
    ok(shell(command, plain))
    assert not any(p.exists() for p in removed)


RUNNERS: dict[str, Callable[[str, dict[str, str], pytest.FixtureRequest], None]] = {
    "python3 dev.py chat": run_dev_chat,
    "python3 dev.py test": run_dev_test,
    "python3 dev.py test --quick": run_dev_quick,
    "source .venv/bin/activate": run_activate,
    f"vibechat models pull {PULL_REF}": run_pull_then_chat,
    f"vibechat --model {PULL_REF}": run_pull_then_chat,
    'vibechat run "Write a haiku about tmux"': run_one_shot,
    'echo "The quick brown fox" | vibechat run --json -n 32': run_one_shot,
    """vibechat run "Is water wet?" --json-schema '{"type": "boolean"}'""": run_one_shot,
    "vibechat models list": run_plain,
    "vibechat list": run_plain,
    "vibechat config path --all": run_plain,
    "vibechat config show": run_plain,
    "vibechat config edit": run_plain,
    "vibechat --version": run_plain,
    "rm -rf ~/.config/vibechat ~/.local/share/vibechat ~/.cache/vibechat "
    "~/.local/state/vibechat": run_uninstall,
}


def test_every_readme_command_is_run_by_a_test():
    missing = [c for c in readme_commands() if c not in RUNNERS]
    assert not missing, f"README commands without a runner in tests/test_readme.py: {missing}"
    stale = [c for c in RUNNERS if c not in readme_commands()]
    assert not stale, f"runners for commands the README no longer shows: {stale}"


def test_the_readme_is_for_a_newcomer():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert text.startswith("# vibechat\n\n```sh\npython3 dev.py chat\npython3 dev.py test\n```\n")
    image = re.search(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text)
    assert image and (REPO / image.group(1)).is_file()
    svg = (REPO / image.group(1)).read_text()
    assert svg.startswith("<svg") and "vibechat" in svg  # made by the app's screenshot action
    for link in re.findall(r"\]\((docs/[^)#]+|CHANGELOG\.md)", text):
        assert (REPO / link).is_file(), link


@pytest.mark.model
@pytest.mark.skipif(
    os.name != "posix" or shutil.which("bash") is None, reason="a POSIX shell and pty"
)
@pytest.mark.parametrize("command", list(RUNNERS))
def test_readme_command(command: str, env: dict[str, str], request: pytest.FixtureRequest):
    RUNNERS[command](command, env, request)
