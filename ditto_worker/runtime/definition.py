"""Worker definitions as data (SPEC.md MEM-RT-1): a kind, its nodes and their handlers.

A :class:`WorkerDefinition` says everything the runtime needs to serve a worker kind, so
adding a kind (CONTEXT, INFER, a test kind such as ``ECHO``) adds no code to the fleet:

* ``kind`` — ``"MEMORY"``, ``"RETRIEVAL"``, ``"CONTEXT"``, ``"INFER"`` …;
* ``nodes`` — one :class:`NodeSpec` per node id (``CONTEXT.UPDATE`` …), each served on its
  own queue, the lower-case node id (``context.update``; SPEC.md "Python mapping");
* ``codes`` — the codes the runtime answers with when a call of this kind is cancelled,
  runs past its deadline, or its handler raises something unclassified (MEM-RT-4).

A handler is ``handler(input, ctx) -> output``: ``input`` is the node's JSON input (wire
names), ``ctx`` a :class:`~ditto_worker.runtime.context.NodeContext`; it returns the raw
output (JSON data or a pydantic model; the runtime wraps it once in a NodeResult), or a
whole :class:`~ditto_worker.contracts.NodeResult` (a handler that owns every NodeResult
rule itself, as the MEMORY SDK and the seed's ``.define`` overrides do). It raises
:class:`~ditto_worker.errors.NodeError` (code, safe message) for a classified failure.

Nothing here imports Celery or opens a connection (MEM-RT-5).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ConfigError, ErrorCode
from ditto_worker.runtime.execute import run_node
from ditto_worker.runtime.node_spec import BatchCall, Handler, KindCodes, NodeSpec, queue_of

if TYPE_CHECKING:
    from ditto_worker.runtime.context import NodeContext
    from ditto_worker.scope import Scope

__all__ = [
    "BatchCall",
    "Handler",
    "KindCodes",
    "NodeSpec",
    "WorkerDefinition",
    "WorkerSource",
    "queue_of",
]


@dataclass(frozen=True)
class WorkerDefinition:
    """A worker kind as data (MEM-RT-1).

    Attributes:
        kind: ``MEMORY``, ``RETRIEVAL``, ``CONTEXT``, ``INFER`` or a kind of your own
            (upper case letters, digits and ``_``).
        nodes: node id -> :class:`NodeSpec`; every id starts with ``<kind>.``.
        concurrency: concurrent entries this definition allows (MEM-RUN-1), or ``None``
            for the host's default; it creates no connection pool.
        codes: the runtime's codes for this kind (:meth:`KindCodes.for_kind` by default).
        close: releases what the definition owns (called by ``Runtime.close``), or ``None``.
            Application-owned plugin objects are never closed (MEM-RUN-3).
        open: acquires this process's resources (a store from ``ditto.yaml``, a model)
            and checks them, or ``None``. A worker process calls it once before it
            announces ready (after the fork, in each pool process) and refuses to start
            when it raises; handlers still build what they need on first use.
        scope: binds every call of this definition to one tenant and user; a call whose
            trusted scope names another tenant or user is ``PERMISSION_DENIED`` (the space
            is the caller's; ``scope.space`` for calls that send no scope).
        require_scope: refuse calls that arrive without any scope (``PERMISSION_DENIED``).

    Raises:
        ConfigError: a node id that does not belong to ``kind``, or a concurrency < 1.
    """

    kind: str
    nodes: Mapping[str, NodeSpec]
    concurrency: int | None = None
    codes: KindCodes | None = None
    close: Callable[[], None] | None = field(default=None, compare=False)
    open: Callable[[], None] | None = field(default=None, compare=False)
    scope: Scope | None = None
    require_scope: bool = False

    def __post_init__(self) -> None:
        if not self.kind or not self.kind.replace("_", "").isalnum() or not self.kind.isupper():
            raise ConfigError(f"worker kind {self.kind!r} must be upper case (e.g. CONTEXT)")
        for node_id, spec in self.nodes.items():
            if node_id != spec.id or not node_id.startswith(f"{self.kind}."):
                raise ConfigError(f"node {node_id!r} does not belong to worker kind {self.kind}")
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool) or self.concurrency < 1
        ):
            raise ConfigError("concurrency must be an integer >= 1")
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))
        if self.codes is None:
            object.__setattr__(self, "codes", KindCodes.for_kind(self.kind))

    @classmethod
    def of(
        cls,
        kind: str,
        nodes: list[NodeSpec] | tuple[NodeSpec, ...],
        *,
        concurrency: int | None = None,
        codes: KindCodes | None = None,
        close: Callable[[], None] | None = None,
        open: Callable[[], None] | None = None,
        scope: Scope | None = None,
        require_scope: bool = False,
    ) -> WorkerDefinition:
        """Build a definition from a list of node specs (ids must be distinct).

        Raises:
            ConfigError: a node id given twice, or see the class.
        """
        table: dict[str, NodeSpec] = {}
        for spec in nodes:
            if spec.id in table:
                raise ConfigError(f"node {spec.id!r} given twice")
            table[spec.id] = spec
        return cls(kind, table, concurrency, codes, close, open, scope, require_scope)

    @property
    def kind_codes(self) -> KindCodes:
        """:attr:`codes`, never ``None`` after construction."""
        assert self.codes is not None
        return self.codes

    def handle(self, node: str, input: Any, ctx: NodeContext) -> NodeResult[Any]:
        """Answer one call in this process, as the runtime would (no queue, no pool).

        Returns:
            The node's NodeResult (:func:`ditto_worker.runtime.execute.run_node`);
            ``failed``/``UNKNOWN_NODE`` for a node id this definition does not have.
        """
        node = node if isinstance(node, str) else str(node)
        spec = self.nodes.get(node)
        eid = ctx.execution_id or str(uuid.uuid4())
        if spec is None:
            return NodeResult.failure(
                eid, node, ErrorCode.UNKNOWN_NODE, f"unknown {self.kind} node {node[:80]!r}"
            )
        if eid != ctx.execution_id:
            ctx = replace(ctx, execution_id=eid)
        return run_node(self, spec, input, ctx)


WorkerSource = WorkerDefinition | Callable[[], WorkerDefinition]
"""A definition, or a zero-argument factory the runtime calls to build it (once per
process: after a fork the factory is called again, so each pool process owns its own
plugin objects)."""
