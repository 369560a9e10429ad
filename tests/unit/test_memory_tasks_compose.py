"""Composable task loops on the embedded runtime (issue 35 item 7; SPEC.md MEM-GRAPH-1/4/5).

The seed (memory-capabilities, "Graph / Loop composition"): "shared.ts exports the
full-task run*Loop. The run*() entry invokes runtime.loop() once; its plan yields stage
Graphs for Loop-owned scheduling. Reusable subplans share a 1024-Graph execution budget
… Graphs retain node dependencies". Checked here: a host runs two tasks inside its own
``runtime.loop()`` (they share its budget: past it the second task fails
``GRAPH_BUDGET_EXHAUSTED`` and resumes in a loop of its own), ``run_*`` runs the same plan,
and the ``recall`` Graph's MEMORY.SEARCH and CONTEXT.LOAD run at the same time — each
handler sees the other's start event before it goes on (no timing), with no edge between
them, and INFER only in a later Graph. The fleet's case is
``tests/integration/test_memory_tasks_compose.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ditto_worker import Scope
from ditto_worker.memory_tasks import (
    TaskOutcome,
    run_search,
    run_search_loop,
    run_task_state_loop,
    run_write_loop,
    task_scope,
)
from ditto_worker.runtime import NodeContext, WorkerDefinition
from tests.conftest import EVENT_WAIT_S
from tests.unit._task_kit import ScriptedModel, options, task_runtime
from tests.unit.test_memory_task_state import notes
from tests.unit.test_memory_task_state import request as state_request
from tests.unit.test_memory_tasks_preferences import GERMAN, model, proposing, request

ALICE = Scope("acme", "alice")


class Meeting:
    """Handlers of ``nodes`` that mark their start, then wait (``EVENT_WAIT_S`` at most)
    for every other one's start before they run: ``saw[node]`` is True only when the
    calls were in flight at the same time. Calls after the first go straight on."""

    def __init__(self, *nodes: str) -> None:
        self.started = {node: threading.Event() for node in nodes}
        self.saw: dict[str, bool] = {}

    def wrap(self, definition: WorkerDefinition) -> WorkerDefinition:
        specs = dict(definition.nodes)
        for node in self.started.keys() & specs.keys():
            specs[node] = replace(specs[node], handler=self._meet(node, specs[node].handler))
        return replace(definition, nodes=specs)

    def _meet(self, node: str, handler: Callable[[Any, NodeContext], Any]) -> Any:
        def met(input: Any, ctx: NodeContext) -> Any:
            if node not in self.saw:
                self.started[node].set()
                others = [e for n, e in self.started.items() if n != node]
                self.saw[node] = all(e.wait(EVENT_WAIT_S) for e in others)
            return handler(input, ctx)

        return met


def _two_tasks(tmp_path: Path) -> Any:
    """A host's plan: a write task, then a search task, in one loop."""

    def plan(_: Any) -> Any:
        wrote = yield from run_write_loop({"request": request("write", "w1", GERMAN)},
                                          options(tmp_path, allow_write=True))  # fmt: skip
        found = yield from run_search_loop({"request": request("search", "s1")},
                                           options(tmp_path))  # fmt: skip
        return wrote, found

    return plan


def test_a_host_runs_two_tasks_in_its_own_loop_sharing_its_budget(tmp_path: Path) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        result = runtime.loop(_two_tasks(tmp_path), None, scope=task_scope(options(tmp_path)),
                              run_id="host-1")  # fmt: skip
    assert result.status == "success", result.error
    wrote, found = result.output
    assert isinstance(wrote, TaskOutcome) and isinstance(found, TaskOutcome)
    assert wrote.status == "success", wrote.error
    assert found.status == "success", found.error
    assert wrote.artifact is not None and found.artifact is not None
    [record] = wrote.artifact["mutation"]["records"]
    assert found.artifact["message"].endswith(f"(memory {record['id']} v1)")  # B used A's write
    assert (tmp_path / "artifacts" / "w1.json").exists()
    assert (tmp_path / "artifacts" / "s1.json").exists()
    # one loop, one budget: every Graph of both tasks is one of the host's
    assert len(result.graphs) == wrote.graphs + found.graphs
    assert all(g.run_id.startswith("host-1.") for g in result.graphs)
    assert wrote.graphs > 3 and found.graphs > 3


def test_past_the_shared_budget_the_second_task_fails_and_resumes_on_its_own(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "measured", tmp_path / "tight"
    with model(proposing(GERMAN, "de")) as fake:
        with task_runtime(first, fake) as (runtime, _):
            full = runtime.loop(_two_tasks(first), None, scope=task_scope(options(first)))
        assert full.status == "success", full.error
        budget = full.output[0].graphs + 2  # the write's Graphs, then two of the search's
        with task_runtime(second, fake) as (runtime, _):
            tight = runtime.loop(_two_tasks(second), None, scope=task_scope(options(second)),
                                 budget=budget)  # fmt: skip
            assert tight.status == "success", tight.error  # the host's plan returned
            wrote, found = tight.output
            assert len(tight.graphs) == budget
            assert wrote.status == "success", wrote.error
            assert found.status == "failed" and found.graphs == 2
            assert found.error is not None and found.error["code"] == "GRAPH_BUDGET_EXHAUSTED"
            assert not (second / "artifacts" / "s1.json").exists()
            # the task directory is resumable: the search's own loop finishes it
            again = run_search(runtime, {"request": request("search", "s1")}, options(second))
    assert again.status == "success", again.error
    assert again.artifact is not None
    assert again.artifact["memories"] == found_memories(wrote)


def found_memories(wrote: TaskOutcome) -> list[Any]:
    assert wrote.artifact is not None
    return [{k: r[k] for k in ("id", "key", "version", "field", "value")}
            for r in wrote.artifact["mutation"]["records"]]  # fmt: skip


def test_recall_runs_search_and_context_load_side_by_side_then_infer(tmp_path: Path) -> None:
    meeting = Meeting("MEMORY.SEARCH", "CONTEXT.LOAD")
    with model(proposing(GERMAN, "de"), None) as fake:
        with task_runtime(tmp_path, fake, wrap=meeting.wrap) as (runtime, _):
            result = runtime.loop(lambda _: run_search_loop(
                {"request": request("search", "s1")}, options(tmp_path)), None,
                scope=ALICE)  # fmt: skip
    assert result.status == "success", result.error
    assert result.output.status == "success", result.output.error
    assert meeting.saw == {"MEMORY.SEARCH": True, "CONTEXT.LOAD": True}  # both in flight at once
    names = [g.graph for g in result.graphs]
    recall = result.graphs[names.index("recall")]
    assert recall.deps == {"search": [], "context": []}  # independent: no edge between them
    assert names.index("recall") < names.index("infer-message")  # INFER after both answered
    assert all(len(g.results) == 1 for g in result.graphs if g.graph != "recall")


def test_an_invalid_task_plan_returns_its_refusal_before_any_graph(tmp_path: Path) -> None:
    with ScriptedModel(notes) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        result = runtime.loop(lambda _: run_task_state_loop(
            {"request": {**state_request(), "kind": "search"}}, options(tmp_path)), None,
            scope=ALICE)  # fmt: skip
        ok = runtime.loop(lambda _: run_task_state_loop(
            {"request": state_request()}, options(tmp_path)), None, scope=ALICE)  # fmt: skip
    assert result.status == "success" and result.graphs == []
    assert result.output.status == "failed" and result.output.error["code"] == "INVALID_INPUT"
    assert ok.output.status == "success" and fake.calls == 3
