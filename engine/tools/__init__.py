"""Tools the model may call, and who says yes: MCP servers (configured in ``mcp.json``, the
``mcpServers`` shape other apps use; started when first needed, stopped with vibechat), the
built-in tools (off until enabled), the registry that offers them to a backend as
``ToolSpec``s (engine/turns/tool_calls.py), the approval policy (nothing runs without the
user's yes: once, for a conversation, always, or ``--allow-tool`` in ``vibechat run``) and
running one call with a timeout, its result bounded and sanitised.
Imports the base, settings and turns.
"""
