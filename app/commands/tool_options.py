"""The command line's tool options (``--allow-tool``, ``--tool-choice``, ``--mcp-config``) and
the tools a chat or a run gets from them and the config: ``ToolRegistry`` (the built-ins the
config enables, the MCP servers of mcp.json) and ``ToolApproval`` (who runs without asking).
No tools configured: none offered, and nothing of the MCP SDK is loaded.

Imports inside functions are deliberate: the tool registry, MCP configuration and approval load
only when tools are asked for (start-up time: the MCP SDK is heavy)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from vibechat.engine.settings.table import Config
    from vibechat.engine.tools.approval import ToolApproval
    from vibechat.engine.tools.registry import ToolRegistry

TOOLS = "Tools"

AllowToolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-tool",
        metavar="NAME",
        help="Let the model run this tool (repeatable): NAME, SERVER/NAME, "
        "SERVER/* (all of a server's tools), builtin/NAME. 'run' never asks: any other call "
        "is denied (one stderr line), and the model is told.",
        rich_help_panel=TOOLS,
    ),
]
ToolChoiceOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-choice",
        metavar="auto|none|required",
        help="Whether the model may call tools (auto), may not (none), or must call one first "
        "(required); default: the tool_choice setting (VIBECHAT_TOOL_CHOICE, a preset's), "
        "else auto.",
        show_default=False,
        rich_help_panel=TOOLS,
    ),
]
McpConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--mcp-config",
        metavar="FILE",
        help="Read the MCP servers from FILE (the mcpServers shape) instead of mcp.json "
        "in the config folder.",
        rich_help_panel=TOOLS,
    ),
]


def tools_for(
    config: Config,
    mcp_config: Path | None,
    allow: list[str] | None = None,
    tool_choice: str = "auto",
    *,
    lenient: bool = False,
) -> tuple[ToolRegistry | None, ToolApproval]:
    """The registry (None: no tools configured, or ``tool_choice`` none) and the approval
    policy for a chat or a run.
    One-line errors: an mcp.json that cannot be used, a bad --allow-tool, a bad --tool-choice,
    --tool-choice required with no tools. ``lenient`` (the chat, which a config problem never
    stops): an mcp.json that cannot be used leaves its servers out, and the chat says why."""
    from vibechat.engine.errors import InvalidParameterError
    from vibechat.engine.settings.tool_checks import TOOL_CHOICES
    from vibechat.engine.tools.approval import ToolApproval
    from vibechat.engine.tools.mcp_config import McpConfig, McpConfigError, load_mcp_config

    if tool_choice not in TOOL_CHOICES:
        raise InvalidParameterError(
            f"--tool-choice {tool_choice!r} is not one of {', '.join(TOOL_CHOICES)}."
        )
    approval = ToolApproval(always=config.allowed_tools, allow=allow or ())
    # Switched off (the flag, tool_choice, a preset's): none offered, no server started.
    if tool_choice == "none":
        return None, approval
    problem = ""
    try:
        mcp = load_mcp_config(mcp_config)
    except McpConfigError as exc:
        if not lenient:
            raise
        mcp, problem = McpConfig(), str(exc)
    if not config.builtin_tools and not mcp.servers and not problem:
        if tool_choice == "required":
            raise InvalidParameterError(
                "--tool-choice required, but no tools are configured: name built-in tools in "
                "builtin_tools or MCP servers in mcp.json ('vibechat tools' lists them)."
            )
        # No tools: the registry (and asyncio, its servers' loop) is not even imported.
        return None, approval
    from vibechat.engine.tools.registry import ToolRegistry

    registry = ToolRegistry(config, mcp)
    registry.file_problem = problem
    return registry, approval


def chat_tools(config: Config, mcp_config: Path | None) -> tuple[ToolRegistry | None, ToolApproval]:
    """The chat's tools (``tools_for``, lenient): the model decides whether to call them and the
    user says yes to each; ``tool_choice`` none (the config, ``VIBECHAT_TOOL_CHOICE``, a preset's)
    offers none, and no MCP server starts; required applies to ``vibechat run`` only."""
    return tools_for(
        config,
        mcp_config,
        tool_choice="none" if config.tool_choice == "none" else "auto",
        lenient=True,
    )
