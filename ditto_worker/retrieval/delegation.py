"""Retrieval delegation: the RETRIEVAL.SEARCH node and ``RemoteRetrievalSearchProvider``.

``RETRIEVAL.SEARCH`` runs a search pipeline (embedding + candidate search + fusion +
rerank) on its own queue, ``retrieval.search``, so retrieval workers (CPU or GPU) scale
apart from MEMORY workers (MEM-RET-1). Its input is a MEMORY.SEARCH input plus a fixed
``target`` naming a pipeline configured on the retrieval worker; its output is
``MemorySearchResult[]`` carrying full MemoryItems. A call whose trusted space is a task
space fails ``INVALID_INPUT`` before any target is looked up (MEM-SEARCH-7). Validation,
limits and output checks are those of MEMORY.SEARCH (the SDK runs them), so a delegated
search fails and succeeds exactly like a native one.

``RemoteRetrievalSearchProvider(target=…)``, the MEMORY worker's provider that calls
RETRIEVAL.SEARCH (MEM-RET-2), lives in the SDK (:mod:`ditto_worker.memory.remote`) so the
MEMORY worker never imports this package; it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ditto_worker.contracts import (
    RETRIEVAL_SEARCH,
    MemoryDefaults,
    MemorySearchResult,
    NodeResult,
    RetrievalSearchInput,
    RetrievalTarget,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.core import TASK_SPACE_SEARCH, Memory
from ditto_worker.memory.ports import MemorySearchProvider
from ditto_worker.memory.remote import Invoker, MapOutput, RemoteRetrievalSearchProvider
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition

__all__ = [
    "RETRIEVAL_WORKER_TYPE",
    "Invoker",
    "MapOutput",
    "RemoteRetrievalSearchProvider",
    "create_retrieval_worker",
]

RETRIEVAL_WORKER_TYPE = "RETRIEVAL"
"""The worker kind of RETRIEVAL.SEARCH."""


class _SearchOnlyStore:
    """The store side of a retrieval target: RETRIEVAL runs SEARCH only."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise MemoryError(ErrorCode.UNKNOWN_NODE, "a retrieval target only searches")

    get = query = write = update = delete = _refuse


def _failure(ctx: NodeContext, code: str, message: str) -> NodeResult[Any]:
    return NodeResult.failure(ctx.execution_id, RETRIEVAL_SEARCH, code, message)


def _search_handler(targets: Callable[[], Mapping[str, Memory]]) -> Callable[..., Any]:
    def search(input: Any, ctx: NodeContext) -> NodeResult[Any]:
        if ctx.scope is not None and ctx.scope.task_id is not None:  # MEM-SEARCH-7
            return _failure(ctx, ErrorCode.INVALID_INPUT, TASK_SPACE_SEARCH)
        if not isinstance(input, Mapping) or "target" not in input:
            return _failure(ctx, ErrorCode.INVALID_INPUT, "Invalid input: target: Field required")
        try:
            target = RetrievalTarget.model_validate(input["target"])
        except ValidationError:
            return _failure(ctx, ErrorCode.INVALID_INPUT, "Invalid input: target: not a target")
        memory = targets().get(target.name)
        if memory is None:
            return _failure(
                ctx, ErrorCode.UNKNOWN_TARGET, f"no retrieval target {target.name[:40]!r}"
            )
        rest = {k: v for k, v in input.items() if k != "target"}
        result = memory.execute("MEMORY.SEARCH", rest, ctx.defaults, cancel=ctx.cancel,
                                execution_id=ctx.execution_id, deadline=ctx.deadline,
                                scope=ctx.scope, runtime=ctx.invoke)  # fmt: skip
        return result.model_copy(update={"node": RETRIEVAL_SEARCH})

    return search


def retrieval_definition(
    targets: Callable[[], Mapping[str, Memory]],
    concurrency: int | None = None,
    open: Callable[[], None] | None = None,
    embedder: Callable[[], Any] | None = None,
) -> WorkerDefinition:
    """The RETRIEVAL definition over ``targets()`` (target name -> the SDK over its
    pipeline), called per call (a per-process builder may stand behind it); with
    ``embedder`` (a provider factory, called per call) ``RETRIEVAL.EMBED`` too
    (:mod:`ditto_worker.retrieval.embed_node`)."""
    from ditto_worker.retrieval.embed_node import embed_spec

    spec = NodeSpec(RETRIEVAL_SEARCH, _search_handler(targets), output=list[MemorySearchResult],
                    input=RetrievalSearchInput)  # fmt: skip
    specs = [spec] if embedder is None else [spec, embed_spec(embedder)]
    return WorkerDefinition.of(RETRIEVAL_WORKER_TYPE, specs, concurrency=concurrency, open=open)


def search_only(
    providers: Mapping[str, MemorySearchProvider],
    defaults: MemoryDefaults | Mapping[str, Any] | None,
) -> dict[str, Memory]:
    """Target name -> the SDK that only searches, over each provider."""
    return {name: Memory(_SearchOnlyStore(), p, defaults) for name, p in providers.items()}


def create_retrieval_worker(
    targets: Mapping[str, MemorySearchProvider],
    defaults: MemoryDefaults | Mapping[str, Any] | None = None,
    concurrency: int | None = None,
) -> WorkerDefinition:
    """Register RETRIEVAL.SEARCH over the given pipelines (one per target name).

    RETRIEVAL.SEARCH's input is a MEMORY.SEARCH input plus a fixed ``target`` naming a
    pipeline; its output is ``MemorySearchResult[]`` with full MemoryItems. Failures:
    ``INVALID_INPUT`` for a missing or malformed ``target``, ``UNKNOWN_TARGET`` for a
    target this worker does not serve, and every MEMORY.SEARCH code.

    Args:
        targets: target name -> a search provider (e.g. from
            ``create_retrieval_memory_search_provider`` or a store's native search).
        defaults: factory limits (``searchLimit``), as for ``create_memory``.
        concurrency: concurrent entries.
    """
    memories = search_only(targets, defaults)
    return retrieval_definition(lambda: memories, concurrency)
