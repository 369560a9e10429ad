"""DittoStore (LangGraph's BaseStore) on SQLite: one vector per indexed text (an item scored
by its best text) and TTLs (expiry as data, refresh on read, sweep). The clock is the
store module's ``_now``, set by the tests: no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from ditto_plugin_sqlite import SqliteMemoryStore  # noqa: E402
from ditto_worker import create_ditto, create_memory_worker  # noqa: E402
from ditto_worker.config import load_runtime_config  # noqa: E402
from ditto_worker.integrations.langgraph import (  # noqa: E402
    AsyncDittoStore,
    DittoStore,
    embedding_provider,
)
from ditto_worker.integrations.langgraph import store as store_module  # noqa: E402

SCOPE = {"tenant": "t1", "user": "u1"}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def letters(texts: Sequence[str]) -> list[list[float]]:
    """A vector of letter counts per text: equal texts score 1, disjoint ones 0."""
    return [[float(text.count(c)) + 1e-3 for c in LETTERS] for text in texts]


INDEX: Any = {"dims": len(LETTERS), "embed": letters, "fields": ["a", "b", "c"]}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_000_000.0]
    monkeypatch.setattr(store_module, "_now", lambda: now[0])
    return now


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Any]:
    sqlite = SqliteMemoryStore(tmp_path / "m.db", embedder=embedding_provider(INDEX))
    with create_ditto([create_memory_worker(sqlite)], load_runtime_config(None, env={})) as rt:
        yield rt


def test_every_indexed_text_is_a_vector_of_its_own(runtime: Any) -> None:
    store = DittoStore(runtime, scope=SCOPE, index=INDEX)
    store.put(("d",), "one", {"a": "xxx", "b": "yyy", "skip": "www"})
    store.put(("d",), "two", {"a": "uuu", "b": "vvv", "c": "xxx"})
    top = store.search(("d",), query="xxx")
    assert [r.key for r in top] != [] and {r.key for r in top} == {"one", "two"}
    assert top[0].score == pytest.approx(top[1].score, abs=1e-5)
    assert top[0].score == pytest.approx(1.0, abs=1e-3)
    found = store.search(("d",), query="uuu")
    assert [r.key for r in found] == ["two", "one"] and found[0].score > found[1].score
    assert all(r.score < 0.9 for r in store.search(("d",), query="www"))  # not indexed
    # the hidden records are never items: get, list and namespaces see two items
    assert len(store.search(("d",))) == 2 and store.list_namespaces() == [("d",)]
    store.put(("d",), "two", {"a": "zzz"})  # fewer texts now: the old ones go
    for gone in ("uuu", "vvv", "xxx"):  # its old texts: no vector of them is left
        assert all(r.score < 0.9 for r in store.search(("d",), query=gone) if r.key == "two")
    assert store.search(("d",), query="zzz")[0].key == "two"
    store.delete(("d",), "two")
    store.delete(("d",), "one")
    assert store.search(("d",), query="xxx") == [] and store.list_namespaces() == []


def test_filters_and_paging_count_items_not_vectors(runtime: Any) -> None:
    store = DittoStore(runtime, scope=SCOPE, index=INDEX)
    for i in range(5):
        store.put(("d",), f"k{i}", {"a": "xx" + "y" * i, "b": "xx", "n": i})
    page = store.search(("d",), query="xx", limit=2, offset=1)
    assert len(page) == 2 and len({r.key for r in page}) == 2
    assert {r.key for r in store.search(("d",), query="xx", filter={"n": {"$gte": 3}})} == {
        "k3",
        "k4",
    }


def test_expired_items_are_never_returned_and_a_sweep_deletes_them(
    runtime: Any, clock: list[float]
) -> None:
    store = DittoStore(runtime, scope=SCOPE, index=INDEX, ttl={"default_ttl": 1.0})
    store.put(("d",), "short", {"a": "xxx", "b": "yyy"})
    store.put(("d",), "kept", {"a": "xxx"}, ttl=None)
    store.put(("e",), "long", {"a": "zzz"}, ttl=10)
    assert store.get(("d",), "short") is not None
    clock[0] += 61  # one minute and a second later
    assert store.get(("d",), "short") is None
    assert {r.key for r in store.search(("d",))} == {"kept"}
    assert {r.key for r in store.search(("d",), query="yyy")} == {"kept"}
    assert store.sweep_ttl() == 1
    assert store.sweep_ttl() == 0
    assert sorted(store.list_namespaces()) == [("d",), ("e",)]
    clock[0] += 600
    assert store.sweep_ttl() == 1 and store.list_namespaces() == [("d",)]  # marker gone
    assert store.get(("d",), "kept") is not None


def test_a_read_restarts_the_ttl_only_with_refresh_on_read(
    runtime: Any, clock: list[float]
) -> None:
    fresh = DittoStore(runtime, scope=SCOPE, ttl={"default_ttl": 1.0, "refresh_on_read": True})
    plain = DittoStore(runtime, scope={"tenant": "t2", "user": "u1"}, ttl={"default_ttl": 1.0})
    for store in (fresh, plain):
        store.put(("d",), "a", {"n": 1})
        store.put(("d",), "b", {"n": 2})
    clock[0] += 45
    for store in (fresh, plain):
        assert store.get(("d",), "a") is not None
        assert len(store.search(("d",), filter={"n": 2})) == 1
    assert fresh.get(("d",), "a", refresh_ttl=False) is not None  # not refreshed by this
    clock[0] += 45  # 90 s after the put, 45 s after the reads
    assert fresh.get(("d",), "a", refresh_ttl=False) is not None
    assert fresh.search(("d",), filter={"n": 2}, refresh_ttl=False) != []
    assert plain.get(("d",), "a") is None and plain.search(("d",)) == []
    assert fresh.sweep_ttl() == 0 and plain.sweep_ttl() == 2


def test_the_async_store_sweeps_as_a_coroutine(runtime: Any, clock: list[float]) -> None:
    store = AsyncDittoStore(runtime, scope=SCOPE, ttl={"default_ttl": 1.0})

    async def run() -> None:
        await store.aput(("d",), "a", {"n": 1})
        clock[0] += 120
        assert await store.aget(("d",), "a") is None
        assert await store.sweep_ttl() == 1
        task = await store.start_ttl_sweeper(sweep_interval_minutes=60)
        assert not task.done()
        assert await store.stop_ttl_sweeper(timeout=30) and task.done()

    asyncio.run(run())


def test_the_sweeper_thread_stops_when_asked(runtime: Any) -> None:
    store = DittoStore(runtime, scope=SCOPE, ttl={"sweep_interval_minutes": 60})
    done = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is done and not done.done()
    assert store.stop_ttl_sweeper(timeout=30) and done.done()


@pytest.mark.parametrize("ttl", [1e308, float("inf"), float("nan")], ids=["huge", "inf", "nan"])
def test_a_ttl_without_a_finite_expiry_is_refused_naming_ttl(runtime: Any, ttl: float) -> None:
    store = DittoStore(runtime, scope=SCOPE)
    with pytest.raises(ValueError, match="^ttl: "):
        store.put(("d",), "k", {"a": "x"}, ttl=ttl)
    assert store.get(("d",), "k") is None  # nothing half-written


def test_a_replace_failing_part_way_leaves_the_item_as_it_was(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ditto_worker.integrations.langgraph.writes import NodeCallError, Nodes

    store = DittoStore(runtime, scope=SCOPE, index=INDEX)
    store.put(("d",), "k", {"a": "xxx"})
    real = Nodes.call

    def failing(self: Nodes, node: str, input: dict[str, Any]) -> Any:
        if node == "MEMORY.WRITE":  # the new texts' records cannot be written
            raise NodeCallError("MEMORY_BACKEND_ERROR", "the store failed")
        return real(self, node, input)

    monkeypatch.setattr(Nodes, "call", failing)
    with pytest.raises(NodeCallError):
        store.put(("d",), "k", {"a": "uuu", "b": "vvv"})
    monkeypatch.setattr(Nodes, "call", real)
    item = store.get(("d",), "k")
    assert item is not None and item.value == {"a": "xxx"}  # not the new value
    assert [r.key for r in store.search(("d",), query="xxx")] == ["k"]
