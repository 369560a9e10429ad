"""Conformance: tenant scope on all six operations (:mod:`ditto_worker.scope`).

Rules: MEM-TASK-2 ("scope is enforced on all six operations from the host's trusted
identity; a model or a request filter cannot choose the namespace"; "the host binds the
space as well as tenant and user"), issue 7 item 6 (a scope value with ``_``, ``%``, ``-``,
``:`` or quotes never matches another scope), issue 25 (a user's ``memory`` space and each
``task:<taskId>`` space are as isolated as two users), MEM-SEARCH-7 (a SEARCH whose
trusted space is a task space fails ``INVALID_INPUT`` before the store or the search
provider is called: checkpoints are never recalled).
A store that does not declare ``capabilities.scope`` must have its scoped calls refused
by the SDK with ``PERMISSION_DENIED``, writing nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ErrorCode
from ditto_worker.memory.core import create_memory
from ditto_worker.scope import Scope
from ditto_worker.testing._conformance_harness import Harness, label

__all__ = [
    "ODD_SCOPES",
    "test_filter_cannot_widen_scope",
    "test_odd_scope_values_never_collide",
    "test_scope_confines_all_six_operations",
    "test_search_in_a_task_space_is_refused_before_the_store",
    "test_spaces_confine_all_six_operations",
    "test_undeclared_scope_is_refused",
]

ODD_SCOPES: tuple[Scope, ...] = (
    Scope("a:b", "c"),
    Scope("a", "b:c"),
    Scope("a", "b"),
    Scope("t_", "u"),
    Scope("t%", "u"),
    Scope("tx", "u"),
    Scope("t", "u"),
    Scope("a%3Ab", "c"),
    Scope("o'brien", 'say "hi"'),
    Scope("o", "brien"),
    Scope("-", "-"),
    Scope("--", "-"),
    Scope("租户", "用户"),
    Scope("acme", "u1:memory"),
    Scope("acme:u1", "memory"),
    Scope("acme", "u1", "task:memory"),
    Scope("acme", "u1", "task:x"),
    Scope("acme", "u1", "task:x:memory"),
    Scope("acme", "u1", "task:x%3Amemory"),
    Scope("acme", "u1:task", "task:x"),
    Scope("acme", "u1:task:x", "task:memory"),
    Scope("acme:u1:task", "x"),
)
"""Pairs whose naive joins, LIKE patterns or quoting would collide with each other."""


def _require_scope(conformance: Harness) -> None:
    if not conformance.caps.scope:
        pytest.skip("scope not declared")


def _search_ids(h: Harness, query: str) -> list[str] | None:
    """Ids found by keyword SEARCH in ``h``'s scope, or ``None`` without keyword search;
    in a task space the SEARCH must be refused (MEM-SEARCH-7) and ``None`` is returned."""
    if h.scope is not None and h.scope.task_id is not None:
        assert h.code("MEMORY.SEARCH", {"query": query, "limit": 50}) == ErrorCode.INVALID_INPUT
        return None
    if h.caps.keyword_strategy is None:
        return None
    hits = h.ok("MEMORY.SEARCH", {"query": query, "limit": 50, "strategy": h.caps.keyword_strategy})
    return [hit.memory.id for hit in hits]


def _one(items: list[MemoryItem]) -> MemoryItem:
    assert len(items) == 1, [label(i) for i in items]
    return items[0]


def test_undeclared_scope_is_refused(conformance: Harness) -> None:
    # The SDK refuses a scoped call to a store that cannot isolate it; nothing is written
    if conformance.caps.scope:
        pytest.skip("scope declared")
    scoped = conformance.scoped(Scope("acme", "alice"))
    assert scoped.code("MEMORY.WRITE", {"memories": [{"content": "x"}]}) == (
        ErrorCode.PERMISSION_DENIED
    )
    assert scoped.code("MEMORY.QUERY", {}) == ErrorCode.PERMISSION_DENIED
    assert conformance.items() == []


def test_scope_confines_all_six_operations(conformance: Harness) -> None:
    _require_scope(conformance)
    alice = conformance.scoped(Scope("acme", "alice"))
    bob = conformance.scoped(Scope("acme", "bob"))
    other = conformance.scoped(Scope("globex", "alice"))
    plain = conformance.scoped(None)
    # WRITE: the same key in every scope (keys are unique per scope, not globally)
    everyone = [("alice", alice), ("bob", bob), ("other", other), ("plain", plain)]
    mine = {name: _one(h.write([{"key": "pref", "content": f"{name} likes tea"}]))
            for name, h in everyone}  # fmt: skip
    assert len({item.id for item in mine.values()}) == 4
    assert alice.code("MEMORY.WRITE", {"memories": [{"key": "pref", "content": "again"}]}) == (
        ErrorCode.CONFLICT
    )
    for name, h in everyone:
        # GET by key sees its own record; by another scope's id sees nothing
        got = _one(h.ok("MEMORY.GET", {"keys": ["pref"]}))
        assert got.id == mine[name].id
        foreign = [item.id for n, item in mine.items() if n != name]
        assert h.ok("MEMORY.GET", {"ids": foreign}) == []
        # QUERY and SEARCH list only its own
        assert [item.id for item in h.items()] == [mine[name].id]
        assert _search_ids(h, "likes tea") in (None, [mine[name].id])
    # UPDATE of another scope's id is NOT_FOUND and changes nothing
    assert bob.code("MEMORY.UPDATE", {"memories": [{"id": mine["alice"].id, "content": "x"}]}) == (
        ErrorCode.NOT_FOUND
    )
    assert _one(alice.ok("MEMORY.GET", {"ids": [mine["alice"].id]})).content == "alice likes tea"
    # DELETE of another scope's id deletes nothing
    assert bob.ok("MEMORY.DELETE", {"ids": [mine["alice"].id, mine["plain"].id]}).deleted == []
    assert alice.ok("MEMORY.GET", {"ids": [mine["alice"].id]}) != []
    assert plain.ok("MEMORY.GET", {"ids": [mine["plain"].id]}) != []
    # the owner can update and delete; the others' copies are untouched
    updated = alice.ok("MEMORY.UPDATE", {"memories": [{"id": mine["alice"].id, "content": "y"}]})
    assert _one(updated).content == "y"
    assert alice.ok("MEMORY.DELETE", {"ids": [mine["alice"].id]}).deleted == [mine["alice"].id]
    assert alice.items() == []
    assert _one(bob.items()).content == "bob likes tea"
    # a deleted key is free again in its own scope only
    alice.write([{"key": "pref", "content": "new"}])
    assert bob.code("MEMORY.WRITE", {"memories": [{"key": "pref", "content": "z"}]}) == (
        ErrorCode.CONFLICT
    )


def test_odd_scope_values_never_collide(conformance: Harness) -> None:
    _require_scope(conformance)
    assert len({scope.namespace for scope in ODD_SCOPES}) == len(ODD_SCOPES)
    ids: dict[Scope, str] = {}
    for scope in ODD_SCOPES:
        item = _one(conformance.scoped(scope).write([{"key": "k", "content": "shared words"}]))
        ids[scope] = item.id
    for scope in ODD_SCOPES:
        h = conformance.scoped(scope)
        assert [item.id for item in h.items()] == [ids[scope]], scope
        assert [item.id for item in h.ok("MEMORY.GET", {"keys": ["k"]})] == [ids[scope]], scope
        assert _search_ids(h, "shared words") in (None, [ids[scope]]), scope
    assert conformance.items() == []  # nothing leaked into the unscoped namespace


def test_filter_cannot_widen_scope(conformance: Harness) -> None:
    # Metadata that names a namespace or tenant is just metadata: a filter only narrows
    _require_scope(conformance)
    alice, bob = Scope("acme", "alice"), Scope("acme", "bob")
    meta = {"namespace": bob.namespace, "tenant": "acme", "user": "bob", "scope": bob.namespace}
    conformance.scoped(alice).write([{"content": "alice secret", "metadata": meta}])
    widen = {
        "$or": [
            {"namespace": bob.namespace},
            {"namespace": alice.namespace},
            {"tenant": {"$exists": True}},
            {"tenant": {"$exists": False}},
        ]
    }
    as_bob = conformance.scoped(bob)
    if conformance.supports_filter(widen):
        assert as_bob.items(widen) == []
    assert as_bob.items() == []
    assert _search_ids(as_bob, "alice secret") in (None, [])
    as_alice = conformance.scoped(alice)
    assert len(as_alice.items(widen if conformance.supports_filter(widen) else None)) == 1


def test_spaces_confine_all_six_operations(conformance: Harness) -> None:
    # One user's long-term space and two task spaces: no operation crosses between them
    _require_scope(conformance)
    spaces = {
        "memory": conformance.scoped(Scope("acme", "alice")),
        "t1": conformance.scoped(Scope.for_task("acme", "alice", "t1")),
        "t2": conformance.scoped(Scope.for_task("acme", "alice", "t2")),
    }
    meta = {"kind": "checkpoint", "space": "memory", "namespace": "acme:alice:memory"}
    mine = {name: _one(h.write([{"key": "state", "content": f"{name} progress note",
                                 "metadata": meta}]))
            for name, h in spaces.items()}  # fmt: skip
    assert len({item.id for item in mine.values()}) == 3
    widen = {"$or": [{"space": "memory"}, {"kind": "checkpoint"}]}
    for name, h in spaces.items():
        foreign = [item.id for n, item in mine.items() if n != name]
        assert [i.id for i in h.ok("MEMORY.GET", {"keys": ["state"]})] == [mine[name].id]
        assert h.ok("MEMORY.GET", {"ids": foreign}) == []
        assert [item.id for item in h.items()] == [mine[name].id]
        if conformance.supports_filter(widen):
            assert [item.id for item in h.items(widen)] == [mine[name].id]
        assert _search_ids(h, "progress note") in (None, [mine[name].id])
        for other in foreign:
            assert h.code("MEMORY.UPDATE", {"memories": [{"id": other, "content": "x"}]}) == (
                ErrorCode.NOT_FOUND
            )
        assert h.ok("MEMORY.DELETE", {"ids": foreign}).deleted == []
    for name, h in spaces.items():
        assert _one(h.ok("MEMORY.GET", {"ids": [mine[name].id]})).content == f"{name} progress note"
    assert conformance.scoped(Scope("acme", "alice", "task:t3")).items() == []
    assert conformance.items() == []


class _Counting:
    """``inner`` with every method call counted by name (the store / provider spy)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return counted


def test_search_in_a_task_space_is_refused_before_the_store(conformance: Harness) -> None:
    # MEM-SEARCH-7: checkpoints are read with GET/QUERY, never searched; the SDK refuses
    # the SEARCH before the store or provider sees it (any input, valid or not)
    task = Scope.for_task("acme", "alice", "t1")
    if conformance.caps.scope:
        conformance.scoped(task).write([{"key": "state", "content": "progress note"}])
    store = _Counting(conformance.store)
    search = None if conformance.search is None else _Counting(conformance.search)
    memory = create_memory(store, search)
    store.calls.clear()
    if search is not None:
        search.calls.clear()
    for body in ({"query": "progress note", "limit": 5}, {"query": "x", "limit": 0}, {}):
        result = memory.execute("MEMORY.SEARCH", body, scope=task)
        assert result.status == "failed" and result.error is not None
        assert result.error.code == ErrorCode.INVALID_INPUT
        assert "scope.space" in result.error.message
    assert store.calls == [] and (search is None or search.calls == [])
    if conformance.caps.scope:  # GET in the task space still reads its checkpoint
        assert _one(conformance.scoped(task).ok("MEMORY.GET", {"keys": ["state"]}))
