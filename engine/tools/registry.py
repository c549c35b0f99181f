"""What a reply is offered, and running one call: ``ToolRegistry`` joins the built-in tools the
config enables and the MCP servers' tools into one list of ``ToolSpec``s (names unique and
safe for templates, names.py), and runs a ``ToolCall`` by its name: arguments that do not
parse and an unknown tool are results the model can read, a call is bounded by the config's
``tool_timeout`` and its result by ``tool_result_limit``. It is the chat's ``ToolBox``
(engine/chat/tool_turns.py). It decides nothing: approval.py says whether a call may run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..settings.table import Config
from ..turns.tool_calls import ToolCall, ToolSpec
from .builtin import BUILTIN_SPECS, builtin_specs, run_builtin
from .mcp_config import McpConfig, load_mcp_config
from .mcp_servers import FAILED, McpServers, ServerStatus
from .names import model_names
from .results import ToolResult, error


@dataclass(frozen=True)
class BuiltinStatus:
    """A built-in tool and whether the config enables it (``vibechat tools``)."""

    spec: ToolSpec
    enabled: bool


class ToolRegistry:
    """The tools of one chat or run, from ``config`` (``builtin_tools``, ``tool_folders``,
    ``tool_timeout``, ``tool_result_limit``) and the MCP servers of ``mcp`` (started when
    first needed; ``close()`` stops them). Thread-safe as McpServers is."""

    def __init__(self, config: Config, mcp: McpConfig | None = None) -> None:
        self.config = config
        self.builtins = builtin_specs(config.builtin_tools)
        self.servers = McpServers(mcp or McpConfig(), result_limit=config.tool_result_limit)
        self._by_name: dict[str, ToolSpec] = {}
        self._lock = threading.Lock()
        # An mcp.json that could not be used, when the chat went on without it.
        self.file_problem = ""

    @classmethod
    def load(cls, config: Config, mcp_config: str | Path | None = None) -> ToolRegistry:
        """The registry of ``config`` with the servers of ``mcp_config`` (``--mcp-config``),
        else of ``mcp.json`` in the config folder. Raises ``McpConfigError`` (one line) for
        an mcp.json that cannot be used."""
        return cls(config, load_mcp_config(mcp_config))

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools to offer: the enabled built-ins, then every started server's (starting
        those not tried yet: blocks, bounded). A server that fails is left out (its status
        says why)."""
        served = self.servers.tools() if self.servers.names else ()
        offered = (*self.builtins, *served)
        names = model_names([(spec.server, spec.tool or spec.name) for spec in offered])
        specs = tuple(
            ToolSpec(name, spec.description, spec.parameters, spec.server, spec.tool or spec.name)
            for name, spec in zip(names, offered, strict=True)
        )
        with self._lock:
            self._by_name = {spec.name: spec for spec in specs}
        return specs

    def find(self, name: str) -> ToolSpec | None:
        """The tool the last ``specs()`` offered as ``name``."""
        with self._lock:
            return self._by_name.get(name)

    def run(
        self, call: ToolCall, spec: ToolSpec | None = None, cancel: threading.Event | None = None
    ) -> ToolResult:
        """Run ``call`` (``spec``: its tool, else found by name): the tool's result, or an
        error result (no such tool, arguments that do not parse, a timeout, a cancel).
        Blocks, at most ``tool_timeout`` seconds for a server's tool."""
        spec = spec or self.find(call.name)
        if spec is None:
            return error(f"There is no tool named {call.name[:80]!r}.")
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            return error(f"The call was not run: {exc}.")
        if not spec.server:
            return run_builtin(
                spec.tool or spec.name,
                arguments,
                self.config.tool_folders,
                self.config.tool_result_limit,
            )
        return self.servers.call(spec, arguments, timeout=self.config.tool_timeout, cancel=cancel)

    def problems(self) -> tuple[str, ...]:
        """One line for each server that could not be used (after ``specs()``): the chat says
        each once; and ``file_problem``, an mcp.json the chat went on without."""
        lines = [
            f"MCP server {status.name}: {status.reason}"
            for status in self.statuses()
            if status.state == FAILED and status.reason
        ]
        return (
            ((self.file_problem,) if self.file_problem else ())
            + tuple(lines)
            + self.servers.misbehaviour()
        )

    def hear_problems(self, listener: Callable[[str], object]) -> None:
        """``listener`` hears, from the servers' thread, one line for each server that
        misbehaves while it runs (writes something other than JSON-RPC on its stdout), once."""
        self.servers.on_problem = listener

    def statuses(self) -> tuple[ServerStatus, ...]:
        """Each MCP server as it is now (starts nothing)."""
        return self.servers.statuses()

    def builtin_statuses(self) -> tuple[BuiltinStatus, ...]:
        """Every built-in tool, and whether the config enables it."""
        return tuple(
            BuiltinStatus(spec, name in self.config.builtin_tools)
            for name, spec in BUILTIN_SPECS.items()
        )

    def close(self) -> None:
        """Stop the MCP servers (bounded); idempotent."""
        self.servers.close()
