"""What an MCP server sends, read as outside text: its tool list and a call's result.

A server's tool list is bounded: at most ``MAX_TOOLS`` tools (of ``MAX_PAGES`` pages), each
description cut to ``MAX_DESCRIPTION_CHARS`` and sanitised, a schema over
``MAX_SCHEMA_CHARS``, nested too deeply or not an object schema left out, a name that is not
printable (or over ``MAX_TOOL_NAME_CHARS``) left out, with a note saying how many were. A
call's result is joined to text (at most ``MAX_BLOCKS`` blocks; non-text blocks: a one-line
note), cut to the result limit with a note, and sanitised (results.py).
engine/tools/mcp_servers.py runs the servers and hands their answers here.
"""

from __future__ import annotations

import json
from typing import Any

from ..json_bounds import MAX_JSON_DEPTH, value_depth
from ..sanitize import sanitize
from .results import DEFAULT_RESULT_LIMIT, ToolResult, bounded

# Tools kept of one server.
MAX_TOOLS = 128
# Pages of a server's tool list read.
MAX_PAGES = 16
# A server's own tool name, at most (longer: left out).
MAX_TOOL_NAME_CHARS = 128
# A tool's description, cut to.
MAX_DESCRIPTION_CHARS = 2_000
# A tool's input schema as JSON, at most (larger: left out).
MAX_SCHEMA_CHARS = 16_000
# Content blocks of one result read.
MAX_BLOCKS = 256


async def list_tools(client: Any) -> tuple[tuple[tuple[str, str, dict[str, Any]], ...], str]:
    """A server's tools, bounded; and a note when some were left out."""
    tools: list[tuple[str, str, dict[str, Any]]] = []
    left_out = 0
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            schema = tool.input_schema
            name = tool.name
            if (
                len(tools) >= MAX_TOOLS
                or not isinstance(name, str)
                or not name.isprintable()
                or not 0 < len(name) <= MAX_TOOL_NAME_CHARS
                or not isinstance(schema, dict)
                or schema.get("type") != "object"
                or value_depth(schema) > MAX_JSON_DEPTH
                or len(json.dumps(schema, ensure_ascii=False)) > MAX_SCHEMA_CHARS
            ):
                left_out += 1
                continue
            description = sanitize(tool.description or "").strip()
            if len(description) > MAX_DESCRIPTION_CHARS:
                description = description[:MAX_DESCRIPTION_CHARS] + "…"
            tools.append((name, description, schema))
        cursor = page.next_cursor
        if not cursor:
            break
    note = (
        (
            f"{left_out} tool(s) left out (over {MAX_TOOLS}, a bad name, or a schema that is not "
            f"an object or is over {MAX_SCHEMA_CHARS:,} characters)"
        )
        if left_out
        else ""
    )
    return tuple(tools), note


def result_of(result: Any, limit: int = DEFAULT_RESULT_LIMIT) -> ToolResult:
    """An MCP ``CallToolResult`` as text: text blocks joined, other blocks a one-line note,
    the structured content when there is no block; bounded and sanitised."""
    parts: list[str] = []
    total = 0
    blocks = list(result.content or ())
    for block in blocks[:MAX_BLOCKS]:
        kind = getattr(block, "type", "")
        if kind == "text":
            part = str(block.text)
        elif kind in ("image", "audio"):
            what = "an image" if kind == "image" else "audio"
            part = f"[{what} ({getattr(block, 'mime_type', '?')}), not shown]"
        elif kind == "resource_link":
            part = f"[a link to a resource: {str(getattr(block, 'uri', ''))[:500]}]"
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            part = (
                text
                if isinstance(text, str)
                else (
                    f"[a resource ({getattr(resource, 'mime_type', None) or 'binary'}), not shown: "
                    f"{str(getattr(resource, 'uri', ''))[:500]}]"
                )
            )
        else:
            part = f"[a {str(kind)[:40]} block, not shown]"
        parts.append(part)
        total += len(part) + 1
        if total > limit:
            break
    if len(blocks) > MAX_BLOCKS and total <= limit:
        parts.append(f"[{len(blocks) - MAX_BLOCKS} more blocks not read]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        # Dumping it would recurse that deep.
        if value_depth(structured) > MAX_JSON_DEPTH:
            parts.append(
                f"[structured content nested more than {MAX_JSON_DEPTH} levels deep: not read]"
            )
        else:
            parts.append(json.dumps(structured, ensure_ascii=False)[: limit + 1])
    text = "\n".join(parts) if parts else "(the tool returned nothing)"
    return bounded(text, bool(getattr(result, "is_error", False)), limit)
