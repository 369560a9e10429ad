"""``create_ditto``: one runtime for every worker kind, embedded or on the fleet (MEM-RT).

The seed's ``createDitto({config, workers: [createMemoryWorker(...), createContextWorker(),
…]})``. :func:`create_ditto` returns a :class:`Runtime` with ``invoke`` / ``ainvoke`` /
``close`` (``run`` / ``loop`` compose Graphs of node calls on top of them):

* no broker configured (``fleet.brokerUrl`` / ``DITTO_BROKER_URL`` empty): the definitions
  run in this process (:class:`~ditto_worker.runtime.embedded.EmbeddedRuntime`), and
  Celery is never imported;
* a broker configured: the caller is a client only (a
  :class:`~ditto_worker.fleet.DittoClient`); the definitions it was given say which node
  ids exist (``UNKNOWN_NODE`` before sending) and how to parse their outputs, and workers
  started with ``ditto-worker worker`` run them.

Callers cannot tell the two apart except by speed (MEM-RT-2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.scope import Scope, parse_scope
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.definition import WorkerDefinition, WorkerSource
from ditto_worker.runtime.registry import worker_definitions

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig

__all__ = ["Runtime", "create_ditto"]


class Invoker(Protocol):
    """What runs node calls: the embedded runtime or a fleet client."""

    def invoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = ...,
        cancel: CancelToken | None = ...,
        execution_id: str | None = ...,
        scope: Scope | Mapping[str, str] | None = ...,
        deadline: float | None = ...,
    ) -> NodeResult[Any]: ...

    async def ainvoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = ...,
        cancel: CancelToken | None = ...,
        execution_id: str | None = ...,
        scope: Scope | Mapping[str, str] | None = ...,
        deadline: float | None = ...,
    ) -> NodeResult[Any]: ...

    def close(self, timeout_s: float = 30.0) -> None: ...


class Runtime:
    """Node calls by id, embedded or on the fleet (build with :func:`create_ditto`).

    Attributes:
        definitions: the worker definitions this runtime knows.
        embedded: ``True`` when the definitions run in this process.
    """

    def __init__(
        self, definitions: Sequence[WorkerDefinition], invoker: Invoker, embedded: bool
    ) -> None:
        self.definitions = list(definitions)
        self.embedded = embedded
        self._invoker = invoker

    @property
    def nodes(self) -> list[str]:
        """Every node id this runtime can call."""
        return [node for d in self.definitions for node in d.nodes]

    def invoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> NodeResult[Any]:
        """Run one node call and wait for its NodeResult.

        Args:
            node: a node id of one of the definitions (``MEMORY.GET``, ``CONTEXT.UPDATE`` …).
            input: the node input: JSON data (wire names) or a contract model.
            timeout: seconds; default ``fleet.callTimeoutS``.
            cancel: cancelling it cancels the call (``cancelled``, the kind's code).
            execution_id: the call id (idempotency); a new uuid4 when omitted.
            scope: the trusted tenant scope (``Scope`` or ``{tenant, user}``), never from
                model output; default: the runtime's ``scope``.
            deadline: an absolute deadline (``time.time()`` s); the earlier of it and
                ``timeout`` holds.

        Returns:
            The call's NodeResult: ``success``, or ``failed`` / ``cancelled`` / ``timeout``
            with a code (``UNKNOWN_NODE`` for an id no definition has, before anything
            runs; ``INVALID_INPUT`` for input that is not JSON data); never raises for a
            call failure.
        """
        return self._invoker.invoke(node, input, timeout=timeout, cancel=cancel,
                                    execution_id=execution_id, scope=scope,
                                    deadline=deadline)  # fmt: skip

    async def ainvoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> NodeResult[Any]:
        """:meth:`invoke` for asyncio. Cancelling the awaiting task cancels the call and
        re-raises ``asyncio.CancelledError`` (MEM-PY-2)."""
        return await self._invoker.ainvoke(node, input, timeout=timeout, cancel=cancel,
                                           execution_id=execution_id, scope=scope,
                                           deadline=deadline)  # fmt: skip

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain accepted calls, then release what the runtime owns (MEM-RUN-3:
        application-owned plugin objects are not closed)."""
        self._invoker.close(timeout_s)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_ditto(
    workers: Sequence[WorkerSource] | None = None,
    config: RuntimeConfig | None = None,
    *,
    scope: Scope | Mapping[str, str] | None = None,
) -> Runtime:
    """A runtime over worker definitions (the seed's ``createDitto``; MEM-RT-2).

    Args:
        workers: definitions (``create_memory_worker(store)``, ``create_context_worker()``
            …) or zero-argument factories; ``None``: every installed and configured kind
            (:func:`~ditto_worker.runtime.registry.worker_definitions`).
        config: the runtime config; ``None``: built-in defaults plus ``DITTO_*`` env
            (``ditto.yaml`` is read only when passed: ``load_runtime_config_file``).
        scope: the trusted tenant scope of calls that name none.

    Returns:
        An embedded :class:`Runtime` when ``config.fleet`` names no broker (no Celery
        import), else a fleet client.

    Raises:
        ConfigError: two definitions serve one node id; a malformed ``scope``.
    """
    if config is None:
        from ditto_worker.config import load_runtime_config

        config = load_runtime_config(None)
    definitions = (
        worker_definitions(config)
        if workers is None
        else [w if isinstance(w, WorkerDefinition) else w() for w in workers]
    )
    try:
        bound = parse_scope(scope)
    except MemoryError as exc:
        raise ConfigError(exc.safe_message) from None
    if config.fleet.in_process:
        from ditto_worker.runtime.embedded import EmbeddedRuntime

        return Runtime(definitions, EmbeddedRuntime(definitions, config, bound), embedded=True)
    from ditto_worker.fleet.client import DittoClient
    from ditto_worker.runtime.registry import node_table

    client = DittoClient.from_fleet(config.fleet, nodes=node_table(definitions), scope=bound)
    return Runtime(definitions, client, embedded=False)
