"""``vibechat tools``: the tools a model may be offered. Each MCP server of ``mcp.json`` (or
``--mcp-config FILE``), started to list its tools: up, or the one line that says why not;
and vibechat's built-in tools, each enabled or not by the config's ``builtin_tools``.

Everything a server sends (names, descriptions) is outside text: printed sanitised and never
as markup (clitools). The servers are stopped before the command returns.

Imports inside functions are deliberate: the tool registry and MCP configuration load only when
a ``tools`` command runs (start-up time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .clitools import echo, echo_lines, guard, safe_json, terminal_width

McpConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--mcp-config",
        metavar="FILE",
        help="Read the MCP servers from FILE instead of mcp.json in the config folder.",
        dir_okay=False,
    ),
]
# A description's first line, cut to this in the text listing.
MAX_DESCRIPTION = 160


def tools(
    mcp_config: McpConfigOpt = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of text.")
    ] = False,
) -> None:
    """List the MCP servers (started to list their tools: each is up, or says why not) and the
    built-in tools (enabled or not)."""
    guard(lambda: _tools(mcp_config, json_output))


def _tools(mcp_config: Path | None, json_output: bool) -> None:
    from vibechat.engine.tools.mcp_config import default_mcp_config_path
    from vibechat.engine.tools.registry import ToolRegistry

    from ..appconfig import load_app_config
    from ..columns import hanging, rows

    loaded = load_app_config()
    if loaded.problem and not json_output:
        echo(f"vibechat: note: {loaded.problem}", err=True)
    config = loaded.config
    with ToolRegistry.load(config, mcp_config) as registry:
        # Start every server (bounded): its tools, or why not.
        registry.specs()
        statuses = registry.statuses()
        builtins = registry.builtin_statuses()
    source = registry.servers.config.path
    if json_output:
        typer.echo(
            safe_json(
                {
                    "mcp_config": str(source) if source is not None else None,
                    "servers": [
                        {
                            "name": s.name,
                            "transport": s.transport or None,
                            "where": s.where or None,
                            "state": s.state,
                            "reason": s.reason or None,
                            "tools": [_tool_json(t) for t in s.tools],
                        }
                        for s in statuses
                    ],
                    "builtin": [{**_tool_json(b.spec), "enabled": b.enabled} for b in builtins],
                    "tool_folders": [str(p) for p in config.tool_folders],
                    "allowed_tools": list(config.allowed_tools),
                },
                indent=2,
            )
        )
        return
    width = terminal_width()
    where = source if source is not None else f"{default_mcp_config_path()} (no such file)"
    echo_lines(hanging("MCP servers (", f"{where}):", width))
    if not statuses:
        echo_lines(
            hanging("  ", 'none configured: add them to mcp.json (docs/USAGE.md, "Tools")', width)
        )
    for status in statuses:
        kind = f" ({status.transport}: {status.where})" if status.transport else ""
        line = f"{kind}: {status.state}"
        if status.state == "started":
            line += f", {len(status.tools)} tool{'s' if len(status.tools) != 1 else ''}"
        echo_lines(
            hanging(
                f"  {status.name}", line + (f" - {status.reason}" if status.reason else ""), width
            )
        )
        echo_lines(
            rows(
                [(f"    {spec.name}", _first_line(spec.description)) for spec in status.tools],
                width,
            )
        )
    echo("Built-in tools (builtin_tools in the config):")
    names = max(len(b.spec.name) for b in builtins)
    echo_lines(
        rows(
            [
                (
                    f"  {b.spec.name.ljust(names)}  {'enabled' if b.enabled else 'off    '}",
                    _first_line(b.spec.description),
                )
                for b in builtins
            ],
            width,
        )
    )
    if any(b.enabled and b.spec.name != "current_time" for b in builtins):
        folders = ", ".join(str(p) for p in config.tool_folders) or "none (set tool_folders)"
        echo_lines(hanging("  folders they may read: ", folders, width))
    always = ", ".join(config.allowed_tools) or "none"
    echo_lines(
        hanging(
            "Always allowed (allowed_tools): ",
            f"{always}. The chat asks before any other call; "
            "'vibechat run' runs only those named by --allow-tool.",
            width,
        )
    )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= MAX_DESCRIPTION else line[: MAX_DESCRIPTION - 1] + "…"


def _tool_json(spec: Any) -> dict[str, Any]:
    return {
        "name": spec.name,
        "server": spec.server or "builtin",
        "tool": spec.tool or spec.name,
        "qualified": spec.qualified,
        "description": spec.description,
        "parameters": dict(spec.parameters),
    }
