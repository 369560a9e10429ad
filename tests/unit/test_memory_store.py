"""The in-memory reference store (ditto_worker.testing). Its behavioural checks shared
with SQLite live in plugins/sqlite/tests/test_store_agreement.py; these are its own."""

from __future__ import annotations

import threading

import pytest

import ditto_worker.testing as testing
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDraft,
    MemoryGetInput,
    MemoryQueryInput,
    MemorySearchInput,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    OrderBy,
)
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.memory.text import bm25, bm25_idf
from ditto_worker.testing import InMemoryMemoryStore, create_store


def write(store: InMemoryMemoryStore, *keys: str, **metadata: object) -> list[str]:
    items = store.write(
        MemoryWriteInput(
            memories=[
                MemoryDraft(key=k, content=f"text {k}", metadata=dict(metadata)) for k in keys
            ]
        )
    )
    return [item.id for item in items]


def keys(store: InMemoryMemoryStore, **kwargs: object) -> list[str | None]:
    page = store.query(MemoryQueryInput(limit=100, **kwargs))  # type: ignore[arg-type]
    return [item.key for item in page.items]


def test_exports_and_protocols() -> None:
    assert testing.__all__ == ["HashingEmbedder", "InMemoryMemoryStore", "create_store"]
    store = create_store({}, {})
    assert isinstance(store, MemoryStore) and isinstance(store, MemorySearchProvider)
    assert store.capabilities.batch_atomic is True  # MEM-PY-11


def test_create_store_has_no_settings() -> None:
    with pytest.raises(ConfigError):
        create_store({"path": "x"}, {})


def test_instances_do_not_share_state() -> None:
    first, second = create_store({}, {}), create_store(None, None)
    write(first, "a")
    assert keys(first) == ["a"] and keys(second) == []
    write(second, "a")  # no key conflict across instances


def test_returned_items_are_copies() -> None:
    store = InMemoryMemoryStore()
    content = {"list": [1]}
    (item,) = store.write(MemoryWriteInput(memories=[MemoryDraft(key="a", content=content)]))
    content["list"].append(2)
    item.content["list"].append(3)
    assert store.get(MemoryGetInput(keys=["a"]))[0].content == {"list": [1]}


def test_conflict_and_not_found_apply_nothing() -> None:
    # MEM-PY-11: all or nothing
    store = InMemoryMemoryStore()
    (a,) = write(store, "a")
    with pytest.raises(MemoryError) as info:
        write(store, "b", "a")
    assert info.value.code == "CONFLICT"
    with pytest.raises(MemoryError) as info:
        store.update(
            MemoryUpdateInput(
                memories=[
                    MemoryUpdateEntry(id=a, content="changed"),
                    MemoryUpdateEntry(id="gone", content="x"),
                ]
            )
        )
    assert info.value.code == "NOT_FOUND"
    assert [i.content for i in store.get(MemoryGetInput(keys=["a", "b"]))] == ["text a"]
    assert len(store) == 1


def test_delete_frees_key() -> None:
    # MEM-PY-12
    store = InMemoryMemoryStore()
    (a,) = write(store, "a")
    assert store.delete(MemoryDeleteInput(ids=[a, a, "x"])).deleted == [a]
    write(store, "a")
    assert keys(store) == ["a"]


def test_query_order_and_cursor() -> None:
    # MEM-PY-6 default creation order; MEM-QUERY-4 paging
    store = InMemoryMemoryStore()
    write(store, "c", "a", "b", n=1)
    assert keys(store) == ["c", "a", "b"]
    assert keys(store, order_by=[OrderBy(field="key", direction="desc")]) == ["c", "b", "a"]
    page = store.query(MemoryQueryInput(limit=2, order_by=[OrderBy(field="key")]))
    assert [i.key for i in page.items] == ["a", "b"] and page.next_cursor
    rest = store.query(
        MemoryQueryInput(limit=2, order_by=[OrderBy(field="key")], cursor=page.next_cursor)
    )
    assert [i.key for i in rest.items] == ["c"] and rest.next_cursor is None
    with pytest.raises(MemoryError) as info:
        store.query(MemoryQueryInput(limit=2, cursor=page.next_cursor))
    assert info.value.code == "INVALID_CURSOR"


def test_keyword_search_scores_bm25_per_scope() -> None:
    store = InMemoryMemoryStore()
    store.write(
        MemoryWriteInput(
            memories=[
                MemoryDraft(key="one", content="red car"),
                MemoryDraft(key="two", content="Red blue car"),
                MemoryDraft(key="zh", content="我的工作是老师"),
            ]
        )
    )
    results = store.search(MemorySearchInput(query="red BLUE?", limit=5))
    # BM25 over the 3 records: "red" in 2 (idf ln(1 + 1.5/2.5)), "blue" in 1 (ln(1 + 2.5/1.5));
    # lengths: one 3 (key + 2 words), two 4, zh 14 (key, unigrams, bigrams); avgdl 7
    idf = {"red": bm25_idf(3, 2), "blue": bm25_idf(3, 1)}
    two = bm25({"red": 1, "blue": 1}, 4, idf, 7)
    one = bm25({"red": 1}, 3, idf, 7)
    assert [(r.memory.key, r.score) for r in results] == [
        ("two", pytest.approx(two)),
        ("one", pytest.approx(one)),
    ]
    assert [r.memory.key for r in store.search(MemorySearchInput(query="工作", limit=5))] == ["zh"]
    with pytest.raises(MemoryError) as info:
        store.search(MemorySearchInput(query="x", strategy="bm25", limit=5))
    assert info.value.code == "UNSUPPORTED_STRATEGY"


def test_cancelled_token() -> None:
    # MEM-RUN-2
    store = InMemoryMemoryStore()
    token = CancelToken()
    token.cancel()
    with pytest.raises(MemoryError) as info:
        store.write(
            MemoryWriteInput(memories=[MemoryDraft(content=1)]), MemoryCallOptions(cancel=token)
        )
    assert info.value.code == "MEMORY_CANCELLED"
    assert len(store) == 0


def test_thread_safe_writes() -> None:
    store = InMemoryMemoryStore()

    def work(prefix: str) -> None:
        for i in range(50):
            write(store, f"{prefix}-{i}")

    threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(store) == 200
    assert len(set(keys(store))) == 100  # limit 100 of 200, all distinct
