"""The runtime every worker kind runs on (SPEC.md MEM-RT).

Worker definitions as data (:class:`WorkerDefinition`, :class:`NodeSpec`), the
:class:`NodeContext` a handler gets, :class:`CancelToken`, and :func:`create_ditto`, which
serves definitions embedded (no Celery import) or calls them on the fleet, and
:func:`graph` with ``Runtime.run`` / ``loop`` to compose node calls (MEM-GRAPH). Imports no
Celery (MEM-RT-5).
"""

from __future__ import annotations

from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.context import NodeContext, SubInvoke
from ditto_worker.runtime.definition import (
    Handler,
    KindCodes,
    NodeSpec,
    WorkerDefinition,
    WorkerSource,
    queue_of,
)
from ditto_worker.runtime.graphs import (
    Graph,
    GraphBudgetExhausted,
    GraphError,
    GraphNode,
    GraphResult,
    GraphStatus,
    LoopResult,
    graph,
)
from ditto_worker.runtime.runtime import Runtime, create_ditto

__all__ = [
    "CancelToken",
    "Graph",
    "GraphBudgetExhausted",
    "GraphError",
    "GraphNode",
    "GraphResult",
    "GraphStatus",
    "Handler",
    "KindCodes",
    "LoopResult",
    "NodeContext",
    "NodeSpec",
    "Runtime",
    "SubInvoke",
    "WorkerDefinition",
    "WorkerSource",
    "create_ditto",
    "graph",
    "queue_of",
]
