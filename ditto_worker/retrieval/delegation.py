"""Retrieval delegation: the RETRIEVAL.SEARCH node and ``RemoteRetrievalSearchProvider``.

``RETRIEVAL.SEARCH`` runs a search pipeline (embedding + candidate search + fusion +
rerank) on its own queue, ``retrieval.search``, so retrieval workers (CPU or GPU) scale
apart from MEMORY workers (MEM-RET-1). Its input is a MEMORY.SEARCH input plus a fixed
``target`` naming a pipeline configured on the retrieval worker; its output is
``MemorySearchResult[]`` carrying full MemoryItems. Validation, limits and output checks are
those of MEMORY.SEARCH (the SDK runs them), so a delegated search fails and succeeds exactly
like a native one.

``RemoteRetrievalSearchProvider(target=…)`` is a ``MemorySearchProvider`` for a MEMORY
worker: its ``search`` sends RETRIEVAL.SEARCH through a :class:`~ditto_worker.fleet.DittoClient`
and returns the results, so MEMORY.SEARCH's caller sees no difference (MEM-RET-2). The
call's cancel token and deadline pass on to the sub-call (MEM-RET-5): cancelling the outer
call cancels the inner one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

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
from ditto_worker.fleet.client import DittoClient
from ditto_worker.memory.core import Memory
from ditto_worker.memory.ports import MemoryCallOptions, MemorySearchProvider
from ditto_worker.memory.worker import NodeContext

__all__ = [
    "RemoteRetrievalSearchProvider",
    "RetrievalWorker",
    "create_retrieval_worker",
    "set_default_client",
]

MapOutput = Callable[[list[MemorySearchResult]], Sequence[MemorySearchResult | dict[str, Any]]]


class _SearchOnlyStore:
    """The store side of a retrieval target: RETRIEVAL runs SEARCH only."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise MemoryError(ErrorCode.UNKNOWN_NODE, "a retrieval target only searches")

    get = query = write = update = delete = _refuse


@dataclass(frozen=True)
class RetrievalWorker:
    """The RETRIEVAL worker definition: one search pipeline per target name.

    Attributes:
        targets: target name -> the SDK over that target's search provider.
        concurrency: pool size hint (``workers.retrieval.concurrency``), or ``None``.
    """

    targets: Mapping[str, Memory]
    concurrency: int | None = None

    def handle(self, node: str, input: Any, ctx: NodeContext) -> NodeResult[Any]:
        """Answer one RETRIEVAL.SEARCH call; never raises.

        Returns:
            The MEMORY.SEARCH NodeResult of the target's pipeline, labelled
            ``RETRIEVAL.SEARCH``; ``failed`` with ``UNKNOWN_NODE`` for another node,
            ``INVALID_INPUT`` for a missing or malformed ``target``, ``UNKNOWN_TARGET``
            for a target this worker does not serve.
        """
        if node != RETRIEVAL_SEARCH:
            return NodeResult.failure(ctx.execution_id, str(node), ErrorCode.UNKNOWN_NODE,
                                      f"unknown node {node!r}")  # fmt: skip
        if not isinstance(input, Mapping) or "target" not in input:
            return self._fail(ctx, ErrorCode.INVALID_INPUT, "Invalid input: target: Field required")
        try:
            target = RetrievalTarget.model_validate(input["target"])
        except ValidationError:
            return self._fail(ctx, ErrorCode.INVALID_INPUT, "Invalid input: target: not a target")
        memory = self.targets.get(target.name)
        if memory is None:
            return self._fail(ctx, "UNKNOWN_TARGET", f"no retrieval target {target.name[:40]!r}")
        rest = {k: v for k, v in input.items() if k != "target"}
        result = memory.execute("MEMORY.SEARCH", rest, ctx.defaults, cancel=ctx.cancel,
                                execution_id=ctx.execution_id, deadline=ctx.deadline,
                                scope=ctx.scope)  # fmt: skip
        return result.model_copy(update={"node": RETRIEVAL_SEARCH})

    @staticmethod
    def _fail(ctx: NodeContext, code: str, message: str) -> NodeResult[Any]:
        return NodeResult.failure(ctx.execution_id, RETRIEVAL_SEARCH, code, message)


def create_retrieval_worker(
    targets: Mapping[str, MemorySearchProvider],
    defaults: MemoryDefaults | Mapping[str, Any] | None = None,
    concurrency: int | None = None,
) -> RetrievalWorker:
    """Register RETRIEVAL.SEARCH over the given pipelines (one per target name).

    Args:
        targets: target name -> a search provider (e.g. from
            ``create_retrieval_memory_search_provider`` or a store's native search).
        defaults: factory limits (``searchLimit``), as for ``create_memory``.
        concurrency: pool size hint.
    """
    memories = {
        name: Memory(_SearchOnlyStore(), provider, defaults) for name, provider in targets.items()
    }
    return RetrievalWorker(MappingProxyType(memories), concurrency)


_default_client: DittoClient | None = None
_default_factory: Callable[[], DittoClient] | None = None
_default_lock = threading.Lock()


def set_default_client(client: DittoClient | Callable[[], DittoClient] | None) -> bool:
    """Set the client a ``RemoteRetrievalSearchProvider`` without one uses (MEM-RET-5).

    Args:
        client: a client, a factory called on first use (the worker runtime passes one for
            its own fleet), or ``None`` to clear.
    """
    global _default_client, _default_factory
    with _default_lock:
        _default_client, _default_factory = None, None
        if isinstance(client, DittoClient):
            _default_client = client
        elif client is not None:
            _default_factory = client
    return True


def _default() -> DittoClient | None:
    global _default_client
    with _default_lock:
        if _default_client is None and _default_factory is not None:
            _default_client = _default_factory()
        return _default_client


class RemoteRetrievalSearchProvider:
    """A ``MemorySearchProvider`` that delegates to RETRIEVAL.SEARCH (MEM-RET-2/3/5).

    Args:
        target: the retrieval target, e.g. ``{"name": "memories"}``; fixed per provider.
        client: the client to send with; ``None`` inside a worker uses the worker's own
            fleet (set by the worker runtime), explicit always wins.
        map_output: optional batch mapping of the candidates (not needed when they
            carry full MemoryItems, as ours do).
        timeout_s: timeout of the sub-call when the outer call has no deadline.

    The outer call's scope travels with the sub-call (its ``ditto_scope`` header); the
    retrieval worker's store confines the search to it (:mod:`ditto_worker.memory.scope`).
    """

    supports_scope = True

    def __init__(
        self,
        target: RetrievalTarget | Mapping[str, Any],
        *,
        client: DittoClient | None = None,
        map_output: MapOutput | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.target = RetrievalTarget.model_validate(target)
        self.client = client
        self.map_output = map_output
        self.timeout_s = timeout_s

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult | dict[str, Any]]:
        """Run the search on the retrieval queue; same contract as a native search.

        Raises:
            MemoryError: the sub-call's error code and message (``MEMORY_CANCELLED`` /
                ``MEMORY_TIMEOUT`` when it was cancelled or timed out);
                ``SEARCH_UNAVAILABLE`` when no client is available.
        """
        client = self.client or _default()
        if client is None:
            raise MemoryError(ErrorCode.SEARCH_UNAVAILABLE, "no fleet client for retrieval")
        options = options or MemoryCallOptions()
        timeout = self.timeout_s if options.deadline is None else options.deadline - time.time()
        payload = {**to_wire(input), "target": to_wire(self.target)}
        result = client.invoke(RETRIEVAL_SEARCH, payload, timeout=timeout, cancel=options.cancel,
                               scope=options.scope)  # fmt: skip
        if result.status != "success" or result.output is None:
            error = result.error
            raise MemoryError(
                error.code if error else ErrorCode.MEMORY_BACKEND_ERROR,
                error.message if error else "the retrieval call failed",
            )
        hits: list[MemorySearchResult] = list(result.output)
        return self.map_output(hits) if self.map_output else hits
