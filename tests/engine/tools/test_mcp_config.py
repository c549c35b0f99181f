"""mcp.json (issue 28.1): the mcpServers shape other apps write, read bounded and checked; a
file that cannot be used is one line naming it and the fix, a bad entry is left out with its
own line and the others still apply."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vibechat.engine.paths import config_dir
from vibechat.engine.tools.mcp_config import (
    MAX_SERVERS,
    HttpServer,
    McpConfigError,
    StdioServer,
    default_mcp_config_path,
    load_mcp_config,
)


def write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_the_claude_desktop_shape_reads_stdio_http_and_disabled_servers(tmp_path):
    path = write(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "time": {
                    "command": "uvx",
                    "args": ["mcp-server-time", "--local-timezone=UTC"],
                    "env": {"TZ": "UTC"},
                    "autoApprove": [],
                    "type": "stdio",
                },
                "docs": {
                    "url": "https://example.org/mcp",
                    "headers": {"Authorization": "Bearer k"},
                },
                "old": {"command": "old-server", "disabled": True},
            }
        },
    )
    config = load_mcp_config(path)
    assert config.path == path and config.problems == ()
    assert config.servers == (
        StdioServer("time", "uvx", ("mcp-server-time", "--local-timezone=UTC"), (("TZ", "UTC"),)),
        HttpServer("docs", "https://example.org/mcp", (("Authorization", "Bearer k"),)),
    )
    assert config.disabled == ("old",)
    assert config.servers[1].where == "https://example.org/mcp"


def test_the_default_file_is_in_the_config_folder_and_may_be_missing():
    assert default_mcp_config_path() == config_dir() / "mcp.json"
    assert load_mcp_config().servers == ()  # no file: no servers
    config_dir().mkdir(parents=True, exist_ok=True)
    write(config_dir() / "mcp.json", {"mcpServers": {"a": {"command": "x"}}})
    assert [s.name for s in load_mcp_config().servers] == ["a"]


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not valid JSON"),
        ('{"mcpServers": {"a": {"command": "x"},}}', "a trailing comma?"),
        ('["a"]', "put the servers in an mcpServers object"),
        ('{"mcpServers": ["a"]}', "put the servers in an mcpServers object"),
        (b"\xff\xfe{}", "is not UTF-8"),
    ],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_it_and_the_fix(tmp_path, content, words):
    path = tmp_path / "mcp.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(McpConfigError) as info:
        load_mcp_config(path)
    message = str(info.value)
    assert str(path) in message and words in message and "\n" not in message


def test_a_missing_given_file_too_many_servers_and_a_huge_file_are_refused(tmp_path):
    with pytest.raises(McpConfigError, match="no such file"):
        load_mcp_config(tmp_path / "nope.json")
    many = {"mcpServers": {f"s{i}": {"command": "x"} for i in range(MAX_SERVERS + 1)}}
    with pytest.raises(McpConfigError, match=f"at most {MAX_SERVERS}"):
        load_mcp_config(write(tmp_path / "many.json", many))
    big = tmp_path / "big.json"
    big.write_text('{"mcpServers": {}, "pad": "' + "x" * (2 << 20) + '"}')
    with pytest.raises(McpConfigError, match="keep it under"):
        load_mcp_config(big)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_dev_zero_as_the_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "mcp.json"
    os.mkfifo(fifo)  # no writer: a plain open would block for ever
    with pytest.raises(McpConfigError, match="named pipe"):
        load_mcp_config(fifo)
    with pytest.raises(McpConfigError, match="character device"):
        load_mcp_config("/dev/zero")


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"args": ["x"]}, 'needs "command"'),
        ({"command": ""}, '"command" must be a non-empty string'),
        ({"command": "x", "args": "a b"}, '"args" must be a list of strings'),
        ({"command": "x", "env": {"PORT": 8080}}, "must be a string (quote it)"),
        ({"command": "x", "env": {"BAD NAME": "1"}}, "bad name"),
        ({"command": "x", "url": "http://h/mcp"}, "keep one"),
        ({"url": "ftp://h/mcp"}, "http:// or https://"),
        ({"url": "http://h/mcp", "type": "sse"}, "SSE transport is not supported"),
        ({"url": "http://h/mcp", "headers": {"X": "a\nb"}}, "control character"),
        ("just text", "must be an object"),
    ],
)
def test_a_bad_entry_is_left_out_with_a_line_naming_the_file_the_entry_and_the_fix(
    tmp_path, entry, words
):
    path = write(tmp_path / "mcp.json", {"mcpServers": {"good": {"command": "ok"}, "bad": entry}})
    config = load_mcp_config(path)
    assert [s.name for s in config.servers] == ["good"]  # the others still apply
    [(name, line)] = config.problems
    assert (
        name == "bad"
        and line.startswith(f"{path}: server 'bad': ")
        and words in line
        and "\n" not in line
    )


def test_a_server_name_must_be_usable_as_a_tool_prefix(tmp_path):
    path = write(tmp_path / "mcp.json", {"mcpServers": {"my server\x1b[31m": {"command": "x"}}})
    [(name, line)] = load_mcp_config(path).problems
    assert "\x1b" not in line and "rename it" in line
