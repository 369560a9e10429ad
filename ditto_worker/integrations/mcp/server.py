"""The MCP server: one tool per MEMORY node, over a caller that holds the trusted scope.

:func:`create_mcp_server` builds an ``mcp.server.Server`` (the SDK's low-level server:
it lets each tool publish the node's own input model as its ``inputSchema``) whose
``tools/call`` runs ``call(node, arguments)`` and answers the node's NodeResult:

* ``structuredContent``: the NodeResult's wire form (``executionId``, ``node``,
  ``status``, ``output`` or ``error``), matching the tool's ``outputSchema``;
* ``content``: the same JSON as one text block (for hosts that read text only);
* ``isError``: true when ``status`` is not ``success`` (the error code and message are in
  the structured content: ``INVALID_INPUT`` naming the field, ``NOT_FOUND`` …).

Extra tools (:class:`ExtraTool`, e.g. the worked tasks of
:mod:`ditto_worker.memory_tasks.task_tools`) are listed after the node tools with their
own input and output models; their call answers its structured content the same way.
An unknown tool name is the JSON-RPC error ``-32602``. Who the call acts for is the
caller's business (:data:`NodeCall`): :func:`runtime_call` binds one trusted scope (the
operator's ``--scope``), the gateway binds the bearer identity of each request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, Protocol

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, TypeAdapter

from ditto_worker.contracts import NodeResult, to_wire
from ditto_worker.runtime import NodeSpec, Runtime
from ditto_worker.scope import Scope

__all__ = [
    "TOOL_NODES",
    "ExtraTool",
    "NodeCall",
    "create_mcp_server",
    "extra_tool",
    "node_tools",
    "runtime_call",
    "runtime_specs",
    "tool_result",
]

NodeCall = Callable[[str, Any], Awaitable[NodeResult[Any]]]
"""``call(node_id, arguments) -> NodeResult``: runs one node call for a tool, under the
trusted scope its maker holds (never one taken from ``arguments``)."""

TOOL_NODES: Final[dict[str, str]] = {
    "memory_get": "MEMORY.GET",
    "memory_query": "MEMORY.QUERY",
    "memory_search": "MEMORY.SEARCH",
    "memory_write": "MEMORY.WRITE",
    "memory_update": "MEMORY.UPDATE",
    "memory_delete": "MEMORY.DELETE",
}
"""Tool name -> node id. Names use ``[a-z_]`` only: some hosts accept no dots in a tool
name (``^[a-zA-Z0-9_-]{1,64}$``)."""

_DESCRIPTIONS: Final[dict[str, str]] = {
    "MEMORY.GET": "Read memories by exact ids and/or keys (union; missing ones are left out).",
    "MEMORY.QUERY": "List memories with a metadata filter, sort terms and keyset paging "
    "(pass nextCursor back as cursor for the next page).",
    "MEMORY.SEARCH": "Search memories by relevance to a query (text; strategy keyword, "
    "vector or hybrid where the store supports them), with an optional metadata filter.",
    "MEMORY.WRITE": "Store new memories (content: any JSON value; optional key and "
    "metadata object); returns the stored records with their ids.",
    "MEMORY.UPDATE": "Change memories by id: new content and/or a whole new metadata "
    "object; ifMetadata makes the update conditional.",
    "MEMORY.DELETE": "Delete memories by id; returns the ids deleted now.",
}

_READ_ONLY: Final = frozenset({"MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH"})

_INSTRUCTIONS: Final = (
    "Long-term memory for this user. Search or query before answering from memory; write "
    "what should be remembered. Every call acts for the user this server was started or "
    "authenticated for; there is no argument to name another tenant or user."
)


class ExtraTool(Protocol):
    """A tool beside the node tools: its models, and ``call(arguments) -> (structured
    content, is_error)`` run under the trusted scope its maker holds."""

    @property
    def name(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input(self) -> type[BaseModel]: ...
    @property
    def output(self) -> type[BaseModel]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def call(self) -> Callable[[Any], Awaitable[tuple[dict[str, Any], bool]]]: ...


def extra_tool(extra: ExtraTool) -> types.Tool:
    """The MCP tool of ``extra``: ``inputSchema`` from its input model (camelCase, no other
    properties), ``outputSchema`` from its output model."""
    return types.Tool(
        name=extra.name,
        title=extra.title,
        description=extra.description,
        input_schema=extra.input.model_json_schema(by_alias=True),
        output_schema=extra.output.model_json_schema(by_alias=True, mode="serialization"),
        annotations=types.ToolAnnotations(
            title=extra.title,
            read_only_hint=extra.read_only,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),  # fmt: skip
    )


def node_tools(specs: Mapping[str, NodeSpec]) -> dict[str, types.Tool]:
    """The tools of the MEMORY nodes present in ``specs`` (node id -> spec), by tool name.

    ``inputSchema`` is the JSON Schema of the node's input model (wire names, camelCase;
    ``additionalProperties: false``), ``outputSchema`` that of its NodeResult.
    """
    tools: dict[str, types.Tool] = {}
    for name, node in TOOL_NODES.items():
        spec = specs.get(node)
        if spec is None or spec.input is None:
            continue
        input_schema = TypeAdapter(spec.input).json_schema(by_alias=True)
        result: Any = (
            NodeResult[Any] if spec.output is None else NodeResult.__class_getitem__(spec.output)
        )
        output_schema = TypeAdapter(result).json_schema(by_alias=True, mode="serialization")
        tools[name] = types.Tool(
            name=name,
            title=node,
            description=_DESCRIPTIONS[node],
            input_schema=input_schema,
            output_schema=output_schema,
            annotations=types.ToolAnnotations(
                title=node,
                read_only_hint=node in _READ_ONLY,
                destructive_hint=node in ("MEMORY.UPDATE", "MEMORY.DELETE"),
                idempotent_hint=node != "MEMORY.WRITE",
                open_world_hint=False,
            ),
        )
    return tools


def create_mcp_server(
    specs: Mapping[str, NodeSpec], call: NodeCall, extras: Sequence[ExtraTool] = ()
) -> Server[Any]:
    """An MCP server whose tools are the MEMORY nodes of ``specs``, each run by ``call``,
    then ``extras``.

    Args:
        specs: node id -> spec, e.g. ``runtime_specs(runtime)``; MEMORY nodes absent
            from it have no tool.
        call: runs a node call under the trusted scope (:func:`runtime_call`, or the
            gateway's per-request identity).
        extras: more tools (the worked tasks), each run by its own ``call``.

    Returns:
        The SDK's low-level server; run it with ``mcp.server.stdio.stdio_server`` or a
        ``StreamableHTTPSessionManager`` (:mod:`ditto_worker.integrations.mcp.serve`).
    """
    tools = node_tools(specs)
    more = {extra.name: extra for extra in extras}
    listing = types.ListToolsResult(
        tools=[*tools.values(), *(extra_tool(extra) for extra in more.values())]
    )

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        extra = more.get(params.name)
        if extra is not None:
            wire, failed = await extra.call(params.arguments or {})
            return _structured(wire, failed)
        if params.name not in tools:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name[:80]!r}")
        result = await call(TOOL_NODES[params.name], params.arguments or {})
        return tool_result(result)

    return Server(
        "ditto-worker",
        version=_version(),
        title="ditto-worker memory",
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def tool_result(result: NodeResult[Any]) -> types.CallToolResult:
    """The ``tools/call`` answer of a NodeResult (structured, plus the same JSON as text)."""
    return _structured(to_wire(result), result.status != "success")


def _structured(wire: dict[str, Any], failed: bool) -> types.CallToolResult:
    text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=wire,
        is_error=failed,
    )


def runtime_specs(runtime: Runtime) -> dict[str, NodeSpec]:
    """Node id -> spec of every node ``runtime`` serves."""
    return {node: spec for d in runtime.definitions for node, spec in d.nodes.items()}


def runtime_call(runtime: Runtime, scope: Scope, *, timeout_s: float | None = None) -> NodeCall:
    """A :data:`NodeCall` running every tool on ``runtime`` for one trusted ``scope``.

    Args:
        runtime: ``create_ditto(...)``: embedded, or the fleet when a broker is set.
        scope: the trusted scope of every call (the operator's ``--scope``).
        timeout_s: each call's deadline, seconds; ``None``: ``fleet.callTimeoutS``.
    """

    async def call(node: str, arguments: Any) -> NodeResult[Any]:
        return await runtime.ainvoke(node, arguments, scope=scope, timeout=timeout_s)

    return call


def _version() -> str:
    try:
        return version("ditto-worker")
    except PackageNotFoundError:  # a source tree that is not installed
        return "0"
