"""Graphs and loops on the embedded runtime (SPEC.md MEM-GRAPH; issue 17).

The same behaviour on a real fleet: tests/integration/test_graph_fleet.py. Concurrency
and ordering are proven without timing: handlers meet at a barrier (which only opens when
all of them are in at once) or wait on an event another node sets.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest

import ditto_worker
from ditto_worker import (
    CancelToken,
    ErrorCode,
    GraphBudgetExhausted,
    GraphError,
    GraphResult,
    NodeError,
    create_context_worker,
    create_ditto,
    create_memory_worker,
    graph,
    to_wire,
)
from ditto_worker.config import load_runtime_config
from ditto_worker.runtime import Graph, GraphNode, Runtime, WorkerDefinition
from ditto_worker.runtime.trace import TraceLogFilter, clean_trace, trace_repr
from ditto_worker.testing.memory_store import InMemoryMemoryStore
from tests.unit._graph_kit import (
    Echo,
    memory_graph,
    memory_to_context,
    seed_memories,
)

SLEEP = "ECHO.SLEEP"


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def runtime(echo: Echo) -> Iterator[Runtime]:
    rt = create_ditto([echo.definition()], load_runtime_config(None, env={}))
    yield rt
    rt.close()


def const(value: Any) -> Any:
    return lambda _input, _results: value


# --- building (MEM-GRAPH-1) ---------------------------------------------------------------


def test_graphs_are_immutable_and_keep_their_edges() -> None:
    # MEM-GRAPH-1, MEM-GRAPH-5
    base = graph("g").node("a", SLEEP)
    longer = base.node("b", SLEEP, ["a"]).node("c", SLEEP, ["a", "b"])
    assert [n.id for n in base.nodes] == ["a"]
    assert longer.deps == {"a": [], "b": ["a"], "c": ["a", "b"]}
    with pytest.raises(AttributeError):
        base.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: graph("g").node("a", SLEEP).node("a", SLEEP), "given twice"),
        (lambda: graph("g").node("a", SLEEP, ["nope"]), "'nope', which is not in the graph"),
        (lambda: graph("g").node("a", SLEEP, ["a"]), "depends on itself (a cycle)"),
        (lambda: graph("g").node("b", SLEEP, ["a"]).node("a", SLEEP), "not in the graph"),
        (lambda: graph("g").node("a", "memory.get"), "is not a node id"),
        (lambda: graph("g").node("a", SLEEP).node("b", SLEEP, "a"), "deps must be a list"),
        (lambda: graph("g").node("a", SLEEP).node("b", SLEEP, ["a", "a"]), "a dep twice"),
        (lambda: graph("g").node("a", SLEEP, [], bind="x"), "bind must be callable"),  # type: ignore[arg-type]
        (lambda: graph("g").node("", SLEEP), "non-empty"),
        (lambda: graph("two words"), "without spaces"),
        (
            lambda: Graph.of(
                "g",
                [
                    GraphNode("a", SLEEP, ["c"]),
                    GraphNode("b", SLEEP, ["a"]),
                    GraphNode("c", SLEEP, ["b"]),
                    GraphNode("d", SLEEP),
                ],
            ),
            "cycle among nodes 'a', 'b', 'c'",
        ),  # fmt: skip
        (lambda: Graph.of("g", [GraphNode("a", SLEEP, ["x"])]), "'x', which is not in"),
        (lambda: Graph.of("g", [GraphNode("a", SLEEP), GraphNode("a", SLEEP)]), "given twice"),
    ],
)
def test_builder_errors(build: Any, message: str) -> None:
    # MEM-GRAPH-1
    with pytest.raises(GraphError) as info:
        build()
    assert message in str(info.value)


def test_graph_of_accepts_any_order() -> None:
    g = Graph.of("g", [GraphNode("b", SLEEP, ["a"]), GraphNode("a", SLEEP)])
    assert [n.id for n in g.nodes] == ["a", "b"]


def test_unknown_node_type_is_refused_before_anything_runs(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-1
    plan = graph("g").node("a", SLEEP, [], const({"tag": "a"})).node("b", "ECHO.NOPE", ["a"])
    with pytest.raises(GraphError, match="'ECHO.NOPE', which this runtime does not serve"):
        runtime.run(plan, None)
    with pytest.raises(GraphError):
        plan.check(runtime.nodes)
    assert echo.calls == []


# --- running (MEM-GRAPH-1/2/3) --------------------------------------------------------------


def test_independent_nodes_run_at_once(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-1
    plan = graph("fan-out")
    for i in range(10):
        plan = plan.node(f"n{i}", SLEEP, [], const({"tag": f"n{i}", "barrier": True}))
    result = runtime.run(plan, None)
    assert result.status == "success", to_wire(result)
    calls = echo.by_tag()
    # the barrier opened, so all ten were in their handlers together; and the records agree
    assert max(c.start for c in calls.values()) < min(c.end for c in calls.values())
    assert [result.results[f"n{i}"].output for i in range(10)] == [
        {"tag": f"n{i}", "seen": ["graph", "graph_node", "run_id"]} for i in range(10)
    ]


def test_a_node_starts_as_soon_as_its_deps_ended(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-1
    # slow waits for an event that only 'after' sets; 'after' depends on 'first' alone, so it
    # must start while 'slow' is still running
    plan = (
        graph("g")
        .node("first", SLEEP, [], const({"tag": "first"}))
        .node("slow", SLEEP, [], const({"tag": "slow", "wait": "after-ran"}))
        .node("after", SLEEP, ["first"], const({"tag": "after", "set": "after-ran"}))
        .node("last", SLEEP, ["slow", "after"], const({"tag": "last"}))
    )
    result = runtime.run(plan, None)
    assert result.status == "success"
    calls = echo.by_tag()
    assert calls["first"].end <= calls["after"].start < calls["slow"].end
    assert max(calls["slow"].end, calls["after"].end) <= calls["last"].start
    assert result.deps == {"first": [], "slow": [], "after": ["first"], "last": ["slow", "after"]}


def test_bind_gets_the_input_and_only_its_deps_results(runtime: Runtime) -> None:
    # MEM-GRAPH-1
    seen: dict[str, Any] = {}

    def bind(input: Any, results: Any) -> Any:
        seen["input"], seen["keys"] = input, sorted(results)
        with pytest.raises(TypeError):
            results["x"] = None
        return {"tag": results["a"].output["tag"] + "+" + input}

    plan = (
        graph("g")
        .node("a", SLEEP, [], lambda input: {"tag": input})
        .node("z", SLEEP, [], const({"tag": "z"}))
        .node("b", SLEEP, ["a"], bind)
    )
    result = runtime.run(plan, "in")
    assert seen == {"input": "in", "keys": ["a"]}
    assert result.results["b"].output["tag"] == "in+in"


def test_no_bind_passes_the_run_input(runtime: Runtime) -> None:
    result = runtime.run(graph("g").node("a", SLEEP), {"tag": "given"})
    assert result.results["a"].output["tag"] == "given"


def test_bind_failure_stops_its_dependents_only(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-2
    plan = (
        graph("g")
        .node("a", SLEEP, [], const({"tag": "a"}))
        .node("broken", SLEEP, ["a"], lambda _i, _r: {}["missing"])
        .node("child", SLEEP, ["broken"], const({"tag": "child"}))
        .node("grandchild", SLEEP, ["child"], const({"tag": "grandchild"}))
        .node("coded", SLEEP, [], lambda _i: (_ for _ in ()).throw(NodeError("X_CODE", "why")))
        .node("other", SLEEP, ["a"], const({"tag": "other"}))
    )
    result = runtime.run(plan, None)
    assert result.status == "failed"
    assert result.failed_nodes == ["broken", "child", "grandchild", "coded"]
    broken = result.results["broken"]
    assert (broken.status, broken.error and broken.error.code) == ("failed", "GRAPH_BIND_FAILED")
    assert broken.error is not None and broken.error.message.endswith("raised: KeyError")
    coded = result.results["coded"].error
    assert coded is not None and coded.message.endswith("raised: X_CODE: why")
    for node in ("child", "grandchild"):
        error = result.results[node].error
        assert error is not None and error.code == ErrorCode.GRAPH_BIND_FAILED
    assert sorted(echo.by_tag()) == ["a", "other"]  # neither child nor grandchild ran


def test_a_failed_node_is_seen_by_its_dependents_bind(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-2
    def check(_input: Any, results: Any) -> Any:
        upstream = results["bad"]
        return {"tag": f"saw-{upstream.status}-{upstream.error.code}"}

    plan = (
        graph("g")
        .node("bad", SLEEP, [], const({"tag": "bad", "fail": "ECHO_BROKEN"}))
        .node("next", SLEEP, ["bad"], check)
    )
    result = runtime.run(plan, None)
    assert result.status == "failed"
    assert result.results["bad"].error is not None
    assert result.results["bad"].error.code == "ECHO_BROKEN"
    assert result.results["next"].status == "success"
    assert result.results["next"].output["tag"] == "saw-failed-ECHO_BROKEN"


def test_a_failed_graphs_error_names_the_first_failed_node_and_its_code(
    runtime: Runtime,
) -> None:
    # issue 23 item 5: "first" is the first node to end without success, not the first in
    # node order: "slow" is declared first but fails only after "then" (which depends on
    # "early") has started
    plan = (
        graph("g")
        .node("slow", SLEEP, [], const({"tag": "slow", "wait": "then", "fail": "ECHO_SLOW"}))
        .node("fine", SLEEP, [], const({"tag": "fine"}))
        .node("early", SLEEP, [], const({"tag": "early", "fail": "ECHO_BROKEN"}))
        .node("then", SLEEP, ["early"], const({"tag": "then", "set": "then", "fail": "ECHO_X"}))
    )
    result = runtime.run(plan, None)
    assert result.status == "failed"
    assert result.failed_nodes == ["slow", "early", "then"]
    assert result.error is not None
    assert result.error.code == "ECHO_BROKEN"
    assert result.error.message == (
        "node 'early' (ECHO.SLEEP) failed first with ECHO_BROKEN: asked to fail"
    )
    assert to_wire(result)["error"] == {"code": "ECHO_BROKEN", "message": result.error.message}


def test_a_failed_graphs_error_names_a_bind_failure(runtime: Runtime) -> None:
    def broken(_input: Any, _results: Any) -> Any:
        raise KeyError("x")

    result = runtime.run(graph("g").node("a", SLEEP, [], broken), None)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == ErrorCode.GRAPH_BIND_FAILED
    assert result.error.message.startswith("node 'a' (ECHO.SLEEP) failed first with ")


def test_a_successful_graph_has_no_error(runtime: Runtime) -> None:
    result = runtime.run(graph("g").node("a", SLEEP, [], const({"tag": "a"})), None)
    assert (result.status, result.error) == ("success", None)


def test_an_async_bind_is_awaited(runtime: Runtime) -> None:
    async def bind(input: Any, _results: Any) -> Any:
        await asyncio.sleep(0)
        return {"tag": f"async-{input}"}

    result = runtime.run(graph("g").node("a", SLEEP, [], bind), "x")
    assert result.results["a"].output["tag"] == "async-x"


def test_result_wire_form(runtime: Runtime) -> None:
    result = runtime.run(graph("g").node("a", SLEEP, [], const({"tag": "a"})), None, run_id="r1")
    wire = to_wire(result)
    assert wire["runId"] == "r1" and wire["graph"] == "g" and wire["status"] == "success"
    assert wire["deps"] == {"a": []} and "error" not in wire
    assert wire["results"]["a"]["node"] == SLEEP
    assert GraphResult.model_validate(wire).status == "success"


def test_run_works_from_inside_a_running_loop(runtime: Runtime) -> None:
    async def main() -> str:
        return runtime.run(graph("g").node("a", SLEEP, [], const({"tag": "a"})), None).status

    assert asyncio.run(main()) == "success"


# --- cancellation and deadlines (MEM-GRAPH-3) ------------------------------------------------


def cancel_plan() -> Graph:
    return (
        graph("g")
        .node("quick", SLEEP, [], const({"tag": "quick"}))
        .node("running", SLEEP, [], const({"tag": "running", "waitCancel": True}))
        .node("later", SLEEP, ["running"], const({"tag": "later"}))
    )


def test_cancel_token_cancels_nodes_in_flight_and_starts_no_more(
    runtime: Runtime, echo: Echo
) -> None:
    # MEM-GRAPH-3
    token = CancelToken()

    def cancel_when_running() -> None:
        for _ in range(2):  # 'quick' and 'running' both entered their handlers
            echo.entered.acquire(timeout=20)
        token.cancel()

    threading.Thread(target=cancel_when_running, daemon=True).start()
    result = runtime.run(cancel_plan(), None, cancel=token)
    assert result.status == "cancelled"
    assert result.error is not None and result.error.code == ErrorCode.GRAPH_CANCELLED
    running, later = result.results["running"], result.results["later"]
    assert (running.status, running.error and running.error.code) == (
        "cancelled",
        "ECHO_CANCELLED",
    )
    assert (later.status, later.error and later.error.code) == ("cancelled", "GRAPH_CANCELLED")
    assert echo.by_tag()["running"].cancelled
    assert "later" not in echo.by_tag()


def test_cancelling_the_awaiting_task_cancels_the_nodes(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-3, MEM-PY-2
    async def main() -> None:
        task = asyncio.create_task(runtime.arun(cancel_plan(), None))
        while len(echo.calls) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert echo.by_tag()["running"].cancelled
    assert "later" not in echo.by_tag()


def test_a_cancelled_token_runs_nothing(runtime: Runtime, echo: Echo) -> None:
    token = CancelToken()
    token.cancel()
    result = runtime.run(cancel_plan(), None, cancel=token)
    assert result.status == "cancelled" and echo.calls == []
    assert {r.error.code for r in result.results.values() if r.error} == {"GRAPH_CANCELLED"}


def test_run_deadline_bounds_every_node(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-2/3
    plan = (
        graph("g")
        .node("slow", SLEEP, [], const({"tag": "slow", "waitCancel": True}))
        .node("after", SLEEP, ["slow"], const({"tag": "after"}))
    )
    before = time.time()
    result = runtime.run(plan, None, timeout=0.5)
    assert result.status == "timeout"
    assert result.error is not None and result.error.code == ErrorCode.GRAPH_TIMEOUT
    slow = result.results["slow"]
    assert (slow.status, slow.error and slow.error.code) == ("timeout", "ECHO_TIMEOUT")
    after = result.results["after"]
    assert (after.status, after.error and after.error.code) == ("timeout", "GRAPH_TIMEOUT")
    deadline = echo.by_tag()["slow"].deadline
    assert deadline is not None and before < deadline <= before + 0.5 + 1.0  # not 30 s


def test_a_node_carries_its_own_timeout_and_operation_id(runtime: Runtime, echo: Echo) -> None:
    # issue 25: GraphRunner._call passes the node's timeout and operation id
    plan = (
        graph("g")
        .node("a", SLEEP, [], const({"tag": "a"}), timeout=2, operation_id="op-a")
        .node("b", SLEEP, ["a"], const({"tag": "b"}),
              operation_id=lambda task, results: f"{task}:{results['a'].status}")
        .node("c", SLEEP, [], const({"tag": "c"}), operation_id=lambda task: None)
    )  # fmt: skip
    before = time.time()
    result = runtime.run(plan, "t1")
    assert result.status == "success", result.results
    calls = echo.by_tag()
    assert [calls[t].operation_id for t in "abc"] == ["op-a", "t1:success", None]
    assert calls["a"].deadline is not None and calls["a"].deadline <= before + 2 + 0.5
    assert calls["c"].deadline is not None and calls["c"].deadline > before + 20  # 30 s default


def test_a_failing_operation_id_fails_the_node_as_a_bind(runtime: Runtime, echo: Echo) -> None:
    plan = graph("g").node("a", SLEEP, [], const({"tag": "a"}), operation_id=lambda _: 1 / 0)
    result = runtime.run(plan, None)
    failed = result.results["a"]
    assert failed.error is not None and failed.error.code == ErrorCode.GRAPH_BIND_FAILED
    assert echo.calls == []


@pytest.mark.parametrize(
    "options", [{"timeout": 0}, {"timeout": -1}, {"timeout": "5"}, {"timeout": True},
                {"operation_id": ""}, {"operation_id": "a\nb"}, {"operation_id": 5}],
)  # fmt: skip
def test_node_call_options_are_checked_when_built(options: dict[str, Any]) -> None:
    with pytest.raises(GraphError):
        graph("g").node("a", SLEEP, **options)


def test_a_write_node_replayed_under_its_operation_id_writes_once() -> None:
    # a resumed plan runs its write Graph again: the same operation id applies nothing twice
    store = InMemoryMemoryStore()
    plan = graph("save").node(
        "write", "MEMORY.WRITE", [], lambda task: {"memories": [{"content": task["note"]}]},
        operation_id=lambda task: f"{task['id']}:save",
    )  # fmt: skip
    with create_ditto([create_memory_worker(store)], load_runtime_config(None, env={})) as rt:
        first = rt.run(plan, {"id": "task-7", "note": "hello"})
        again = rt.run(plan, {"id": "task-7", "note": "hello"})
        other = rt.run(plan, {"id": "task-7", "note": "changed"})
        items = rt.invoke("MEMORY.QUERY", {}).output.items
    assert first.results["write"].output == again.results["write"].output
    assert first.results["write"].execution_id != again.results["write"].execution_id
    assert other.results["write"].error is not None
    assert other.results["write"].error.code == ErrorCode.CONFLICT
    assert [(i.content, i.operation_id) for i in items] == [("hello", "task-7:save")]


# --- loops (MEM-GRAPH-4) -------------------------------------------------------------------------


def one(tag: str) -> Graph:
    return graph(f"stage-{tag}").node("a", SLEEP, [], const({"tag": tag}))


def test_loop_sends_results_and_returns_the_plan_value(runtime: Runtime) -> None:
    def plan(input: str) -> Generator[tuple[Graph, Any], GraphResult, str]:
        first = yield one("first"), None
        second = yield one(first.results["a"].output["tag"] + "-again"), None
        return f"{input}:{second.results['a'].output['tag']}"

    result = runtime.loop(plan, "in", run_id="L")
    assert (result.status, result.output) == ("success", "in:first-again")
    assert [g.run_id for g in result.graphs] == ["L.0", "L.1"]
    assert [g.graph for g in result.graphs] == ["stage-first", "stage-first-again"]


def forever(tag: str) -> Generator[tuple[Graph, Any], GraphResult, None]:
    while True:
        yield one(tag), None


def test_budget_exhaustion(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-4
    result = runtime.loop(lambda _: forever("x"), None, budget=5)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == ErrorCode.GRAPH_BUDGET_EXHAUSTED
    assert len(result.graphs) == 5 and len(echo.calls) == 5 and result.budget == 5


def test_yield_from_sub_plans_share_the_budget(runtime: Runtime, echo: Echo) -> None:
    # MEM-GRAPH-4
    seen: list[str] = []

    def stage(tag: str, times: int) -> Generator[tuple[Graph, Any], GraphResult, int]:
        for i in range(times):
            yield one(f"{tag}{i}"), None
        return times

    def plan(_: Any) -> Generator[tuple[Graph, Any], GraphResult, Any]:
        yield from stage("a", 3)
        try:
            yield from stage("b", 3)
        except GraphBudgetExhausted as exc:
            seen.append(exc.code)
            raise

    result = runtime.loop(plan, None, budget=5)
    assert seen == ["GRAPH_BUDGET_EXHAUSTED"]
    assert result.status == "failed"
    assert [g.graph for g in result.graphs] == [f"stage-{t}" for t in "a0 a1 a2 b0 b1".split()]


def test_a_plan_that_ignores_the_budget_is_stopped(runtime: Runtime) -> None:
    # MEM-GRAPH-4
    def stubborn(_: Any) -> Generator[tuple[Graph, Any], GraphResult, None]:
        while True:
            try:
                yield one("x"), None
            except GraphBudgetExhausted:
                pass

    result = runtime.loop(stubborn, None, budget=2)
    assert result.status == "failed" and len(result.graphs) == 2
    assert result.error is not None and result.error.code == "GRAPH_BUDGET_EXHAUSTED"


def test_default_budget_comes_from_config(echo: Echo) -> None:
    config = load_runtime_config({"graph": {"loopBudget": 3}}, env={})
    with create_ditto([echo.definition()], config) as rt:
        result = rt.loop(lambda _: forever("x"), None)
    assert (result.status, len(result.graphs), result.budget) == ("failed", 3, 3)
    assert load_runtime_config(None, env={}).graph.loop_budget == 1024


def test_a_plan_node_error_fails_the_loop(runtime: Runtime) -> None:
    def plan(_: Any) -> Generator[tuple[Graph, Any], GraphResult, None]:
        result = yield one("x"), None
        raise NodeError("MY_PLAN_FAILED", f"stage ended {result.status}")

    result = runtime.loop(plan, None)
    assert result.status == "failed" and len(result.graphs) == 1
    assert result.error is not None
    assert (result.error.code, result.error.message) == ("MY_PLAN_FAILED", "stage ended success")


def test_a_bad_step_is_raised_into_the_plan(runtime: Runtime) -> None:
    caught: list[str] = []

    def plan(_: Any) -> Generator[Any, GraphResult, str]:
        try:
            yield "not a step"
        except GraphError as exc:
            caught.append(str(exc))
        try:
            yield graph("g").node("a", "ECHO.NOPE"), None
        except GraphError as exc:
            caught.append(str(exc))
        yield graph("g").node("a", "ECHO.NOPE"), None
        return "unreachable"

    with pytest.raises(GraphError, match="ECHO.NOPE"):
        runtime.loop(plan, None)
    assert "yields (graph, input)" in caught[0] and "ECHO.NOPE" in caught[1]


def test_loop_cancel_closes_the_plan(runtime: Runtime, echo: Echo) -> None:
    token = CancelToken()
    closed: list[bool] = []

    def plan(_: Any) -> Generator[tuple[Graph, Any], GraphResult, None]:
        try:
            yield one("first"), None
            token_thread.start()
            yield graph("g").node("a", SLEEP, [], const({"tag": "wait", "waitCancel": True})), None
            yield one("never"), None
        finally:
            closed.append(True)

    def cancel_when_waiting() -> None:
        while "wait" not in echo.by_tag():
            threading.Event().wait(0.01)
        token.cancel()

    token_thread = threading.Thread(target=cancel_when_waiting, daemon=True)
    result = runtime.loop(plan, None, cancel=token)
    assert result.status == "cancelled" and closed == [True]
    assert result.error is not None and result.error.code == ErrorCode.GRAPH_CANCELLED
    assert [g.status for g in result.graphs] == ["success", "cancelled"]
    assert "never" not in echo.by_tag()


def test_loop_timeout(runtime: Runtime) -> None:
    result = runtime.loop(lambda _: forever_waiting(), None, timeout=0.3, budget=10)
    assert result.status == "timeout" and len(result.graphs) == 1
    assert result.error is not None and result.error.code == ErrorCode.GRAPH_TIMEOUT


def forever_waiting() -> Generator[tuple[Graph, Any], GraphResult, None]:
    while True:
        yield graph("g").node("a", SLEEP, [], const({"tag": "w", "waitCancel": True})), None


def test_aloop_drives_an_async_plan(runtime: Runtime) -> None:
    async def plan(input: str) -> AsyncIterator[tuple[Graph, Any]]:
        result = yield one(input), None
        assert isinstance(result, GraphResult)
        await asyncio.sleep(0)
        yield one(result.results["a"].output["tag"] + "2"), None

    result = asyncio.run(runtime.aloop(plan, "x"))
    assert result.status == "success"
    assert [g.results["a"].output["tag"] for g in result.graphs] == ["x", "x2"]


def test_a_plan_must_be_a_generator_function(runtime: Runtime) -> None:
    with pytest.raises(GraphError, match="generator function"):
        runtime.loop(lambda _: [one("x")], None)  # type: ignore[arg-type,return-value]
    with pytest.raises(GraphError, match="budget"):
        runtime.loop(lambda _: forever("x"), None, budget=0)


# --- tracing (issue 17 item 5) -----------------------------------------------------------------


def test_every_call_of_a_run_carries_its_trace(runtime: Runtime, echo: Echo) -> None:
    plan = graph("traced").node("a", SLEEP, [], const({"tag": "a"}))
    runtime.run(plan, None, run_id="run-1")
    assert echo.by_tag()["a"].headers == {"run_id": "run-1", "graph": "traced", "graph_node": "a"}
    runtime.loop(lambda _: (x for x in [(one("b"), None)]), None, run_id="loop-1")
    assert echo.by_tag()["b"].headers["run_id"] == "loop-1.0"


def test_sub_calls_carry_their_parents_trace() -> None:
    echo = Echo()

    def outer(input: Any, ctx: Any) -> Any:
        return ctx.invoke(SLEEP, {"tag": "inner"}).output

    outer_kind = WorkerDefinition.of("OUTER", [ditto_worker.NodeSpec("OUTER.CALL", outer)])
    with create_ditto([echo.definition(), outer_kind]) as rt:
        result = rt.run(graph("g").node("o", "OUTER.CALL"), {}, run_id="r")
    assert result.status == "success"
    assert echo.by_tag()["inner"].headers == {"run_id": "r", "graph": "g", "graph_node": "o"}


def test_trace_values_are_cleaned() -> None:
    trace = clean_trace({"run_id": "a b\nc", "graph": "g" * 300, "other": "x", "graph_node": ""})
    assert trace == {"run_id": "a_b_c", "graph": "g" * 128}
    assert trace_repr({"run_id": "r", "graph": "g", "graph_node": "n"}) == "run=r graph=g node=n"


def test_log_filter_adds_the_trace_to_celery_task_lines() -> None:
    def line(args: dict[str, Any]) -> str:
        record = logging.LogRecord("celery.app.trace", logging.INFO, __file__, 1,
                                   "Task %(name)s[%(id)s] received", (args,), None)  # fmt: skip
        assert TraceLogFilter().filter(record)
        return record.getMessage()

    traced = {"name": "ECHO.SLEEP", "id": "e1", "args": "run=r1 graph=g node=n", "kwargs": "{}"}
    assert line(traced) == "Task ECHO.SLEEP[e1] received [run=r1 graph=g node=n]"
    plain = {"name": "ECHO.SLEEP", "id": "e1", "args": "()", "kwargs": "{}"}
    assert line(plain) == "Task ECHO.SLEEP[e1] received"


# --- the seed's examples, embedded (the fleet: tests/integration/test_graph_fleet.py) -----------


def seed_runtime(store: InMemoryMemoryStore) -> Runtime:
    return create_ditto(
        [create_memory_worker(store), create_context_worker(redis_url="")],
        load_runtime_config(None, env={}),
    )


def test_seed_memory_graph() -> None:
    store = InMemoryMemoryStore()
    ids = seed_memories(store)
    with seed_runtime(store) as rt:
        result = rt.run(memory_graph(), ids[0])
    assert result.status == "success"
    memory = result.results["memory"]
    assert memory.output is not None
    assert [(m.id, m.key, m.content) for m in memory.output] == [
        (ids[0], "preference", {"language": "zh-CN"})
    ]


def test_seed_memory_to_context() -> None:
    store = InMemoryMemoryStore()
    ids = seed_memories(store)
    with seed_runtime(store) as rt:
        result = rt.run(memory_to_context(), "language preference")
    assert result.status == "success", to_wire(result)
    assert result.deps == {"search": [], "context": ["search"]}
    search, context = result.results["search"], result.results["context"]
    assert search.output is not None and context.output is not None
    hits = [hit.memory.id for hit in search.output]
    assert hits and set(hits) <= set(ids) and ids[3] not in hits
    items = to_wire(context.output)["items"]
    assert [item["id"] for item in items] == [f"memory:{i}" for i in hits]
    assert all(item["sourceNode"] == "MEMORY.SEARCH" for item in items)
    assert all(isinstance(item["content"], str) for item in items)


def test_seed_memory_to_context_checks_the_search_status() -> None:
    # MEM-GRAPH-2
    store = InMemoryMemoryStore()
    seed_memories(store)
    with seed_runtime(store) as rt:
        result = rt.run(memory_to_context(), {"not": "text"})  # the store refuses the query
    search, context = result.results["search"], result.results["context"]
    assert search.status == "failed" and search.error is not None
    assert context.error is not None and context.error.code == "GRAPH_BIND_FAILED"
    assert context.error.message.endswith(f"{search.error.code}: the search did not succeed")
    assert result.status == "failed"


def test_root_and_runtime_exports() -> None:
    import ditto_worker.runtime as runtime_pkg

    for name in ("graph", "Graph", "GraphResult", "LoopResult", "GraphError"):
        assert getattr(ditto_worker, name) is getattr(runtime_pkg, name)
    assert "graph" in ditto_worker.__all__ and "graph" in runtime_pkg.__all__
