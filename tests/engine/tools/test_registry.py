"""What a reply is offered and running one call (issue 28): the enabled built-ins and the MCP
servers' tools under unique names, a ToolCall run by name with the config's timeout and
result limit; arguments that do not parse and an unknown tool are results for the model. And
the tool settings, declared once in the settings table."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from vibechat.engine.settings.config import config_path, load_config
from vibechat.engine.settings.table import Config
from vibechat.engine.tools.mcp_config import McpConfigError
from vibechat.engine.tools.names import model_names, safe_name
from vibechat.engine.tools.registry import ToolRegistry
from vibechat.engine.turns.tool_calls import ToolCall

SERVER = str(Path(__file__).resolve().parents[2] / "mcp_test_server.py")


def test_names_are_safe_for_templates_and_unique():
    assert safe_name("get weather.now!") == "get_weather_now_"
    assert len(safe_name("x" * 100)) == 64
    names = model_names(
        [
            ("", "read_file"),
            ("fs", "read_file"),
            ("fs", "list"),
            ("git", "list"),
            ("a", "t" * 70),
            ("b", "t" * 70),
        ]
    )
    assert names[:4] == [
        "read_file",
        "fs_read_file",
        "fs_list",
        "git_list",
    ]  # a built-in keeps its name
    assert len(set(names)) == 6 and all(len(n) <= 64 for n in names)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    mcp = tmp_path_factory.mktemp("mcp") / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"test": {"command": sys.executable, "args": [SERVER]}}})
    )
    config = Config(
        builtin_tools=("current_time", "list_folder"), tool_timeout=1, tool_result_limit=2000
    )
    with ToolRegistry.load(config, mcp) as tools:
        yield tools


def test_a_reply_is_offered_the_enabled_builtins_and_the_servers_tools(registry):
    specs = registry.specs()
    names = [s.name for s in specs]
    assert names[:2] == ["current_time", "list_folder"] and "read_file" not in names
    assert {"echo", "add", "slow"} <= set(names)
    assert registry.find("echo").qualified == "test/echo"
    assert [(b.spec.name, b.enabled) for b in registry.builtin_statuses()] == [
        ("current_time", True),
        ("read_file", False),
        ("list_folder", True),
    ]


def test_a_call_runs_by_name_with_the_configs_timeout_and_limit(registry):
    registry.specs()
    assert registry.run(ToolCall("1", "add", '{"a": 1, "b": 2}')).text == "3"
    assert "UTC" in registry.run(ToolCall("2", "current_time", "")).text
    slow = registry.run(ToolCall("3", "slow", '{"seconds": 30}'))
    assert slow.is_error and "longer than 1 s" in slow.text  # tool_timeout
    huge = registry.run(ToolCall("4", "huge", "{}"))
    assert "the first 2,000 are shown" in huge.text  # tool_result_limit
    bad = registry.run(ToolCall("5", "add", '{"a": 1,'))
    assert bad.is_error and bad.text.startswith(
        "The call was not run: the arguments are not valid JSON"
    )
    unknown = registry.run(ToolCall("6", "rm_rf", "{}"))
    assert unknown.is_error and "no tool named 'rm_rf'" in unknown.text


def test_a_broken_mcp_json_is_one_line_before_anything_starts(tmp_path):
    bad = tmp_path / "mcp.json"
    bad.write_text("{")
    with pytest.raises(McpConfigError, match="not valid JSON"):
        ToolRegistry.load(Config(), bad)
    with ToolRegistry(
        Config()
    ) as none:  # no servers, no built-ins: nothing offered, nothing started
        assert none.specs() == () and none.statuses() == ()


def test_the_tool_settings_come_from_the_file_and_variables_checked():
    assert (Config().builtin_tools, Config().tool_folders, Config().allowed_tools) == ((), (), ())
    assert (Config().tool_timeout, Config().tool_rounds, Config().tool_result_limit) == (
        60,
        8,
        32_000,
    )
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        'builtin_tools = ["read_file", "current_time"]\ntool_folders = ["~/notes", "/srv/docs"]\n'
        'allowed_tools = ["time/*", "builtin/current_time"]\ntool_timeout = 5\ntool_rounds = 3\n'
    )
    config = load_config().config
    assert config.builtin_tools == ("read_file", "current_time")
    assert config.tool_folders == (Path.home() / "notes", Path("/srv/docs"))
    assert config.allowed_tools == ("time/*", "builtin/current_time")
    assert (config.tool_timeout, config.tool_rounds) == (5, 3)
    env = load_config(
        environ={
            "VIBECHAT_BUILTIN_TOOLS": "list_folder,current_time",
            "VIBECHAT_TOOL_FOLDERS": f"/a{os.pathsep}/b",
            "VIBECHAT_ALLOWED_TOOLS": "fs/*",
        }
    ).config
    assert env.builtin_tools == ("list_folder", "current_time") and env.tool_folders == (
        Path("/a"),
        Path("/b"),
    )
    assert env.allowed_tools == ("fs/*",)


@pytest.mark.parametrize(
    "line, words",
    [
        (
            'builtin_tools = ["shell"]',
            "unknown tool 'shell'; the built-in tools are current_time, read_file, list_folder",
        ),
        ('tool_folders = ["notes"]', "is not an absolute path"),
        ('allowed_tools = ["a b"]', "write NAME, SERVER/NAME or SERVER/*"),
        ("tool_timeout = 0", "between 1 and 3600"),
        ("tool_rounds = 100", "between 1 and 64"),
        ('builtin_tools = "read_file"', None),  # one name as a string: taken as a list of one
    ],
)
def test_a_bad_tool_setting_is_one_line_naming_it(line, words):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(line + "\n")
    loaded = load_config()
    if words is None:
        assert loaded.problem is None and loaded.config.builtin_tools == ("read_file",)
        return
    assert loaded.problem is not None and words in loaded.problem and "\n" not in loaded.problem
    assert (
        dataclasses.asdict(loaded.config)["tool_rounds"] == 8
    )  # the bad key is left out, the defaults apply


def test_the_mcp_sdk_is_imported_only_when_a_server_starts():
    """The chat's start and a run with no tools never pay for the SDK (pydantic, httpx, anyio):
    every tools module imports, and a registry with the built-ins offers and runs them, without
    it."""
    import subprocess

    code = (
        "import sys\n"
        "import vibechat.app.commands.cli, vibechat.app.commands.tools\n"
        "from vibechat.engine.tools import approval, builtin, mcp_config, mcp_servers, registry\n"
        "from vibechat.engine.settings.table import Config\n"
        "from vibechat.engine.turns.tool_calls import ToolCall\n"
        "with registry.ToolRegistry(Config(builtin_tools=('current_time',))) as tools:\n"
        "    assert [s.name for s in tools.specs()] == ['current_time']\n"
        "    assert not tools.run(ToolCall('1', 'current_time')).is_error\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
