"""A Graph node names the space its call runs in (SPEC.md MEM-TASK-2, MEM-GRAPH-1): the
run's trusted tenant and user in that space; never another user, never without a scope."""

from __future__ import annotations

import pytest

from ditto_worker import GraphError, Scope, create_ditto, create_memory_worker, graph
from ditto_worker.testing import InMemoryMemoryStore


def test_a_node_space_keeps_the_runs_tenant_and_user() -> None:
    store = InMemoryMemoryStore()
    write = (
        graph("two-spaces")
        .node("memory", "MEMORY.WRITE", [], lambda _: {"memories": [{"content": "m"}]})
        .node("task", "MEMORY.WRITE", [], lambda _: {"memories": [{"content": "t"}]},
              space="task:t1")
    )  # fmt: skip
    with create_ditto(workers=[create_memory_worker(store)]) as runtime:
        done = runtime.run(write, None, scope=Scope("acme", "alice"))
        assert done.status == "success"
        in_memory = runtime.invoke("MEMORY.QUERY", {}, scope=Scope("acme", "alice"))
        in_task = runtime.invoke("MEMORY.QUERY", {}, scope=Scope.for_task("acme", "alice", "t1"))
        bob_task = runtime.invoke("MEMORY.QUERY", {}, scope=Scope.for_task("acme", "bob", "t1"))
        assert [i.content for i in in_memory.output.items] == ["m"]
        assert [i.content for i in in_task.output.items] == ["t"]
        assert bob_task.output.items == []
        # a task-space run's node may name memory again
        back = graph("back").node("q", "MEMORY.QUERY", [], lambda _: {}, space="memory")
        found = runtime.run(back, None, scope=Scope.for_task("acme", "alice", "t1"))
        assert [i.content for i in found.results["q"].output.items] == ["m"]


def test_a_node_space_without_a_run_scope_is_permission_denied() -> None:
    plan = graph("g").node("q", "MEMORY.QUERY", [], lambda _: {}, space="task:t1")
    with create_ditto(workers=[create_memory_worker(InMemoryMemoryStore())]) as runtime:
        done = runtime.run(plan, None)
    assert done.status == "failed"
    assert done.results["q"].error is not None
    assert done.results["q"].error.code == "PERMISSION_DENIED"


@pytest.mark.parametrize("space", ["", "tasks:x", "task:", "memory:x", 3, "task:a\nb"])
def test_a_malformed_node_space_is_refused_when_the_graph_is_built(space: object) -> None:
    with pytest.raises(GraphError, match="space"):
        graph("g").node("q", "MEMORY.QUERY", [], None, space=space)  # type: ignore[arg-type]
