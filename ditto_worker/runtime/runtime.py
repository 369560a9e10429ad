"""``create_ditto``: one runtime for every worker kind, embedded or on the fleet (MEM-RT).

The seed's ``createDitto({config, workers: [createMemoryWorker(...), createContextWorker(),
…]})``. :func:`create_ditto` returns a :class:`Runtime` with ``invoke`` / ``ainvoke`` /
``close`` (``run`` / ``loop`` compose Graphs of node calls on top of them):

* no broker configured (``fleet.brokerUrl`` / ``DITTO_BROKER_URL`` empty): the definitions
  run in this process (:class:`~ditto_worker.runtime.embedded.EmbeddedRuntime`), and
  Celery is never imported;
* a broker configured: the caller is a client only, of the transport ``fleet.transport``
  names (an entry point of ``ditto_worker.transports``, found the way worker kinds are:
  ``celery``, the fleet's ``DittoClient``); the definitions it was given say which node
  ids exist (``UNKNOWN_NODE`` before sending) and how to parse their outputs, and workers
  started with ``ditto-worker worker`` run them.

Callers cannot tell the two apart except by speed (MEM-RT-2).
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.runtime.calls import CallOptions, Invoking
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.definition import WorkerDefinition, WorkerSource
from ditto_worker.runtime.graphs import DEFAULT_LOOP_BUDGET, Graph, GraphResult, LoopResult
from ditto_worker.runtime.registry import connect_transport, node_table, worker_definitions
from ditto_worker.scope import Scope, parse_scope

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig
    from ditto_worker.runtime.graph_loop import Plan
    from ditto_worker.runtime.graph_runner import GraphRunner

__all__ = ["Runtime", "create_ditto"]

T = TypeVar("T")


class Runtime(Invoking):
    """Node calls by id, embedded or on the fleet (build with :func:`create_ditto`):
    ``invoke`` / ``ainvoke`` as :class:`~ditto_worker.runtime.calls.Invoking` describes (the
    caller's call timeout is ``fleet.callTimeoutS``, its scope the runtime's ``scope``).

    Attributes:
        definitions: the worker definitions this runtime knows.
        embedded: ``True`` when the definitions run in this process.
    """

    def __init__(
        self,
        definitions: Sequence[WorkerDefinition],
        invoker: Invoking,
        embedded: bool,
        config: RuntimeConfig | None = None,
    ) -> None:
        self.definitions = list(definitions)
        self.embedded = embedded
        self._invoker = invoker
        self._config = config
        self._graph_runner: GraphRunner | None = None

    @property
    def _graphs(self) -> GraphRunner:
        """The Graph/Loop runner, built on the first run (asyncio is imported then, not
        with the SDK)."""
        if self._graph_runner is None:
            from ditto_worker.runtime.graph_runner import GraphRunner

            config = self._config
            codes = {node: d.kind_codes for d in self.definitions for node in d.nodes}
            self._graph_runner = GraphRunner(
                self.ainvoke,
                codes,
                call_timeout_s=config.fleet.call_timeout_s if config is not None else 30.0,
                loop_budget=(
                    config.graph.loop_budget if config is not None else DEFAULT_LOOP_BUDGET
                ),
            )
        return self._graph_runner

    @property
    def config(self) -> RuntimeConfig | None:
        """The runtime config it was built with (``create_ditto``'s), if any."""
        return self._config

    @property
    def nodes(self) -> list[str]:
        """Every node id this runtime can call."""
        return [node for d in self.definitions for node in d.nodes]

    def _invoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        return self._invoker.invoke(node, input, **options.kwargs())

    async def _ainvoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        return await self._invoker.ainvoke(node, input, **options.kwargs())

    # --- Graphs and loops (MEM-GRAPH) -------------------------------------------------------

    def run(
        self,
        plan: Graph,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> GraphResult:
        """Run a Graph and wait for every node (the seed's ``runtime.run(plan, input)``).

        Runs :meth:`arun` on an event loop of its own (in a helper thread when called from
        a running loop).

        Args:
            plan: a :func:`~ditto_worker.runtime.graphs.graph`.
            input: the run input each ``bind`` gets.
            timeout: the run's deadline, seconds from now; every node's deadline is cut to
                it. ``None``: each node has the call timeout (``fleet.callTimeoutS``).
            cancel: cancelling it cancels the nodes in flight and starts no more.
            scope: the trusted tenant scope of every node call (default: the runtime's).
            run_id: the run's id (the ``ditto_run_id`` header); a new uuid when omitted.

        Returns:
            A :class:`~ditto_worker.runtime.graphs.GraphResult`: status, every node's
            NodeResult, the dependency edges (MEM-GRAPH-2/3/5).

        Raises:
            GraphError: a node type this runtime does not serve; before anything runs.
        """
        return _blocking(self.arun(plan, input, timeout=timeout, cancel=cancel, scope=scope,
                                   run_id=run_id))  # fmt: skip

    async def arun(
        self,
        plan: Graph,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> GraphResult:
        """:meth:`run` for asyncio: nodes are tasks on the caller's loop, each call made
        with :meth:`ainvoke`. Cancelling the awaiting task cancels the nodes in flight (as
        ``cancel`` does) and re-raises ``asyncio.CancelledError``."""
        return await self._graphs.arun(plan, input, timeout=timeout, cancel=cancel, scope=scope,
                                       run_id=run_id)  # fmt: skip

    def loop(
        self,
        plan: Plan,
        input: Any,
        *,
        budget: int | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> LoopResult:
        """Run a plan of Graphs (the seed's ``runtime.loop(plan, input)``; MEM-GRAPH-4).

        ``plan(input)`` is a generator (sync, or async) that yields ``(graph, input)`` and
        receives each :class:`~ditto_worker.runtime.graphs.GraphResult`; its return value
        is the loop's ``output``. Sub-plans joined with ``yield from`` share the budget.

        Args:
            plan: the generator function.
            input: its argument.
            budget: Graphs the loop may run (default ``graph.loopBudget``, 1024), recovery
                and repeated stages included. The yield past it raises
                :class:`~ditto_worker.runtime.graphs.GraphBudgetExhausted` in the plan;
                uncaught (or asked again), the loop ends ``failed`` /
                ``GRAPH_BUDGET_EXHAUSTED``.
            timeout: seconds for the whole loop (every Graph's deadline is cut to it).
            cancel: cancels the Graph in flight; the plan is closed, not resumed.
            scope: the trusted tenant scope of every node call.
            run_id: the loop's id; its Graphs run as ``<run_id>.<n>``.

        Returns:
            A :class:`~ditto_worker.runtime.graphs.LoopResult` with every Graph it ran.

        Raises:
            GraphError: ``plan`` is not a generator function; the plan let a GraphError
                escape (a step that is not ``(graph, input)``, an unknown node type —
                raised into the plan at its ``yield`` first).
            Exception: anything else the plan raised (a ``NodeError`` ends the loop
                ``failed`` with its code instead).
        """
        return _blocking(self.aloop(plan, input, budget=budget, timeout=timeout, cancel=cancel,
                                    scope=scope, run_id=run_id))  # fmt: skip

    async def aloop(
        self,
        plan: Plan,
        input: Any,
        *,
        budget: int | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> LoopResult:
        """:meth:`loop` for asyncio (the plan may be an async generator). Cancelling the
        awaiting task cancels the Graph in flight, closes the plan and re-raises."""
        return await self._graphs.aloop(plan, input, budget=budget, timeout=timeout,
                                        cancel=cancel, scope=scope, run_id=run_id)  # fmt: skip

    def open(self, nodes: Sequence[str] | None = None) -> None:
        """Run the definitions' ``open`` hooks now (load a model, build a store), e.g. at
        application start; embedded only. Without it each definition opens before its
        first call, outside that call's timeout. On the fleet this does nothing: every
        worker process opens its definitions before it announces ready.

        Args:
            nodes: node ids whose definitions to open; ``None``: all.

        Raises:
            Exception: whatever a hook raised.
        """
        opener = getattr(self._invoker, "open", None)
        if self.embedded and callable(opener):
            opener(nodes)

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain accepted calls, then release what the runtime owns (MEM-RUN-3:
        application-owned plugin objects are not closed)."""
        self._invoker.close(timeout_s)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from synchronous code (a helper thread inside a running
    loop, whose thread must not block on itself)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="ditto-graph") as pool:
        return pool.submit(asyncio.run, coro).result()


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

        embedded = EmbeddedRuntime(definitions, config, bound)
        return Runtime(definitions, embedded, embedded=True, config=config)
    client = connect_transport(config, node_table(definitions), bound)
    return Runtime(definitions, client, embedded=False, config=config)
