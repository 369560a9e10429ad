"""The eval's caches answer as the store does (issue 38 item 1)."""

from __future__ import annotations

from pathlib import Path

from ditto_worker.cli.eval_cache import MemoSource, neighbour_ranges
from ditto_worker.contracts import MemoryQueryInput, MemorySearchInput, MemoryWriteInput
from ditto_worker.memory.search.pipeline import RetrievalConfig, run_pipeline
from ditto_worker.memory.search.scoring import fetch_limit, neighbour_filter
from ditto_worker.memory.search.settings import ContextSettings
from ditto_worker.testing import HashingEmbedder

CONTEXT = ContextSettings(group_field="session", order_field="turn", window=2)
WORDS = ("puppy", "studio", "dance", "clothes", "store", "luna", "paint", "lake")


def _drafts() -> list[dict[str, object]]:
    drafts: list[dict[str, object]] = []
    for session in (1, 2, 3):
        for turn in range(1, 9):
            words = f"{WORDS[(session + turn) % 8]} {WORDS[turn % 8]} turn {turn}"
            drafts.append({"content": words, "metadata": {"session": session, "turn": turn}})
    drafts.append({"content": "no position", "metadata": {"session": 2}})
    drafts.append({"content": "a string group", "metadata": {"session": "2", "turn": 3}})
    drafts.append({"content": "a boolean order", "metadata": {"session": 2, "turn": True}})
    return drafts


def _store(tmp_path: Path) -> object:
    from ditto_plugin_sqlite import SqliteMemoryStore

    store = SqliteMemoryStore(tmp_path / "m.sqlite", embedder=HashingEmbedder())
    store.write(MemoryWriteInput.model_validate({"memories": _drafts()}))
    return store


def test_neighbour_queries_are_answered_as_the_store_answers_them(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        memo = MemoSource(store)
        items = store.query(MemoryQueryInput(limit=100)).items  # type: ignore[attr-defined]
        picks = [[items[0]], [items[3], items[12]], [items[7], items[8], items[20]], items[:24]]
        for picked in picks:
            where = neighbour_filter(picked, CONTEXT, None)
            assert neighbour_ranges(where) is not None
            for limit in (fetch_limit(len(picked), CONTEXT), 3):
                request = MemoryQueryInput(filter=where, limit=limit)
                mine, theirs = memo.query(request), store.query(request)  # type: ignore[attr-defined]
                assert [i.id for i in mine.items] == [i.id for i in theirs.items]
                assert (mine.next_cursor is None) == (theirs.next_cursor is None)
        assert len(memo.listing()) == len(items) == 27
    finally:
        store.close()  # type: ignore[attr-defined]


def test_other_queries_go_to_the_store(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        memo = MemoSource(store)
        where = {"session": {"$eq": 2}}
        assert neighbour_ranges(where) is None
        assert neighbour_ranges({"$and": [where, {"$or": []}]}) is None
        request = MemoryQueryInput(filter=where, limit=100)
        ids = [i.id for i in memo.query(request).items]
        assert ids == [i.id for i in store.query(request).items]  # type: ignore[attr-defined]
        assert memo.listing() is not None and len(ids) == 10
    finally:
        store.close()  # type: ignore[attr-defined]


def test_the_pipeline_ranks_the_same_over_the_memo_source(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        config = RetrievalConfig.model_validate(
            {"context": {"groupField": "session", "orderField": "turn", "window": 1,
                         "expand": 5}}
        )  # fmt: skip
        memo = MemoSource(store)
        embedder = HashingEmbedder()
        for query in ("puppy studio", "dance lake", "clothes"):
            request = MemorySearchInput(query=query, strategy="hybrid", limit=10)
            direct = run_pipeline(store, embedder, config, request)
            cached = run_pipeline(memo, embedder, config, request)
            assert [(r.memory.id, r.score) for r in cached] == [
                (r.memory.id, r.score) for r in direct
            ]
    finally:
        store.close()  # type: ignore[attr-defined]
