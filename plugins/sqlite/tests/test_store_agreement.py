"""The same behavioural checks against the in-memory reference store and SQLite.

Every test takes the ``store`` fixture (parametrized: ``memory``, ``sqlite``), so both
stores must agree with each other and with the pure evaluator of ``ditto_worker.filters``.
"""

from __future__ import annotations

from typing import Any

import pytest

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
from ditto_worker.errors import MemoryError
from ditto_worker.filters import matches, parse_filter

DATASET: list[tuple[str | None, Any]] = [
    ("int", {"n": 5, "s": "b", "flag": True, "nested": {"x": 1}}),
    ("float", {"n": 2.5, "s": "a", "flag": False}),
    ("str5", {"n": "5", "s": "c"}),
    ("null", {"n": None, "nested": {"x": "1"}}),
    ("bool", {"n": True, "tags": ["a", "b"]}),
    ("zero", {"n": 0, "flag": 0, "nested": {"x": {"y": 2}}}),
    ("obj", {"n": {"v": 1}, "nested": "flat"}),
    ("arr", {"n": [1, 2]}),
    ("none", None),
    (None, {"n": -1000, "s": "é"}),
    ("big", {"n": 10**15, "s": "Z"}),
    ("negf", {"n": -1000.0, "s": ""}),
]


def draft(key: str | None, metadata: Any, content: Any = "x") -> MemoryDraft:
    if metadata is None:
        return MemoryDraft(key=key, content=content)
    return MemoryDraft(key=key, content=content, metadata=metadata)


@pytest.fixture
def loaded(store: Any) -> Any:
    store.write(MemoryWriteInput(memories=[draft(k, m) for k, m in DATASET]))
    return store


def label(item: Any) -> str:
    return item.key if item.key is not None else "<nokey>"


def run_query(store: Any, flt: Any = None, order_by: Any = None, limit: int = 10_000) -> list[str]:
    """All matching labels, following cursors with pages of ``limit``."""
    labels: list[str] = []
    cursor = None
    for _ in range(1000):
        page = store.query(
            MemoryQueryInput(filter=flt, order_by=order_by, limit=limit, cursor=cursor)
        )
        assert len(page.items) <= limit  # MEM-QUERY-2
        labels += [label(item) for item in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return labels
    raise AssertionError("paging did not end")


def oracle(flt: dict[str, Any]) -> list[str]:
    node = parse_filter(flt)
    views = [{"id": "?", "key": k, "metadata": m} for k, m in DATASET]
    return [v["key"] or "<nokey>" for v in views if matches(node, v)]


# --- filters (MEM-PY-5) -----------------------------------------------------------------

EXPECTED: list[tuple[dict[str, Any], set[str]]] = [
    ({"n": {"$gte": 1}}, {"int", "float", "big"}),  # not "5", not true
    ({"n": 5}, {"int"}),
    ({"n": 5.0}, {"int"}),
    ({"n": True}, {"bool"}),
    ({"flag": 0}, {"zero"}),  # false is not 0
    ({"flag": False}, {"float"}),
    ({"n": None}, {"null", "none"}),  # null or missing
    (
        {"n": {"$ne": 5}},
        {label for label, _ in [(k or "<nokey>", m) for k, m in DATASET]} - {"int"},
    ),
    ({"n": {"$exists": False}}, {"none"}),
    ({"n": {"$in": [5, "a", None, True]}}, {"int", "null", "none", "bool"}),
    ({"n": {"$lt": "6"}}, {"str5"}),
    ({"n": -1000}, {"<nokey>", "negf"}),
    ({"n": {"$gt": -1000, "$lt": 3}}, {"float", "zero"}),
    ({"nested.x": 1}, {"int"}),
    ({"nested.x": "1"}, {"null"}),
    ({"nested.x.y": 2}, {"zero"}),
    ({"nested.x": {"$exists": True}}, {"int", "null", "zero"}),
    ({"tags": "a"}, set()),  # no array-element matching
    ({"$or": [{"n": 5}, {"s": "a"}]}, {"int", "float"}),
    ({"n": {"$gt": 0}, "s": "b"}, {"int"}),
    ({"s": {"$gte": "a"}}, {"int", "float", "str5", "<nokey>"}),  # "Z" < "a" < "é"
    ({"s": ""}, {"negf"}),
    ({"key": {"$exists": False}}, {"<nokey>"}),
    ({"key": {"$in": ["int", "float", "nope"]}}, {"int", "float"}),
    ({"key": {"$gt": "s"}}, {"str5", "zero"}),
    ({"s": "x' OR 1=1 --"}, set()),
]


@pytest.mark.parametrize(("flt", "expected"), EXPECTED, ids=lambda v: str(v)[:40])
def test_filter_semantics(loaded: Any, flt: dict[str, Any], expected: set[str]) -> None:
    # MEM-PY-5: typed comparisons, missing fields, nested paths, both stores alike
    got = run_query(loaded, flt)
    assert set(got) == expected
    assert len(got) == len(set(got))
    if not any(name.startswith("key") for name in flt):
        assert set(oracle(flt)) == expected


ORACLE_FILTERS: list[dict[str, Any]] = [
    {"n": {"$nin": [5, None, "5"]}},
    {"n": {"$ne": None}},
    {"n": {"$lte": 2.5}},
    {"s": {"$lt": "b"}},
    {"flag": {"$in": [True, 0]}},
    {"nested": {"$exists": True}, "n": {"$exists": True}},
    {"$and": [{"$or": [{"n": {"$gt": 1}}, {"s": "c"}]}, {"nested": {"$exists": False}}]},
    {"nested.x.y": {"$ne": 2}},
    {"n": {"$in": []}},
    {"n": {"$nin": []}},
]


@pytest.mark.parametrize("flt", ORACLE_FILTERS, ids=lambda v: str(v)[:40])
def test_filter_agrees_with_oracle(loaded: Any, flt: dict[str, Any]) -> None:
    assert run_query(loaded, flt) == oracle(flt)  # default order = creation order


ODD_KEYS = [
    'a"b',
    "it's",
    "100%",
    "_",
    "with space",
    "ключ",
    "键",
    "back\\slash",
    "tab\there",
    "[0]",
]


@pytest.mark.parametrize("odd", ODD_KEYS)
def test_odd_metadata_keys(store: Any, odd: str) -> None:
    # MEM-PY-5: field paths are bound/escaped safely; values never formatted into SQL
    store.write(
        MemoryWriteInput(
            memories=[
                draft("hit", {odd: 1, "nest": {odd: "v"}}),
                draft("miss", {odd: 2, "other": 1}),
                draft("plain", {"a": 1}),
            ]
        )
    )
    assert run_query(store, {odd: 1}) == ["hit"]
    assert run_query(store, {odd: {"$exists": False}}) == ["plain"]
    assert run_query(store, {f"nest.{odd}": "v"}) == ["hit"]
    assert run_query(store, {odd: {"$ne": 1}}) == ["miss", "plain"]
    desc = [OrderBy(field=odd, direction="desc")]
    assert run_query(store, None, desc) == ["miss", "hit", "plain"]


@pytest.mark.parametrize(
    "flt",
    [{"n": {"$regex": "x"}}, {"n": {"a": 1}}, {"$nor": [{"n": 1}]}, {"": 1}, {"n": [1]}],
)
def test_unsupported_filter_in_query_and_search(store: Any, flt: dict[str, Any]) -> None:
    # MEM-QUERY-3: explicit failure
    for call in (
        lambda: store.query(MemoryQueryInput(filter=flt, limit=5)),
        lambda: store.search(MemorySearchInput(query="x", filter=flt, limit=5)),
    ):
        with pytest.raises(MemoryError) as info:
            call()
        assert info.value.code == "UNSUPPORTED_FILTER"


# --- order and paging (MEM-QUERY-2/4, MEM-PY-6) -----------------------------------------

N_ASC = [
    "null",
    "none",
    "<nokey>",
    "negf",
    "zero",
    "float",
    "int",
    "big",
    "str5",
    "obj",
    "arr",
    "bool",
]


def test_typed_sort_order(loaded: Any) -> None:
    # missing/null < numbers < strings < objects < arrays < booleans; seq breaks ties
    assert run_query(loaded, None, [OrderBy(field="n")]) == N_ASC
    desc = run_query(loaded, None, [OrderBy(field="n", direction="desc")])
    assert desc == ["bool", "arr", "obj", "str5", "big", "int", "float", "zero", "<nokey>",
                    "negf", "null", "none"]  # fmt: skip


@pytest.mark.parametrize(
    "order_by",
    [
        None,
        [OrderBy(field="n")],
        [OrderBy(field="n", direction="desc")],
        [OrderBy(field="s"), OrderBy(field="n", direction="desc")],
        [OrderBy(field="flag", direction="desc"), OrderBy(field="key")],
        [OrderBy(field="nested.x"), OrderBy(field="id", direction="desc")],
        [OrderBy(field="createdAt", direction="desc")],
    ],
)
@pytest.mark.parametrize("limit", [1, 2, 5])
def test_paging_matches_single_page(loaded: Any, order_by: Any, limit: int) -> None:
    # MEM-QUERY-4: paging neither repeats nor skips
    whole = run_query(loaded, None, order_by)
    assert sorted(whole) == sorted(k or "<nokey>" for k, _ in DATASET)
    assert run_query(loaded, None, order_by, limit=limit) == whole


def test_default_order_is_creation_order(store: Any) -> None:
    # MEM-PY-6: createdAt ascending, input order within a batch
    for batch in (["b", "a", "c"], ["z"], ["y", "x"]):
        store.write(MemoryWriteInput(memories=[draft(k, {}) for k in batch]))
    assert run_query(store) == ["b", "a", "c", "z", "y", "x"]
    assert run_query(store, None, [OrderBy(field="createdAt")]) == run_query(store)
    assert run_query(store, {"createdAt": {"$gt": "2000-01-01T00:00:00.000000Z"}}, limit=2) == (
        run_query(store)
    )
    assert run_query(store, {"createdAt": {"$lt": "2000-01-01T00:00:00.000000Z"}}) == []


def test_last_page_omits_cursor(loaded: Any) -> None:
    page = loaded.query(MemoryQueryInput(limit=len(DATASET)))
    assert len(page.items) == len(DATASET) and page.next_cursor is None
    page = loaded.query(MemoryQueryInput(limit=len(DATASET) - 1))
    assert page.next_cursor is not None


@pytest.mark.parametrize("order_by", [None, [OrderBy(field="n", direction="desc")]])
def test_paging_across_inserts_and_deletes(store: Any, order_by: Any) -> None:
    # MEM-PY-6, MEM-QUERY-4: records present throughout are seen exactly once
    items = store.write(
        MemoryWriteInput(memories=[draft(f"r{i}", {"n": i % 4}) for i in range(12)])
    )
    by_key = {item.key: item.id for item in items}
    seen: list[str] = []
    deleted: set[str] = set()
    cursor = None
    for step in range(100):
        page = store.query(MemoryQueryInput(order_by=order_by, limit=3, cursor=cursor))
        seen += [item.key for item in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
        victims = [k for k in (seen[-1], f"r{11 - step}") if k not in deleted]
        store.delete(MemoryDeleteInput(ids=[by_key[k] for k in victims]))
        deleted.update(victims)
        store.write(MemoryWriteInput(memories=[draft(f"new{step}", {"n": step % 4})]))
    assert len(seen) == len(set(seen))
    survivors = {f"r{i}" for i in range(12)} - deleted
    assert survivors <= set(seen)


def test_updated_sort_key_may_move(store: Any) -> None:
    # documented: a record whose sort key changes between pages may move; no error
    items = store.write(MemoryWriteInput(memories=[draft(f"r{i}", {"n": i}) for i in range(4)]))
    order = [OrderBy(field="n")]
    page = store.query(MemoryQueryInput(order_by=order, limit=2))
    store.update(MemoryUpdateInput(memories=[MemoryUpdateEntry(id=items[0].id, metadata={"n": 9})]))
    rest = store.query(MemoryQueryInput(order_by=order, limit=10, cursor=page.next_cursor))
    assert [i.key for i in rest.items] == ["r2", "r3", "r0"]


def test_cursor_bound_to_filter_and_order_by(loaded: Any) -> None:
    # MEM-PY-5: INVALID_CURSOR for a cursor made for another query, or malformed
    page = loaded.query(MemoryQueryInput(filter={"n": {"$exists": True}}, limit=2))
    assert page.next_cursor
    others = [
        MemoryQueryInput(filter={"n": {"$exists": False}}, limit=2, cursor=page.next_cursor),
        MemoryQueryInput(limit=2, cursor=page.next_cursor),
        MemoryQueryInput(
            filter={"n": {"$exists": True}},
            order_by=[OrderBy(field="n")],
            limit=2,
            cursor=page.next_cursor,
        ),
        MemoryQueryInput(filter={"n": {"$exists": True}}, limit=2, cursor="garbage"),
        MemoryQueryInput(filter={"n": {"$exists": True}}, limit=2, cursor=page.next_cursor[:-3]),
    ]
    for query in others:
        with pytest.raises(MemoryError) as info:
            loaded.query(query)
        assert info.value.code == "INVALID_CURSOR"


def test_unsupported_order_by(store: Any) -> None:
    with pytest.raises(MemoryError) as info:
        store.query(MemoryQueryInput(order_by=[OrderBy(field="$n")], limit=1))
    assert info.value.code == "UNSUPPORTED_ORDER_BY"


# --- writes (MEM-WRITE, MEM-UPDATE, MEM-DELETE, MEM-PY-11/12) ----------------------------


def test_write_returns_full_items_in_order(store: Any) -> None:
    # MEM-WRITE-2, MEM-DATA-4: null content kept
    drafts = [draft("a", {"m": 1}, {"x": [1, None]}), draft(None, None, None), draft("c", {}, 3)]
    items = store.write(MemoryWriteInput(memories=drafts))
    assert [(i.key, i.content, i.metadata) for i in items] == [
        ("a", {"x": [1, None]}, {"m": 1}),
        (None, None, None),
        ("c", 3, {}),
    ]
    assert len({i.id for i in items}) == 3
    assert store.get(MemoryGetInput(ids=[i.id for i in items])) == items


def test_conflict_writes_nothing(store: Any) -> None:
    # MEM-PY-11, MEM-WRITE-3: all or nothing, never a silent drop
    store.write(MemoryWriteInput(memories=[draft("a", {})]))
    for batch in (["b", "a"], ["c", "c"]):
        with pytest.raises(MemoryError) as info:
            store.write(MemoryWriteInput(memories=[draft(k, {}) for k in batch]))
        assert info.value.code == "CONFLICT"
    assert run_query(store) == ["a"]


def test_update_presence_semantics(store: Any) -> None:
    # MEM-UPDATE-1: omitted keeps, metadata replaces, {} clears, content null is a value
    a, b, c = store.write(
        MemoryWriteInput(
            memories=[
                draft("a", {"x": 1, "y": 2}, "A"),
                draft("b", {"x": 1}, "B"),
                draft("c", None, "C"),
            ]
        )
    )
    out = store.update(
        MemoryUpdateInput(
            memories=[
                MemoryUpdateEntry(id=a.id, metadata={"z": 3}),
                MemoryUpdateEntry(id=b.id, content=None),
                MemoryUpdateEntry(id=c.id, content={"new": True}, metadata={}),
            ]
        )
    )
    assert [(i.id, i.key, i.content, i.metadata) for i in out] == [
        (a.id, "a", "A", {"z": 3}),
        (b.id, "b", None, {"x": 1}),
        (c.id, "c", {"new": True}, {}),
    ]
    assert store.get(MemoryGetInput(keys=["a", "b", "c"])) == out
    assert run_query(store, {"x": 1}) == ["b"]


def test_update_missing_id_applies_nothing(store: Any) -> None:
    # MEM-UPDATE-2, MEM-PY-11: NOT_FOUND, never upsert, nothing of the batch applied
    (a,) = store.write(MemoryWriteInput(memories=[draft("a", {"v": 1}, "old")]))
    with pytest.raises(MemoryError) as info:
        store.update(
            MemoryUpdateInput(
                memories=[
                    MemoryUpdateEntry(id=a.id, content="new"),
                    MemoryUpdateEntry(id="missing", content="x"),
                ]
            )
        )
    assert info.value.code == "NOT_FOUND"
    assert store.get(MemoryGetInput(ids=[a.id]))[0].content == "old"
    assert store.get(MemoryGetInput(ids=["missing"])) == []


def test_updated_at_is_filterable(store: Any) -> None:
    items = store.write(MemoryWriteInput(memories=[draft(f"r{i}", {}) for i in range(3)]))
    store.update(MemoryUpdateInput(memories=[MemoryUpdateEntry(id=items[1].id, content="z")]))
    assert run_query(store, None, [OrderBy(field="updatedAt", direction="desc")])[0] == "r1"


def test_delete_frees_key_and_reports_only_deleted(store: Any) -> None:
    # MEM-DELETE-2/3, MEM-PY-12
    a, b = store.write(MemoryWriteInput(memories=[draft("a", {}), draft("b", {})]))
    out = store.delete(MemoryDeleteInput(ids=["nope", b.id, a.id, b.id]))
    assert out.deleted == [b.id, a.id]
    assert store.delete(MemoryDeleteInput(ids=[a.id])).deleted == []
    assert store.get(MemoryGetInput(ids=[a.id], keys=["a"])) == []
    assert run_query(store) == []
    (again,) = store.write(MemoryWriteInput(memories=[draft("a", {"v": 2})]))
    assert again.id != a.id
    assert store.get(MemoryGetInput(keys=["a"])) == [again]


def test_get_union_each_once(store: Any) -> None:
    # MEM-GET-1/2
    a, b, _ = store.write(MemoryWriteInput(memories=[draft(k, {}) for k in "abc"]))
    got = store.get(MemoryGetInput(ids=[b.id, a.id, "nope"], keys=["a", "zz", "b"]))
    assert sorted(i.id for i in got) == sorted([a.id, b.id])


# --- search (MEM-SEARCH) ----------------------------------------------------------------

TEXTS = {
    "job": "Jon's job: he works as a barista at a cafe downtown.",
    "pet": "Melanie adopted a dog named Luna last spring.",
    "zh": "我最近开始学习中文，我的工作是老师。",
    "obj": {"title": "Hiking trip", "notes": ["Jon hiked Mount Tam", 42]},
    "nul": None,
}


@pytest.fixture
def texts(store: Any) -> Any:
    store.write(
        MemoryWriteInput(memories=[draft(k, {"k": k}, content) for k, content in TEXTS.items()])
    )
    return store


def search_keys(store: Any, query: Any, **kwargs: Any) -> list[str]:
    results = store.search(MemorySearchInput(query=query, limit=kwargs.pop("limit", 10), **kwargs))
    assert all(r.score is not None and r.score > 0 for r in results)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    return [r.memory.key for r in results]


@pytest.mark.parametrize(
    "query",
    [
        "What's Jon's \"job\"?",
        'barista* AND -NEAR("x" y) OR',
        "job:  ^barista (cafe",
        "\"unbalanced 'quotes barista",
    ],
)
def test_raw_questions_are_safe(texts: Any, query: str) -> None:
    # MEM-SEARCH-1: the query is tokenized and quoted, never raw FTS syntax
    assert search_keys(texts, query)[0] == "job"


def test_search_cjk_two_characters(texts: Any) -> None:
    assert search_keys(texts, "工作") == ["zh"]
    assert search_keys(texts, "他的工作是什么？") == ["zh"]


def test_search_object_content_by_string_values(texts: Any) -> None:
    assert search_keys(texts, "hiking") == ["obj"]
    assert "obj" not in search_keys(texts, "title 42")


def test_search_empty_and_punctuation(texts: Any) -> None:
    assert search_keys(texts, "?!... ---") == []
    assert search_keys(texts, "") == []
    assert search_keys(texts, "xylophone") == []


def test_search_validation(store: Any) -> None:
    # MEM-SEARCH-2: unknown strategy rejected; query must be text
    with pytest.raises(MemoryError) as info:
        store.search(MemorySearchInput(query="x", strategy="vector", limit=3))
    assert info.value.code == "UNSUPPORTED_STRATEGY"
    for query in ([0.1, 0.2], {"text": "x"}, None, 5):
        with pytest.raises(MemoryError) as info:
            store.search(MemorySearchInput(query=query, limit=3))
        assert info.value.code == "INVALID_INPUT"
    assert store.search(MemorySearchInput(query="x", strategy="keyword", limit=3)) == []


def test_search_filter_applies_before_limit(store: Any) -> None:
    # filtered-out, higher-scoring records never make results short of min(limit, matches)
    strong = [draft(None, {"g": "x"}, "apple banana cherry apple banana") for _ in range(30)]
    weak = [draft(f"w{i}", {"g": "y"}, f"apple pie number {i}") for i in range(3)]
    store.write(MemoryWriteInput(memories=strong + weak))
    assert search_keys(store, "apple banana cherry", filter={"g": "y"}, limit=5) == [
        "w0",
        "w1",
        "w2",
    ]
    assert len(search_keys(store, "apple banana cherry", filter={"g": "y"}, limit=2)) == 2
    assert len(search_keys(store, "apple", limit=7)) == 7


def test_search_ranks_more_matching_terms_higher(store: Any) -> None:
    store.write(
        MemoryWriteInput(
            memories=[
                draft("one", {}, "red car"),
                draft("two", {}, "red blue car"),
                draft("none", {}, "green bike"),
                draft("three", {}, "red blue green car"),
            ]
        )
    )
    keys = search_keys(store, "red blue green")
    assert keys[:2] == ["three", "two"] and sorted(keys[2:]) == ["none", "one"]


def test_search_follows_updates_and_deletes(texts: Any) -> None:
    # the keyword index changes with the record
    (job,) = texts.get(MemoryGetInput(keys=["job"]))
    texts.update(MemoryUpdateInput(memories=[MemoryUpdateEntry(id=job.id, content="plumber")]))
    assert search_keys(texts, "barista") == []
    assert search_keys(texts, "plumber") == ["job"]
    texts.update(MemoryUpdateInput(memories=[MemoryUpdateEntry(id=job.id, metadata={"k": "z"})]))
    assert search_keys(texts, "plumber", filter={"k": "z"}) == ["job"]
    texts.delete(MemoryDeleteInput(ids=[job.id]))
    assert search_keys(texts, "plumber") == []
