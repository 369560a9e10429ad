"""Running Graphs and loops of Graphs on any runtime (SPEC.md MEM-GRAPH-1..4).

:class:`GraphRunner` drives a :class:`~ditto_worker.runtime.graphs.Graph` with asyncio on
the caller's thread, every node call through the runtime's own ``ainvoke`` (the embedded
thread pools, or the fleet client: the same transport as a single call):

* a node starts as soon as every one of its deps has ended; nodes whose deps have ended
  run at once. Its ``bind(input, results)`` runs on the caller's loop just before the
  call; a ``bind`` that raises gives the node ``failed`` / ``GRAPH_BIND_FAILED`` (the
  message names the exception type only, or a ``NodeError``'s code and safe message) and its
  dependents do not start (they end ``failed`` / ``GRAPH_BIND_FAILED`` too). A node's own
  failure stops nothing: its dependents' binds see its NodeResult.
* every call carries the run's trace (run id, Graph name, Graph node id;
  :mod:`ditto_worker.runtime.trace`) and the run's cancel token; its timeout is the
  runtime's call timeout (``fleet.callTimeoutS``) cut to what is left of the run's.
* cancelling the run (its token, or the task awaiting ``arun``) cancels the calls in
  flight through the runtime's own path (fleet: revoke + the Redis cancel flag; embedded:
  the handler's token) and starts no more; past the run's deadline nothing more starts
  and the calls in flight end by that deadline. Calls in flight get
  :data:`STOP_GRACE_S` to report after the run stopped; one that has not is cancelled
  and recorded with its kind's cancelled / timeout code.

``aloop`` drives a plan under one budget of Graphs (:mod:`ditto_worker.runtime.graph_loop`;
MEM-GRAPH-4).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from ditto_worker.contracts import ErrorInfo, NodeResult
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.definition import KindCodes
from ditto_worker.runtime.graph_loop import Plan, run_loop
from ditto_worker.runtime.graphs import (
    Bind,
    Graph,
    GraphError,
    GraphNode,
    GraphResult,
    GraphStatus,
    LoopResult,
)
from ditto_worker.runtime.trace import GRAPH, GRAPH_NODE, RUN_ID
from ditto_worker.scope import missing_scope, parse_scope

__all__ = ["STOP_GRACE_S", "GraphRunner", "Plan"]

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0
"""How long calls in flight may take to report once their run is cancelled or past its
deadline, seconds (the fleet client reports a cancel as soon as the cancel flag is set)."""

AInvoke = Callable[..., Awaitable[NodeResult[Any]]]
"""``ainvoke(node, input, *, timeout, cancel, scope, trace, operation_id) -> NodeResult``."""


def _new_id() -> str:
    return uuid.uuid4().hex


def _noop() -> None:
    return None


class _Ended:
    """A node's end: its result, and whether its call was made."""

    __slots__ = ("result", "started")

    def __init__(self, result: NodeResult[Any], started: bool) -> None:
        self.result = result
        self.started = started


class _Run:
    """The state of one Graph run (see the module docstring)."""

    def __init__(
        self, runner: GraphRunner, plan: Graph, input: Any, deadline: float | None,
        scope: Any, run_id: str,
    ) -> None:  # fmt: skip
        self.runner = runner
        self.plan = plan
        self.input = input
        self.deadline = deadline
        self.scope = scope
        self.run_id = run_id
        self.token = CancelToken()
        self.results: dict[str, NodeResult[Any]] = {}
        self.not_started: set[str] = set()
        self.waiting = {n.id: len(n.deps) for n in plan.nodes}
        self.dependents: dict[str, list[GraphNode]] = {n.id: [] for n in plan.nodes}
        for n in plan.nodes:
            for dep in n.deps:
                self.dependents[dep].append(n)
        self.running: dict[asyncio.Task[_Ended], GraphNode] = {}
        self.changed = asyncio.Event()  # a call ended, the token was cancelled, the deadline
        self.stop: GraphStatus | None = None

    # --- one node -------------------------------------------------------------------------

    def _not_started(self, node: GraphNode, code: str, message: str,
                     status: GraphStatus = "failed") -> NodeResult[Any]:  # fmt: skip
        return NodeResult.failure(_new_id(), node.node_type, code, message, status)

    def _bind_failed(self, node: GraphNode, exc: Exception) -> NodeResult[Any]:
        detail = (
            f"{exc.code}: {exc.safe_message}" if isinstance(exc, NodeError) else type(exc).__name__
        )
        log.warning(
            "graph %s run %s: the bind of node %s raised %s\n%s", self.plan.name, self.run_id,
            node.id, type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )  # fmt: skip
        return self._not_started(node, ErrorCode.GRAPH_BIND_FAILED,
                                 f"the bind of node {node.id!r} raised: {detail}")  # fmt: skip

    async def _call(self, node: GraphNode, bind: Bind | None) -> _Ended:
        deps = MappingProxyType({d: self.results[d] for d in node.deps})
        try:
            value = self.input if bind is None else bind(self.input, deps)
            if bind is not None and inspect.isawaitable(value):
                value = await value
            operation_id = node.operation(self.input, deps)
        except Exception as exc:
            return _Ended(self._bind_failed(node, exc), False)
        trace = {RUN_ID: self.run_id, GRAPH: self.plan.name, GRAPH_NODE: node.id}
        try:
            scope = self._scope_of(node)
        except NodeError as exc:
            return _Ended(NodeResult.failure(_new_id(), node.node_type, exc.code,
                                             exc.safe_message), False)  # fmt: skip
        timeout = self.runner.call_timeout_s if node.timeout is None else node.timeout
        try:  # the call's deadline: the earlier of the call timeout and the run's deadline
            result = await self.runner.ainvoke(
                node.node_type, value, timeout=timeout, deadline=self.deadline,
                cancel=self.token, scope=scope, trace=trace, operation_id=operation_id,
            )  # fmt: skip
        except Exception:  # an invoker never raises for a call failure: a bug, kept local
            log.exception("graph %s run %s: the call of node %s raised", self.plan.name,
                          self.run_id, node.id)  # fmt: skip
            result = NodeResult.failure(_new_id(), node.node_type,
                                        self.runner.codes(node.node_type).failed,
                                        "the call failed; see the caller's log")  # fmt: skip
        return _Ended(result, True)

    def _scope_of(self, node: GraphNode) -> Any:
        """The run's scope, in the node's ``space`` when it names one.

        Raises:
            NodeError: ``PERMISSION_DENIED`` when the node names a space and the run has
                no scope (a space is only ever one of the trusted tenant and user).
        """
        if node.space is None:
            return self.scope
        bound = parse_scope(self.scope)
        if bound is None:
            raise NodeError(ErrorCode.PERMISSION_DENIED,
                            missing_scope(f"node {node.id!r} names a space"))  # fmt: skip
        return bound.in_space(node.space)

    def _start(self, node: GraphNode) -> None:
        if self.stop is not None:
            code, message = (
                (ErrorCode.GRAPH_CANCELLED, "not started: the run was cancelled")
                if self.stop == "cancelled"
                else (ErrorCode.GRAPH_TIMEOUT, "not started: the run's deadline passed")
            )
            self._end(node, _Ended(self._not_started(node, code, message, self.stop), False))
            return
        blocked = next((d for d in node.deps if d in self.not_started), None)
        if blocked is not None:
            message = f"not started: its dep {blocked!r} did not start"
            self._end(node, _Ended(self._not_started(node, ErrorCode.GRAPH_BIND_FAILED,
                                                      message), False))  # fmt: skip
            return
        task = asyncio.get_running_loop().create_task(self._call(node, node.bound()))
        task.add_done_callback(self._wake)
        self.running[task] = node

    def _wake(self, _: object = None) -> None:
        self.changed.set()

    def _end(self, node: GraphNode, ended: _Ended) -> None:
        self.results[node.id] = ended.result
        if not ended.started:
            self.not_started.add(node.id)
        for dependent in self.dependents[node.id]:
            self.waiting[dependent.id] -= 1
            if self.waiting[dependent.id] == 0:
                self._start(dependent)

    # --- the run --------------------------------------------------------------------------

    async def run(self, cancel: CancelToken | None) -> GraphResult:
        loop = asyncio.get_running_loop()

        def on_cancel() -> None:  # any thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: the run has ended
                loop.call_soon_threadsafe(self._wake)

        unlink_wake = self.token.on_cancel(on_cancel)
        unlink_user = cancel.link(self.token) if cancel is not None else _noop
        timer = None
        if self.deadline is not None:
            timer = loop.call_at(loop.time() + self.deadline - time.time(), self._wake)
        try:
            self._check_stop()
            for node in self.plan.nodes:
                if not node.deps:
                    self._start(node)
            while self.running:
                await self._step()
            if any(r.status != "success" for r in self.results.values()):
                self._check_stop()  # the last calls ended as the run stopped: it did
        except asyncio.CancelledError:
            self.token.cancel()
            await self._drain()
            raise
        finally:
            if timer is not None:
                timer.cancel()
            unlink_user()
            unlink_wake()
        return self._result()

    def _check_stop(self) -> None:
        if self.stop is None:  # the token decides cancelled vs timeout (MEM-RUN-6)
            self.stop = self.token.outcome(self.deadline)

    async def _step(self) -> None:
        self._check_stop()
        if self.stop is not None:
            await self._drain()
            return
        await self.changed.wait()
        self.changed.clear()
        for task in [t for t in self.running if t.done()]:  # in start order
            self._end(self.running.pop(task), task.result())

    async def _drain(self) -> None:
        """The run has stopped: let the calls in flight report (up to STOP_GRACE_S), then
        cancel and record the rest; nothing new starts."""
        if self.stop is None:
            self.stop = "cancelled"
        if self.stop == "cancelled":
            self.token.cancel()
        # past the deadline the calls end by themselves: each has the run's deadline or less;
        # those that do not are stopped with the run's reason (a timeout is never a cancel)
        while self.running:
            _, pending = await asyncio.wait(set(self.running), timeout=STOP_GRACE_S)
            for task in [t for t in self.running if t.done()]:
                self._end(self.running.pop(task), task.result())
            if not pending:
                continue
            self.token.cancel("timeout" if self.stop == "timeout" else "cancelled")
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=STOP_GRACE_S)
            for task in pending:
                node = self.running.pop(task)
                codes = self.runner.codes(node.node_type)
                code = codes.cancelled if self.stop == "cancelled" else codes.timeout
                result = self._not_started(
                    node, code, "the call did not report after its run stopped", self.stop
                )
                self._end(node, _Ended(result, True))

    def _first_failure(self) -> ErrorInfo:
        """The failed Graph's error: the first node to end without success (in the order
        nodes ended; ``self.results`` is filled in that order) and its code."""
        node_id, failed = next((n, r) for n, r in self.results.items() if r.status != "success")
        code = failed.error.code if failed.error is not None else failed.status
        detail = f": {failed.error.message}" if failed.error is not None else ""
        verb = "failed" if failed.status == "failed" else f"ended {failed.status}"
        message = f"node {node_id!r} ({failed.node}) {verb} first with {code}{detail}"
        return ErrorInfo(code=code, message=message)

    def _result(self) -> GraphResult:
        results = {n.id: self.results[n.id] for n in self.plan.nodes}
        error = None
        if self.stop is not None:
            status: GraphStatus = self.stop
            code = ErrorCode.GRAPH_CANCELLED if status == "cancelled" else ErrorCode.GRAPH_TIMEOUT
            message = "the run was cancelled" if status == "cancelled" else "the run timed out"
            error = ErrorInfo(code=code, message=message)
        elif all(r.status == "success" for r in results.values()):
            status = "success"
        else:
            status = "failed"
            error = self._first_failure()
        return GraphResult.model_construct(
            run_id=self.run_id, graph=self.plan.name, status=status, results=results,
            deps=self.plan.deps, error=error,
        )  # fmt: skip


class GraphRunner:
    """Runs Graphs and loops through one ``ainvoke`` (``Runtime`` builds it).

    Args:
        ainvoke: the runtime's ``ainvoke`` (accepting ``trace=``).
        codes: node id -> its kind's codes, for every node the runtime serves.
        call_timeout_s: a node call's timeout when the run's deadline is later
            (``fleet.callTimeoutS``).
        loop_budget: Graphs a loop may run by default (``graph.loopBudget``, 1024).
    """

    def __init__(
        self,
        ainvoke: AInvoke,
        codes: Mapping[str, KindCodes],
        call_timeout_s: float,
        loop_budget: int,
    ) -> None:
        self.ainvoke = ainvoke
        self._codes = dict(codes)
        self.call_timeout_s = call_timeout_s
        self.loop_budget = loop_budget

    def codes(self, node_type: str) -> KindCodes:
        """The codes of ``node_type``'s kind."""
        return self._codes.get(node_type) or KindCodes.for_kind(node_type.split(".")[0])

    def check(self, plan: Any) -> Graph:
        """``plan`` if it is a Graph whose node types this runtime serves.

        Raises:
            GraphError: not a Graph, or a node type the runtime does not serve.
        """
        if not isinstance(plan, Graph):
            raise GraphError(f"expected a Graph (graph(name).node(...)), got {type(plan).__name__}")
        plan.check(self._codes)
        return plan

    async def arun(
        self,
        plan: Graph,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Any = None,
        run_id: str | None = None,
        deadline: float | None = None,
    ) -> GraphResult:
        """Run ``plan`` with ``input``; see ``Runtime.arun``.

        Raises:
            GraphError: see :meth:`check`; before any node runs.
            asyncio.CancelledError: the awaiting task was cancelled (calls in flight are
                cancelled first).
        """
        self.check(plan)
        if timeout is not None:
            end = time.time() + timeout
            deadline = end if deadline is None else min(deadline, end)
        run = _Run(self, plan, input, deadline, scope, run_id or _new_id())
        return await run.run(cancel)

    async def aloop(
        self,
        plan: Plan,
        input: Any,
        *,
        budget: int | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        scope: Any = None,
        run_id: str | None = None,
    ) -> LoopResult:
        """Run a plan; see ``Runtime.aloop``.

        Raises:
            GraphError: ``plan`` is not a generator function, ``budget`` < 1, or the plan
                let a GraphError it was given (a bad step, an unknown node type) escape.
            Exception: whatever else the plan raised (not a ``NodeError``).
        """
        budget = self.loop_budget if budget is None else budget
        return await run_loop(self, plan, input, budget, timeout, cancel, scope,
                              run_id or _new_id())  # fmt: skip
