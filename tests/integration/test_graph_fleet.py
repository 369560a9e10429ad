"""Graphs and loops on a real fleet: a real Celery worker on real Redis (SPEC.md MEM-GRAPH;
issue 17).

The worker runs in a thread of this process (``start_worker``, threads pool, 10 slots)
serving MEMORY (an in-memory store the test shares), CONTEXT (pure mode) and the test
kind ECHO (tests/unit/_graph_kit.py), so handlers record what they saw and meet at a
barrier. The runtime is ``create_ditto(..., config with a broker)``: a fleet client, every
node call a Celery task. The seed's two examples give the same results embedded and on
the fleet. The last test runs ``ditto-worker worker`` and Flower as processes and follows
one run by its id in the worker's log lines and Flower's task view.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from ditto_worker import (
    CancelToken,
    create_context_worker,
    create_ditto,
    create_memory_worker,
    graph,
    to_wire,
)
from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.runtime import Graph, Runtime, WorkerDefinition, queue_of
from ditto_worker.testing.memory_store import InMemoryMemoryStore
from tests.conftest import EVENT_WAIT_S, fleet_config
from tests.integration._procs import FlowerProc, WorkerProc
from tests.unit._graph_kit import (
    Echo,
    comparable,
    memory_graph,
    memory_to_context,
    seed_memories,
)

pytestmark = pytest.mark.integration

SLEEP = "ECHO.SLEEP"


def const(value: Any) -> Any:
    return lambda _input, _results: value


class Fleet:
    """A worker thread serving MEMORY, CONTEXT and ECHO, and a fleet runtime calling it."""

    def __init__(self, redis_url: str) -> None:
        self.store = InMemoryMemoryStore()
        self.echo = Echo()
        self.redis_url = redis_url

    def definitions(self) -> list[WorkerDefinition]:
        return [
            create_memory_worker(self.store),
            create_context_worker(redis_url=""),
            self.echo.definition(),
        ]

    def embedded(self) -> Runtime:
        return create_ditto(self.definitions(), load_runtime_config(None, env={}))


@pytest.fixture
def fleet(redis_url: str, caplog: pytest.LogCaptureFixture) -> Iterator[tuple[Fleet, Runtime]]:
    # Celery decides once, when the worker starts, whether it logs task lines at INFO
    caplog.set_level(logging.INFO, logger="celery")
    env = Fleet(redis_url)
    definitions = env.definitions()
    app = create_worker_app(fleet_config(redis_url), definitions)
    queues = [queue_of(node) for d in definitions for node in d.nodes]
    with start_worker(app, pool="threads", concurrency=10, perform_ping_check=False,
                      queues=queues, shutdown_timeout=30.0, loglevel="INFO"):  # fmt: skip
        runtime = create_ditto(definitions, fleet_config(redis_url))
        try:
            assert not runtime.embedded
            yield env, runtime
        finally:
            runtime.close()
    app.close()


# --- the seed's examples: embedded and on the fleet, the same results (issue 17 item 6) ------


def test_seed_examples_give_the_same_results_embedded_and_on_the_fleet(
    fleet: tuple[Fleet, Runtime],
) -> None:  # MEM-GRAPH-1/2/3/5
    env, runtime = fleet
    ids = seed_memories(env.store)
    examples: list[tuple[Graph, Any]] = [
        (memory_graph(), ids[0]),
        (memory_to_context(), "language preference"),
    ]
    with env.embedded() as embedded:
        for plan, input in examples:
            local, remote = embedded.run(plan, input), runtime.run(plan, input)
            assert remote.status == "success", to_wire(remote)
            assert comparable(remote) == comparable(local)
    context = remote.results["context"].output
    assert context is not None and to_wire(context)["items"], to_wire(remote)
    assert remote.deps == {"search": [], "context": ["search"]}


def test_the_seed_bind_checks_the_search_status_on_the_fleet(
    fleet: tuple[Fleet, Runtime],
) -> None:  # MEM-GRAPH-2
    env, runtime = fleet
    seed_memories(env.store)
    with env.embedded() as embedded:
        local = embedded.run(memory_to_context(), {"not": "text"})
    remote = runtime.run(memory_to_context(), {"not": "text"})
    assert remote.status == "failed" and remote.results["search"].status == "failed"
    error = remote.results["context"].error
    assert error is not None and error.code == "GRAPH_BIND_FAILED"
    assert comparable(remote)["results"]["context"] == comparable(local)["results"]["context"]


# --- concurrency, ordering, failures --------------------------------------------------------------


def test_independent_nodes_run_at_once_on_the_fleet(fleet: tuple[Fleet, Runtime]) -> None:
    env, runtime = fleet
    plan = graph("fan-out")
    for i in range(10):
        plan = plan.node(f"n{i}", SLEEP, [], const({"tag": f"n{i}", "barrier": True}))
    result = runtime.run(plan, None)
    assert result.status == "success", to_wire(result)  # the barrier opened: all ten at once
    calls = env.echo.by_tag()
    assert max(c.start for c in calls.values()) < min(c.end for c in calls.values())


def test_ordering_and_failures_on_the_fleet(fleet: tuple[Fleet, Runtime]) -> None:
    env, runtime = fleet
    plan = (
        graph("g")
        .node("first", SLEEP, [], const({"tag": "first"}))
        .node("slow", SLEEP, [], const({"tag": "slow", "wait": "after-ran"}))
        .node("after", SLEEP, ["first"], const({"tag": "after", "set": "after-ran"}))
        .node("bad", SLEEP, ["after"], const({"tag": "bad", "fail": "ECHO_BROKEN"}))
        .node("sees", SLEEP, ["bad"], lambda _i, r: {"tag": f"saw-{r['bad'].error.code}"})
        .node("broken", SLEEP, ["slow"], lambda _i, _r: 1 / 0)
        .node("never", SLEEP, ["broken"], const({"tag": "never"}))
    )
    result = runtime.run(plan, None)
    calls = env.echo.by_tag()
    assert calls["first"].end <= calls["after"].start < calls["slow"].end
    assert result.results["sees"].output["tag"] == "saw-ECHO_BROKEN"
    assert [(n, r.error.code) for n, r in result.results.items() if r.error] == [
        ("bad", "ECHO_BROKEN"),
        ("broken", "GRAPH_BIND_FAILED"),
        ("never", "GRAPH_BIND_FAILED"),
    ]
    assert "never" not in calls and result.status == "failed"


# --- cancellation and deadlines ---------------------------------------------------------------


def cancel_plan() -> Graph:
    return (
        graph("g")
        .node("running", SLEEP, [], const({"tag": "running", "waitCancel": True}))
        .node("later", SLEEP, ["running"], const({"tag": "later"}))
    )


def test_cancelling_a_run_cancels_the_node_on_the_worker(fleet: tuple[Fleet, Runtime]) -> None:
    env, runtime = fleet  # MEM-GRAPH-3: through the revoke + Redis cancel flag path
    token = CancelToken()

    def cancel_when_running() -> None:
        env.echo.entered.acquire(timeout=20)
        token.cancel()

    threading.Thread(target=cancel_when_running, daemon=True).start()
    started = time.monotonic()
    result = runtime.run(cancel_plan(), None, cancel=token)
    assert result.status == "cancelled" and time.monotonic() - started < 15
    running = result.results["running"]
    assert (running.status, running.error and running.error.code) == (
        "cancelled",
        "ECHO_CANCELLED",
    )
    assert result.results["later"].error is not None
    assert result.results["later"].error.code == "GRAPH_CANCELLED"
    _wait_for(lambda: env.echo.by_tag()["running"].end > 0)  # the handler saw its flag
    assert env.echo.by_tag()["running"].cancelled and "later" not in env.echo.by_tag()


def test_cancelling_the_awaiting_task_cancels_the_node_on_the_worker(
    fleet: tuple[Fleet, Runtime],
) -> None:
    env, runtime = fleet

    async def main() -> None:
        task = asyncio.create_task(runtime.arun(cancel_plan(), None))
        while not env.echo.calls:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _wait_for(lambda: env.echo.by_tag()["running"].end > 0)
    assert env.echo.by_tag()["running"].cancelled and "later" not in env.echo.by_tag()


def test_the_run_deadline_bounds_the_node_on_the_worker(fleet: tuple[Fleet, Runtime]) -> None:
    env, runtime = fleet
    before = time.time()
    result = runtime.run(cancel_plan(), None, timeout=1.0)
    assert result.status == "timeout", to_wire(result)
    running = result.results["running"]
    assert (running.status, running.error and running.error.code) == ("timeout", "ECHO_TIMEOUT")
    deadline = env.echo.by_tag()["running"].deadline
    assert deadline is not None and before < deadline <= before + 1.0 + 1.0  # not 30 s


# --- loops and tracing ---------------------------------------------------------------------


def test_a_loop_on_the_fleet_shares_its_budget_and_traces_each_graph(
    fleet: tuple[Fleet, Runtime], caplog: pytest.LogCaptureFixture
) -> None:  # MEM-GRAPH-4, issue 17 item 5
    env, runtime = fleet

    def stage(tag: str, times: int) -> Any:
        for i in range(times):
            yield graph(f"stage-{tag}").node("a", SLEEP, [], const({"tag": f"{tag}{i}"})), None

    def plan(_: Any) -> Any:
        yield from stage("a", 2)
        yield from stage("b", 5)

    result = runtime.loop(plan, None, budget=4, run_id="loop-7")
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "GRAPH_BUDGET_EXHAUSTED"
    assert [g.status for g in result.graphs] == ["success"] * 4
    calls = env.echo.by_tag()
    assert sorted(calls) == ["a0", "a1", "b0", "b1"]
    assert calls["b1"].headers == {"run_id": "loop-7.3", "graph": "stage-b", "graph_node": "a"}
    # the worker's own log lines for the task name the run and the Graph node
    received = [r.getMessage() for r in caplog.records if r.name == "celery.worker.strategy"]
    assert any("received [run=loop-7.3 graph=stage-b node=a]" in m for m in received), received
    # Celery stores the result before it logs "succeeded": the client can be ahead of the line
    _wait_for(lambda: any(
        "succeeded in" in r.getMessage() and "[run=loop-7.3 graph=stage-b node=a]" in r.getMessage()
        for r in caplog.records if r.name == "celery.app.trace"))  # fmt: skip


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_run_is_followed_in_the_worker_log_and_flower(redis_url: str, tmp_path: Path) -> None:
    """``ditto-worker worker`` and Flower as processes; the client a fleet runtime."""
    folder = tmp_path / "worker"
    folder.mkdir()
    marker = "MARKER-7c1e"  # memory content: never in a log line or Flower
    worker = WorkerProc(
        folder,
        ["--nodes", "memory,context", "--pool", "threads", "--concurrency", "4",
         "--loglevel", "INFO"],
        {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": "",
         "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite"),
         "DITTO_WORKER_CONTEXT_REDIS_URL": redis_url},
    )  # fmt: skip
    flower = FlowerProc(tmp_path, {"DITTO_BROKER_URL": redis_url})
    definitions = [create_memory_worker(InMemoryMemoryStore()), create_context_worker(redis_url="")]
    runtime = create_ditto(definitions, fleet_config(redis_url))
    try:
        worker.wait_ready()
        flower.wait_listening()
        wrote = runtime.invoke("MEMORY.WRITE", {"memories": [
            {"content": f"language preference: zh-CN {marker}"}]})  # fmt: skip
        assert wrote.status == "success", wrote
        result = runtime.run(memory_to_context(), "language preference", run_id="run-42")
        assert result.status == "success", to_wire(result)
        ids = {node: r.execution_id for node, r in result.results.items()}
        tasks = _flower_tasks(flower, set(ids.values()))
        for node, eid in ids.items():
            shown = tasks[eid]
            assert shown["args"] == f"run=run-42 graph=memory-context node={node}", shown
            assert marker not in str(shown)

        def traced(node: str, eid: str) -> bool:
            trace = f"[run=run-42 graph=memory-context node={node}]"
            log = worker.log()
            return f"[{eid}] received {trace}" in log and any(
                eid in line and "succeeded in" in line and trace in line
                for line in log.splitlines())  # fmt: skip

        # the result is stored before the worker logs "succeeded": wait for the line
        for node, eid in ids.items():
            _wait_for(functools.partial(traced, node, eid))
        log = worker.log()
        assert marker not in log
    finally:
        runtime.close()
        worker.stop()
        flower.stop()


def _flower_tasks(flower: FlowerProc, ids: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + EVENT_WAIT_S
    while True:
        tasks = flower.tasks()
        done = {i for i, t in tasks.items() if t.get("state") == "SUCCESS"}
        if ids <= done:
            return tasks
        assert time.monotonic() < deadline, {i: tasks.get(i, {}).get("state") for i in ids}
        time.sleep(0.3)
