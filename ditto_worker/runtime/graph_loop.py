"""Loops of Graphs: a plan generator under one budget (SPEC.md MEM-GRAPH-4).

A plan is a generator function: ``plan(input)`` yields ``(graph, input)`` steps and
receives each :class:`~ditto_worker.runtime.graphs.GraphResult`; its return value is the
loop's ``output``. :func:`run_loop` drives it (sync generators with ``send``/``throw``,
async ones with ``asend``/``athrow``):

* every Graph counts against one budget (``graph.loopBudget``, 1024 by default): sub-plans
  joined with ``yield from`` are the same generator chain, so they share it, recovery
  and repeated stages included. The ``yield`` past the budget gets
  :class:`~ditto_worker.runtime.graphs.GraphBudgetExhausted` raised into the plan;
  uncaught — or caught and followed by another ``yield`` — the loop ends ``failed`` /
  ``GRAPH_BUDGET_EXHAUSTED``;
* a step that is not ``(graph, input)``, or a Graph with a node type the runtime does not
  serve, is a :class:`~ditto_worker.runtime.graphs.GraphError` raised into the plan at
  its ``yield``; uncaught, it leaves the loop as an exception (a programming error);
* a :class:`~ditto_worker.errors.NodeError` raised by the plan ends the loop ``failed``
  with its code; any other exception propagates;
* the loop's cancel token and deadline bound every Graph; when a Graph ends
  ``cancelled`` / ``timeout`` (or the loop was stopped between Graphs) the plan is closed
  (its ``finally`` blocks run), not resumed.

Each Graph runs as ``<loop run id>.<n>`` (``ditto_run_id``), so a loop is followed across
workers by its id.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any, Protocol

from ditto_worker.contracts import ErrorInfo
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.graphs import (
    Graph,
    GraphBudgetExhausted,
    GraphError,
    GraphResult,
    GraphStatus,
    LoopResult,
)

__all__ = ["GraphRunning", "Plan", "Step", "run_loop"]

Step = tuple[Graph, Any]
"""What a plan yields: ``(graph, input)``."""
Plan = Callable[[Any], Generator[Step, GraphResult, Any] | AsyncGenerator[Step, GraphResult]]
"""``plan(input)`` -> a generator (sync or async) yielding ``(graph, input)``."""


class GraphRunning(Protocol):
    """What a loop runs its Graphs with (a
    :class:`~ditto_worker.runtime.graph_runner.GraphRunner`)."""

    def check(self, plan: Any) -> Graph:
        """``plan`` if it is a Graph the runtime serves; raises ``GraphError`` if not."""

    async def arun(
        self, plan: Graph, input: Any, *, cancel: CancelToken | None = None, scope: Any = None,
        run_id: str | None = None, deadline: float | None = None,
    ) -> GraphResult:  # fmt: skip
        """Run one Graph of the loop under the loop's token and deadline."""


async def run_loop(
    runner: GraphRunning,
    plan: Plan,
    input: Any,
    budget: int,
    timeout: float | None,
    cancel: CancelToken | None,
    scope: Any,
    run_id: str,
) -> LoopResult:
    """Run ``plan(input)`` (see the module docstring); ``Runtime.aloop`` documents the
    arguments.

    Raises:
        GraphError: ``plan`` is not a generator function, ``budget`` < 1, or the plan let
            a GraphError escape.
        asyncio.CancelledError: the awaiting task was cancelled (the Graph in flight is
            cancelled and the plan closed first).
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise GraphError("budget must be an integer >= 1")
    driver = _Driver.of(plan, input)
    token = CancelToken()
    unlink = cancel.link(token) if cancel is not None else (lambda: None)
    deadline = None if timeout is None else time.time() + timeout
    loop = _Loop(runner, driver, budget, token, deadline, scope, run_id)
    try:
        return await loop.run()
    except asyncio.CancelledError:
        token.cancel()
        await driver.close()
        raise
    finally:
        unlink()


class _Done:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Driver:
    """Resumes a sync or async plan generator."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen
        self.is_async = inspect.isasyncgen(gen)

    @classmethod
    def of(cls, plan: Any, input: Any) -> _Driver:
        gen = plan(input) if callable(plan) else plan
        if not (inspect.isgenerator(gen) or inspect.isasyncgen(gen)):
            raise GraphError("a plan is a generator function: plan(input) yields (graph, input)")
        return cls(gen)

    async def resume(self, value: Any, error: BaseException | None) -> Any:
        """The plan's next step, or :class:`_Done` with its return value."""
        try:
            if self.is_async:
                if error is not None:
                    return await self.gen.athrow(error)
                return await self.gen.asend(value)
            if error is not None:
                return self.gen.throw(error)
            return self.gen.send(value)
        except StopIteration as stop:
            return _Done(stop.value)
        except StopAsyncIteration:
            return _Done(None)

    async def close(self) -> None:
        if self.is_async:
            await self.gen.aclose()
        else:
            self.gen.close()


class _Loop:
    def __init__(
        self, runner: GraphRunning, driver: _Driver, budget: int, token: CancelToken,
        deadline: float | None, scope: Any, run_id: str,
    ) -> None:  # fmt: skip
        self.runner = runner
        self.driver = driver
        self.budget = budget
        self.token = token
        self.deadline = deadline
        self.scope = scope
        self.run_id = run_id
        self.graphs: list[GraphResult] = []

    def _end(self, status: GraphStatus, output: Any = None,
             error: ErrorInfo | None = None) -> LoopResult:  # fmt: skip
        return LoopResult.model_construct(
            run_id=self.run_id, status=status, output=output, graphs=self.graphs,
            budget=self.budget, error=error,
        )  # fmt: skip

    def _stopped(self) -> GraphStatus | None:
        return self.token.outcome(self.deadline)  # MEM-RUN-6: a deadline is never a cancel

    def _failed(self, exc: NodeError) -> LoopResult:
        return self._end("failed", error=ErrorInfo(code=exc.code, message=exc.safe_message))

    async def _stop(self, status: GraphStatus) -> LoopResult:
        await self.driver.close()
        if status == "cancelled":
            error = ErrorInfo(code=ErrorCode.GRAPH_CANCELLED, message="the loop was cancelled")
        else:
            error = ErrorInfo(code=ErrorCode.GRAPH_TIMEOUT, message="the loop timed out")
        return self._end(status, error=error)

    async def run(self) -> LoopResult:
        sent: Any = None
        error: BaseException | None = None
        exhausted = False
        while True:
            try:
                step = await self.driver.resume(sent, error)
            except NodeError as exc:
                return self._failed(exc)
            if isinstance(step, _Done):
                return self._end("success", output=step.value)
            sent, error = None, None
            stopped = self._stopped()
            if stopped is not None:
                return await self._stop(stopped)
            if len(self.graphs) >= self.budget:
                if exhausted:  # the plan caught it and asked again
                    await self.driver.close()
                    return self._failed(GraphBudgetExhausted(self.budget))
                exhausted, error = True, GraphBudgetExhausted(self.budget)
                continue
            try:
                plan, input = _unpack(step)
                self.runner.check(plan)
            except GraphError as exc:
                error = exc
                continue
            result = await self.runner.arun(
                plan, input, cancel=self.token, scope=self.scope, deadline=self.deadline,
                run_id=f"{self.run_id}.{len(self.graphs)}",
            )  # fmt: skip
            self.graphs.append(result)
            if result.status in ("cancelled", "timeout"):
                return await self._stop(result.status)
            sent = result


def _unpack(step: Any) -> Step:
    if isinstance(step, tuple) and len(step) == 2 and isinstance(step[0], Graph):
        return step[0], step[1]
    raise GraphError(f"a plan yields (graph, input), not {type(step).__name__}")
