"""Retrieval delegation: the RETRIEVAL.SEARCH node and ``RemoteRetrievalSearchProvider``.

``RETRIEVAL.SEARCH`` runs a search pipeline (embedding + candidate search + fusion +
rerank) on its own queue, ``retrieval.search``, so retrieval workers (CPU or GPU) scale
apart from MEMORY workers (MEM-RET-1). Its input is a MEMORY.SEARCH input plus a fixed
``target`` naming a pipeline configured on the retrieval worker; its output is
``MemorySearchResult[]`` carrying full MemoryItems. Validation, limits and output checks are
those of MEMORY.SEARCH (the SDK runs them), so a delegated search fails and succeeds exactly
like a native one.

``RemoteRetrievalSearchProvider(target=…)`` is a ``MemorySearchProvider`` for a MEMORY
worker: its ``search`` invokes RETRIEVAL.SEARCH and returns the results, so MEMORY.SEARCH's
caller sees no difference (MEM-RET-2). Inside a worker it needs no client: it uses the
call's own runtime (``MemoryCallOptions.runtime``, the call's ``NodeContext.invoke``), so
the sub-call inherits the call's deadline, cancellation and scope (MEM-RET-5, MEM-RT-3):
cancelling the outer call cancels the inner one. An explicit client always wins.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from ditto_worker.contracts import (
    RETRIEVAL_SEARCH,
    MemoryDefaults,
    MemorySearchInput,
    MemorySearchResult,
    NodeResult,
    RetrievalTarget,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.core import Memory
from ditto_worker.memory.ports import MemoryCallOptions, MemorySearchProvider
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition

__all__ = [
    "RETRIEVAL_WORKER_TYPE",
    "RemoteRetrievalSearchProvider",
    "create_retrieval_worker",
]

RETRIEVAL_WORKER_TYPE = "RETRIEVAL"
"""The worker kind of RETRIEVAL.SEARCH."""

MapOutput = Callable[[list[MemorySearchResult]], Sequence[MemorySearchResult | dict[str, Any]]]


class Invoker(Protocol):
    """Anything with ``invoke(node, input, *, timeout, cancel, scope) -> NodeResult``: a
    ``DittoClient``, a ``Runtime``."""

    def invoke(self, node: str, input: Any, **kwargs: Any) -> NodeResult[Any]: ...


class _SearchOnlyStore:
    """The store side of a retrieval target: RETRIEVAL runs SEARCH only."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise MemoryError(ErrorCode.UNKNOWN_NODE, "a retrieval target only searches")

    get = query = write = update = delete = _refuse


def _failure(ctx: NodeContext, code: str, message: str) -> NodeResult[Any]:
    return NodeResult.failure(ctx.execution_id, RETRIEVAL_SEARCH, code, message)


def _search_handler(targets: Callable[[], Mapping[str, Memory]]) -> Callable[..., Any]:
    def search(input: Any, ctx: NodeContext) -> NodeResult[Any]:
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
) -> WorkerDefinition:
    """The RETRIEVAL definition over ``targets()`` (target name -> the SDK over its
    pipeline), called per call (a per-process builder may stand behind it)."""
    spec = NodeSpec(RETRIEVAL_SEARCH, _search_handler(targets), output=list[MemorySearchResult])
    return WorkerDefinition.of(RETRIEVAL_WORKER_TYPE, [spec], concurrency=concurrency, open=open)


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


class RemoteRetrievalSearchProvider:
    """A ``MemorySearchProvider`` that delegates to RETRIEVAL.SEARCH (MEM-RET-2/3/5).

    Args:
        target: the retrieval target, e.g. ``{"name": "memories"}``; fixed per provider.
        client: what to invoke RETRIEVAL.SEARCH with (a ``DittoClient`` or a
            ``Runtime``); ``None``: the calling worker's own runtime
            (``MemoryCallOptions.runtime``), which inherits the call's deadline,
            cancellation and scope. Explicit always wins.
        map_output: optional batch mapping of the candidates (not needed when they
            carry full MemoryItems, as ours do).
        timeout_s: timeout of the sub-call when the outer call has no deadline.

    The outer call's scope travels with the sub-call; the retrieval worker's store
    confines the search to it (:mod:`ditto_worker.scope`).
    """

    supports_scope = True

    def __init__(
        self,
        target: RetrievalTarget | Mapping[str, Any],
        *,
        client: Invoker | None = None,
        map_output: MapOutput | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.target = RetrievalTarget.model_validate(target)
        self.client = client
        self.map_output = map_output
        self.timeout_s = timeout_s

    def _invoke(self, payload: Any, options: MemoryCallOptions) -> NodeResult[Any]:
        if self.client is not None:
            timeout = self.timeout_s if options.deadline is None else options.deadline - time.time()
            return self.client.invoke(RETRIEVAL_SEARCH, payload, timeout=timeout,
                                      cancel=options.cancel, scope=options.scope)  # fmt: skip
        if options.runtime is None:
            raise MemoryError(
                ErrorCode.SEARCH_UNAVAILABLE,
                "no runtime to reach RETRIEVAL.SEARCH (pass client= outside a worker)",
            )
        sub_timeout = self.timeout_s if options.deadline is None else None
        result: NodeResult[Any] = options.runtime(RETRIEVAL_SEARCH, payload, timeout=sub_timeout)
        return result

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult | dict[str, Any]]:
        """Run the search on the retrieval queue; same contract as a native search.

        Raises:
            MemoryError: the sub-call's error code and message (``MEMORY_CANCELLED`` /
                ``MEMORY_TIMEOUT`` when it was cancelled or timed out);
                ``SEARCH_UNAVAILABLE`` when there is neither a client nor a runtime.
        """
        options = options or MemoryCallOptions()
        payload = {**to_wire(input), "target": to_wire(self.target)}
        result = self._invoke(payload, options)
        if result.status != "success" or result.output is None:
            error = result.error
            raise MemoryError(
                error.code if error else ErrorCode.MEMORY_BACKEND_ERROR,
                error.message if error else "the retrieval call failed",
            )
        hits = [
            r if isinstance(r, MemorySearchResult) else MemorySearchResult.model_validate(r)
            for r in result.output
        ]
        return self.map_output(hits) if self.map_output else hits
