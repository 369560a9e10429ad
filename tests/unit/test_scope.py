"""Tenant scope rules that need no server (:mod:`ditto_worker.memory.scope`, issue 7 item 6)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ditto_worker import ConfigError, Scope, create_memory, create_memory_worker
from ditto_worker.errors import MemoryError
from ditto_worker.memory.scope import UNSCOPED, namespace_of, parse_scope, resolve_scope
from ditto_worker.memory.worker import NodeContext
from ditto_worker.testing import InMemoryMemoryStore
from tests.unit._spies import Spy

ODD = st.text(alphabet=st.sampled_from("ab_%-:'\"\\ 3A中"), min_size=1, max_size=6)


@given(a=st.tuples(ODD, ODD), b=st.tuples(ODD, ODD))
def test_namespace_is_injective(a: tuple[str, str], b: tuple[str, str]) -> None:
    # two different scopes never share a namespace, whatever characters they hold
    assert (Scope(*a).namespace == Scope(*b).namespace) == (a == b)
    assert Scope(*a).namespace != UNSCOPED


def test_namespace_follows_the_seed_layout() -> None:
    assert Scope("acme", "alice").namespace == "acme:alice:memory"
    assert Scope("a:b", "c%").namespace == "a%3Ab:c%25:memory"
    # MEM-TASK-2: checkpoints live in <tenant>:<user>:task:<taskId>
    assert Scope("acme", "alice", "task:t-1").namespace == "acme:alice:task:t-1"
    assert Scope.for_task("a:b", "c", "x:y%").namespace == "a%3Ab:c:task:x%3Ay%25"
    assert Scope("acme", "alice").key("context", "plan") == "acme:alice:context:plan"
    task = Scope("acme", "alice", "task:t:1")
    assert task.key("context", "plan") == "acme:alice:task:t%3A1:context:plan"
    assert (task.task_id, Scope("a", "b").task_id) == ("t:1", None)


@given(a=st.tuples(ODD, ODD, ODD), b=st.tuples(ODD, ODD, ODD), memory=st.booleans())
def test_spaces_never_share_a_namespace(
    a: tuple[str, str, str], b: tuple[str, str, str], memory: bool
) -> None:
    # a task space never maps to another task's, another user's or the memory space
    sa = Scope.for_task(*a)
    sb = Scope(b[0], b[1]) if memory else Scope.for_task(*b)
    assert (sa.namespace == sb.namespace) == (not memory and a == b)
    assert (sa.key("context", "n") == sb.key("context", "n")) == (not memory and a == b)


@pytest.mark.parametrize(
    "space", ["", "Memory", "memory:x", "task", "task:", "task:a\n", "task:" + "x" * 257,
              "other:x", 3],
)  # fmt: skip
def test_malformed_spaces_are_permission_denied(space: Any) -> None:
    with pytest.raises(MemoryError) as caught:
        Scope("t", "u", space)
    assert caught.value.code == "PERMISSION_DENIED" and "scope.space" in caught.value.safe_message
    with pytest.raises(MemoryError):
        parse_scope({"tenant": "t", "user": "u", "space": space})


def test_the_header_carries_a_task_space_only() -> None:
    assert Scope("t", "u").to_header() == {"tenant": "t", "user": "u"}
    task = Scope("t", "u", "task:9")
    assert task.to_header() == {"tenant": "t", "user": "u", "space": "task:9"}
    assert parse_scope(task.to_header()) == task
    assert parse_scope({"tenant": "t", "user": "u", "space": "memory"}) == Scope("t", "u")
    assert Scope("t", "u").in_space("task:9") == task


@pytest.mark.parametrize(
    "value",
    [{"tenant": "", "user": "u"}, {"tenant": "t"}, {"tenant": "t", "user": 1},
     {"tenant": "t", "user": "u", "extra": "x"}, {"tenant": "t\n", "user": "u"},
     {"tenant": "t" * 257, "user": "u"}, ["t", "u"], "t:u"],
)  # fmt: skip
def test_malformed_scopes_are_permission_denied(value: Any) -> None:
    with pytest.raises(MemoryError) as caught:
        parse_scope(value)
    assert caught.value.code == "PERMISSION_DENIED"


def test_resolution_bound_sent_required() -> None:
    a, b = Scope("t", "a"), Scope("t", "b")
    assert resolve_scope(None, None, False) is None
    assert resolve_scope(None, a, True) == a
    assert resolve_scope(a, None, True) == a
    assert resolve_scope(a, a, False) == a
    # a bound worker serves its tenant and user in whatever space the caller's host binds
    task = Scope("t", "a", "task:1")
    assert resolve_scope(a, task, True) == task
    assert resolve_scope(task, None, True) == task
    assert resolve_scope(task, a, True) == a
    for bound, sent, required in [(a, b, False), (None, None, True),
                                  (a, Scope("t", "b", "task:1"), False)]:  # fmt: skip
        with pytest.raises(MemoryError) as caught:
            resolve_scope(bound, sent, required)
        assert caught.value.code == "PERMISSION_DENIED"
    assert namespace_of(None) == UNSCOPED


def test_a_store_that_does_not_declare_scope_is_never_called_scoped() -> None:
    spy = Spy()
    memory = create_memory(spy)
    for node, input in [("MEMORY.WRITE", {"memories": [{"content": "x"}]}),
                        ("MEMORY.QUERY", {}), ("MEMORY.GET", {"ids": ["a"]}),
                        ("MEMORY.UPDATE", {"memories": [{"id": "a", "content": 1}]}),
                        ("MEMORY.DELETE", {"ids": ["a"]})]:  # fmt: skip
        result = memory.execute(node, input, scope=Scope("t", "u"))
        assert result.error is not None and result.error.code == "PERMISSION_DENIED", node
    assert spy.calls == []
    assert memory.execute("MEMORY.QUERY", {}).status == "success"  # unscoped still works


def test_worker_binds_and_requires_scope() -> None:
    store = InMemoryMemoryStore()
    bound = create_memory_worker(store, scope={"tenant": "t", "user": "u"})
    ctx = NodeContext("e1")
    written = bound.handle("MEMORY.WRITE", {"memories": [{"content": "x"}]}, ctx)
    assert written.status == "success"
    mine = create_memory(store).query({}, scope=Scope("t", "u")).output.items
    assert mine == written.output
    other = bound.handle("MEMORY.QUERY", {}, NodeContext("e2", scope=Scope("t", "v")))
    assert other.error is not None and other.error.code == "PERMISSION_DENIED"
    strict = create_memory_worker(store, require_scope=True)
    refused = strict.handle("MEMORY.QUERY", {}, NodeContext("e3"))
    assert refused.error is not None and refused.error.code == "PERMISSION_DENIED"
    allowed = strict.handle("MEMORY.QUERY", {}, NodeContext("e4", scope=Scope("t", "u")))
    assert allowed.output.items == written.output
    with pytest.raises(ConfigError):
        create_memory_worker(store, scope={"tenant": "", "user": "u"})


def test_scope_is_not_an_input_field() -> None:
    memory = create_memory(InMemoryMemoryStore())
    result = memory.execute("MEMORY.QUERY", {"scope": {"tenant": "t", "user": "u"}})
    assert result.error is not None and result.error.code == "INVALID_INPUT"


def test_worker_config_binds_the_scope() -> None:
    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.tasks import FleetRuntime

    data = {"workers": {"memory": {"store": "memory", "requireScope": True,
                                   "scope": {"tenant": "acme", "user": "a:b"}}}}  # fmt: skip
    runtime = FleetRuntime(load_runtime_config(data, env={}))
    worker, _ = runtime.table["MEMORY.GET"]
    assert (worker.scope, worker.require_scope) == (Scope("acme", "a:b"), True)
    with pytest.raises(ConfigError):
        load_runtime_config({"workers": {"memory": {"scope": {"tenant": "acme"}}}}, env={})


@pytest.mark.parametrize("header", ["acme:alice", {"tenant": "acme"}, {"tenant": 1, "user": "u"}])
def test_a_malformed_scope_header_never_reaches_the_store(header: Any) -> None:
    # a raw producer (not DittoClient) sending a bad ditto_scope header is refused
    from types import SimpleNamespace

    from ditto_worker.config import load_runtime_config
    from ditto_worker.contracts import to_wire
    from ditto_worker.fleet.tasks import FleetRuntime

    spy = Spy()
    runtime = FleetRuntime(load_runtime_config({}, env={}), [lambda: create_memory_worker(spy)])
    request = SimpleNamespace(id="e1", headers={"ditto_scope": header})
    result = runtime.run(SimpleNamespace(request=request, app=None), "MEMORY.QUERY", {})  # type: ignore[arg-type]
    reply = to_wire(result)
    assert reply["status"] == "failed" and reply["error"]["code"] == "PERMISSION_DENIED"
    assert spy.calls == []


def test_the_sdk_takes_a_scope_mapping_and_refuses_a_malformed_one(tmp_path: Any) -> None:
    # as Runtime.invoke does: {tenant, user, space?} is a scope; anything else is refused
    # before the store is called (it reached the plugin and failed there with a traceback)
    from ditto_plugin_sqlite import SqliteMemoryStore

    memory = create_memory(SqliteMemoryStore(tmp_path / "m.db"))
    mine = {"tenant": "t1", "user": "u1"}
    (written,) = memory.write({"memories": [{"key": "k", "content": "x"}]}, scope=mine).output
    assert memory.get({"ids": [written.id]}, scope=mine).output == [written]
    assert memory.get({"ids": [written.id]}, scope={"tenant": "t2", "user": "u1"}).output == []
    for bad in ({"tenant": "t1"}, {"tenant": "t1", "user": "u1", "other": "x"}, ["t1", "u1"]):
        refused = memory.get({"ids": [written.id]}, scope=bad)
        assert refused.error is not None and refused.error.code == "PERMISSION_DENIED", bad
