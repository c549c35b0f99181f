"""No source file of the package grows past ~600 lines (issue 26, point 1): a file that long
holds several things, and each of them wants a module that says what it is. Read from the
sources, nothing imported; every folder of engine/ and app/ is covered, so a new room is too.
The lines counted are formatted ones: `python3 dev.py check` runs `ruff format --check` first
(100 columns), so a file cannot stay under the bound by packing its lines."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600
FOLDERS = sorted(
    {
        p.parent.relative_to(ROOT).as_posix()
        for top in ("engine", "app", "themes")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
)


def test_every_room_is_covered():
    assert {
        "engine",
        "engine/chat",
        "engine/llama",
        "engine/models",
        "engine/remote",
        "engine/settings",
        "engine/turns",
        "app",
        "app/tui",
    } <= set(FOLDERS)


@pytest.mark.parametrize("room", FOLDERS)
def test_no_source_file_in_the_room_is_over_600_lines(room):
    files = sorted((ROOT / room).glob("*.py"))
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"split these by meaning (lines): {too_long}"
