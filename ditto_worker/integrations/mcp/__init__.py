"""An MCP server whose tools are the MEMORY nodes (issue 33 item 3; docs/integrations-mcp.md).

Built on the official ``mcp`` Python SDK (2.x: the low-level ``mcp.server.Server``, its
stdio and streamable-HTTP transports, its bearer-token middleware); no protocol code of
our own. Tools (``memory_get`` … ``memory_delete``) take the node's input model as their
JSON Schema and return the node's NodeResult as structured content. The trusted scope
comes from the host: ``--scope`` for ``ditto-worker mcp`` (the operator is the trusted
host), the bearer identity on the gateway's ``/mcp``; a tenant, user, scope or namespace
in tool arguments is refused as unknown input (MEM-RUN-5).
"""

from __future__ import annotations

from ditto_worker.integrations.mcp.server import (
    TOOL_NODES,
    ExtraTool,
    NodeCall,
    create_mcp_server,
    node_tools,
    runtime_call,
    runtime_specs,
    tool_result,
)

__all__ = [
    "TOOL_NODES",
    "ExtraTool",
    "NodeCall",
    "create_mcp_server",
    "node_tools",
    "runtime_call",
    "runtime_specs",
    "tool_result",
]
