"""mypy over the package, as configured in pyproject.toml ([tool.mypy]).

Two runs, one cache (.mypy_cache in the repository root: the first run on a machine
takes tens of seconds, later ones a few):

- plain ``mypy``, what a developer runs: engine/, app/ and themes/ as they lie on disk;
- the same files under their installed names (vibechat.engine, ...). The code imports
  its own modules as ``vibechat.*``, which setuptools maps onto app/, engine/ and
  themes/ with an import hook mypy cannot follow, so the plain run must take those
  imports as unknown (Any). Here a folder of links named like the installed package
  lets them resolve, so a wrong call from app/ into engine/ is caught too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "engine", "themes")
TIMEOUT = 600  # seconds; a cold run on a slow, busy machine takes about a minute


def run_mypy(*args: str, cwd: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_mypy_passes() -> None:
    code, output = run_mypy(cwd=ROOT)
    assert code == 0, (
        f"mypy found problems (run `python -m mypy` in the repository root):\n{output}"
    )


def test_mypy_passes_with_the_installed_module_names(tmp_path: Path) -> None:
    package = tmp_path / "vibechat"
    package.mkdir()
    for name in PACKAGES:
        try:
            (package / name).symlink_to(ROOT / name, target_is_directory=True)
        except OSError:  # Windows without the right to make links
            shutil.copytree(
                ROOT / name, package / name, ignore=shutil.ignore_patterns("__pycache__")
            )
    code, output = run_mypy(
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        "-p",
        "vibechat",
        cwd=tmp_path,
    )
    output = re.sub(r"^vibechat[/\\]", "", output, flags=re.MULTILINE)  # paths as in the repository
    assert code == 0, f"mypy found problems with vibechat.* imports resolved:\n{output}"
