"""Who says yes (issue 28.3, the policy): always-allowed tools (the config), tools allowed for
this conversation, ``--allow-tool`` patterns (NAME, SERVER/NAME, SERVER/*, builtin/NAME); and
"always allow" saved in the config file, the rest of the file kept as written."""

from __future__ import annotations

import pytest

from vibechat.engine.errors import ConfigError, InvalidParameterError
from vibechat.engine.settings.config import config_path, load_config
from vibechat.engine.tools.approval import ToolApproval, matches
from vibechat.engine.turns.tool_calls import ToolSpec

NOW = ToolSpec("get_time", server="time", tool="get_time")
CONVERT = ToolSpec("convert_time", server="time", tool="convert_time")
PREFIXED = ToolSpec("fs_read_file", server="fs", tool="read_file")
CLOCK = ToolSpec("current_time", tool="current_time")


@pytest.mark.parametrize(
    "pattern, spec, expected",
    [
        ("time/get_time", NOW, True),
        ("time/get_time", CONVERT, False),
        ("time/*", NOW, True),
        ("time/*", CONVERT, True),
        ("fs/*", NOW, False),
        ("get_time", NOW, True),
        ("read_file", PREFIXED, True),
        ("fs_read_file", PREFIXED, True),
        ("builtin/current_time", CLOCK, True),
        ("builtin/*", CLOCK, True),
        ("current_time", CLOCK, True),
        ("builtin/current_time", NOW, False),
        ("time/current_time", CLOCK, False),
    ],
)
def test_patterns(pattern, spec, expected):
    assert matches(pattern, spec) is expected


def test_nothing_runs_unless_allowed_always_for_the_conversation_or_by_allow_tool():
    policy = ToolApproval()
    assert not policy.allowed(NOW) and policy.why(NOW) == ""
    policy.allow_for_conversation(NOW)
    assert policy.allowed(NOW) and not policy.allowed(CONVERT)
    assert policy.why(NOW) == "allowed for this conversation"
    policy.new_conversation()
    assert not policy.allowed(NOW)
    run = ToolApproval(always=["builtin/current_time"], allow=["time/*"])
    assert (
        run.allowed(NOW)
        and run.allowed(CONVERT)
        and run.allowed(CLOCK)
        and not run.allowed(PREFIXED)
    )
    assert (
        run.why(CLOCK) == "always allowed (allowed_tools)"
        and run.why(NOW) == "allowed by --allow-tool"
    )


def test_a_bad_allow_tool_pattern_is_refused_in_one_line():
    with pytest.raises(InvalidParameterError) as info:
        ToolApproval(allow=["time/ *"])
    assert str(info.value) == (
        "--allow-tool 'time/ *' is not a tool; write NAME, SERVER/NAME or SERVER/* "
        "(builtin/NAME for a built-in tool)"
    )


def test_always_allow_is_saved_in_the_config_file_keeping_the_rest():
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('# my settings\nthreads = 2  # two cores\nallowed_tools = ["fs/*"]\n')
    policy = ToolApproval(always=load_config().config.allowed_tools)
    assert not policy.allowed(NOW)
    assert policy.always_allow(NOW) == path
    assert policy.allowed(NOW) and not policy.allowed(CONVERT)
    text = path.read_text()
    assert "# my settings\nthreads = 2  # two cores\n" in text
    assert load_config().config.allowed_tools == ("fs/*", "time/get_time")
    policy.always_allow(NOW)  # twice: once in the file
    assert load_config().config.allowed_tools == ("fs/*", "time/get_time")
    # A fresh policy (the next chat) allows it from the file.
    assert ToolApproval(always=load_config().config.allowed_tools).allowed(NOW)


def test_always_allow_never_touches_a_broken_config_file():
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("threads = [\n")
    with pytest.raises(ConfigError):
        ToolApproval().always_allow(NOW)
    assert path.read_text() == "threads = [\n"
