"""The built-in tools (issue 28.4): off until the config names them; read_file and
list_folder read only inside the folders the user named (``..`` refused, symlinks followed
and checked), and a FIFO, a device or a binary file is a one-line result, never a hang."""

from __future__ import annotations

import os
import re

import pytest

from vibechat.engine.tools.builtin import MAX_READ_BYTES, builtin_specs, run_builtin


@pytest.fixture
def notes(tmp_path):
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "todo.txt").write_text("buy milk\n\x1b[2Jcleared? [bold]no[/]\n")
    (root / "sub" / "deep.md").write_text("# deep\n")
    (tmp_path / "secret.txt").write_text("the key")
    return root


def test_only_the_enabled_tools_are_offered():
    assert builtin_specs(()) == ()
    assert [s.name for s in builtin_specs(("read_file", "current_time"))] == [
        "current_time",
        "read_file",
    ]
    assert [s.qualified for s in builtin_specs(("list_folder",))] == ["builtin/list_folder"]


def test_the_time_has_the_date_and_the_local_time_zone():
    text = run_builtin("current_time", {}, ()).text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)
    assert re.search(r"UTC[+-]\d\d:\d\d", text) and "ISO 8601" in text


def test_read_file_reads_a_text_file_in_an_allowed_folder_sanitised(notes):
    for path in ("todo.txt", str(notes / "todo.txt")):  # relative to the first folder, or absolute
        result = run_builtin("read_file", {"path": path}, [notes])
        assert not result.is_error
        assert result.text == "buy milk\ncleared? [bold]no[/]\n"
    assert run_builtin("read_file", {"path": "sub/deep.md"}, [notes]).text == "# deep\n"


@pytest.mark.parametrize(
    "path, words",
    [
        ("../secret.txt", "'..' part"),
        ("sub/../../secret.txt", "'..' part"),
        ("{tmp}/secret.txt", "outside the folders"),
        ("/etc/passwd", "outside the folders"),
        ("missing.txt", "no file or folder"),
        ("", "Give a path"),
    ],
)
def test_read_file_refuses_what_is_outside_the_folders(notes, tmp_path, path, words):
    result = run_builtin("read_file", {"path": path.format(tmp=tmp_path)}, [notes])
    assert result.is_error and words in result.text and "\n" not in result.text
    assert "the key" not in result.text


def test_a_symlink_is_followed_and_checked(notes, tmp_path):
    (notes / "out").symlink_to(tmp_path / "secret.txt")
    (notes / "in").symlink_to(notes / "todo.txt")
    (notes / "zero").symlink_to("/dev/zero")
    out = run_builtin("read_file", {"path": "out"}, [notes])
    assert out.is_error and "outside the folders" in out.text and "the key" not in out.text
    assert run_builtin("read_file", {"path": "in"}, [notes]).text.startswith("buy milk")
    zero = run_builtin("read_file", {"path": "zero"}, [notes])
    assert zero.is_error and "outside the folders" in zero.text


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_a_device_a_binary_or_huge_file_is_a_one_line_result(notes):
    os.mkfifo(notes / "pipe")  # no writer: a plain open would block for ever
    (notes / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (notes / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (notes / "big.txt").write_text("x" * (MAX_READ_BYTES + 1))
    for name, words in (
        ("pipe", "named pipe"),
        ("blob.bin", "binary"),
        ("latin.txt", "not UTF-8"),
        ("big.txt", "too large"),
        ("sub", "a directory"),
    ):
        result = run_builtin("read_file", {"path": name}, [notes])
        assert result.is_error and words in result.text and "\n" not in result.text, name
    dev = run_builtin("read_file", {"path": "/dev/zero"}, ["/dev"])
    assert dev.is_error and "character device" in dev.text


def test_list_folder_lists_entries_confined_and_names_sanitised(notes, tmp_path):
    (notes / "odd\x1b[31mname").write_text("")
    result = run_builtin("list_folder", {"path": "."}, [notes])
    assert not result.is_error
    lines = result.text.splitlines()
    assert "sub/" in lines and any(line.startswith("todo.txt (") for line in lines)
    assert "\x1b" not in result.text and any(line.startswith("oddname") for line in lines)
    assert (
        run_builtin("list_folder", {"path": ""}, [notes]).text == f"The allowed folders:\n{notes}/"
    )
    outside = run_builtin("list_folder", {"path": str(tmp_path)}, [notes])
    assert outside.is_error and "outside the folders" in outside.text


def test_no_folder_named_reads_nothing(notes):
    for tool in ("read_file", "list_folder"):
        result = run_builtin(tool, {"path": str(notes / "todo.txt")}, [])
        assert result.is_error and "tool_folders" in result.text
    assert run_builtin("read_file", {"path": 5}, [notes]).is_error
