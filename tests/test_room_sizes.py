"""No source file in the engine's split rooms grows past ~600 lines (issue 26, point 1):
a file that long holds several things, and each of them wants a module that says what it
is. Read from the sources, nothing imported.

ROOMS lists the rooms split so far; a room joins it once its big files are split."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("engine/remote", "engine/chat")
MAX_LINES = 600


@pytest.mark.parametrize("room", ROOMS)
def test_no_source_file_in_the_room_is_over_600_lines(room):
    folder = ROOT / room
    files = sorted(folder.glob("*.py"))
    assert files, f"{room} has no Python files: has it moved?"
    too_long = {str(p.relative_to(ROOT)): n for p in files
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not too_long, f"split these by meaning (lines): {too_long}"
