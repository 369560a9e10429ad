"""``RemoteRetrievalSearchProvider``: a MEMORY search provider that calls RETRIEVAL.SEARCH.

A ``MemorySearchProvider`` for a MEMORY worker (MEM-RET-2/3/5): its ``search`` invokes
RETRIEVAL.SEARCH and returns the results, so MEMORY.SEARCH's caller sees no difference.
Inside a worker it needs no client: it uses the call's own runtime
(``MemoryCallOptions.runtime``, the call's ``NodeContext.invoke``), so the sub-call
inherits the call's deadline, cancellation and scope: cancelling the outer call cancels
the inner one. An explicit client always wins.

It lives in the SDK (it speaks only the node contract, never the RETRIEVAL package) so
the MEMORY worker reaches it without importing :mod:`ditto_worker.retrieval`; the old
path ``ditto_worker.retrieval.delegation`` re-exports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ditto_worker.contracts import (
    RETRIEVAL_SEARCH,
    MemorySearchInput,
    MemorySearchResult,
    NodeResult,
    RetrievalTarget,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["Invoker", "MapOutput", "RemoteRetrievalSearchProvider"]

MapOutput = Callable[[list[MemorySearchResult]], Sequence[MemorySearchResult | dict[str, Any]]]


class Invoker(Protocol):
    """Anything with ``invoke(node, input, *, timeout, cancel, scope) -> NodeResult``: a
    ``DittoClient``, a ``Runtime``."""

    def invoke(self, node: str, input: Any, **kwargs: Any) -> NodeResult[Any]: ...


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
