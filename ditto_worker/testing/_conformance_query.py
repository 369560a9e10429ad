"""Conformance: the shared filter language, typed order, keyset paging and cursors.

Rules: MEM-QUERY-2/3/4, MEM-PY-5/6. Expected results are checked against the pure
evaluator of :mod:`ditto_worker.memory.filters` as well, so every store agrees with the oracle.
"""

from __future__ import annotations

from typing import Any

from ditto_worker.memory.capabilities import ALL_FILTER_OPERATORS, METADATA_FIELDS, RESERVED_FIELDS
from ditto_worker.memory.filters import matches, parse_filter
from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "ODD_FIELDS",
    "QUERY_FIELDS",
    "test_cursor_is_bound_to_its_query",
    "test_default_order_is_creation_order",
    "test_dot_paths_never_index_arrays",
    "test_filter_semantics",
    "test_odd_metadata_field_names",
    "test_page_size_and_last_page",
    "test_paging_across_inserts_and_deletes",
    "test_paging_matches_one_page",
    "test_typed_sort_order",
    "test_undeclared_filters_fail",
    "test_undeclared_order_by_fails",
    "test_updated_sort_key_may_move",
]

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
ALL_LABELS = {k or "<nokey>" for k, _ in DATASET}

EXPECTED: list[tuple[dict[str, Any], set[str]]] = [
    ({"n": {"$gte": 1}}, {"int", "float", "big"}),  # numbers numeric: not "5", not true
    ({"n": 5}, {"int"}),
    ({"n": 5.0}, {"int"}),
    ({"n": True}, {"bool"}),
    ({"flag": 0}, {"zero"}),  # false is not 0
    ({"flag": False}, {"float"}),
    ({"n": None}, {"null", "none"}),  # null or missing
    ({"n": {"$ne": 5}}, ALL_LABELS - {"int"}),  # missing matches $ne
    ({"n": {"$exists": False}}, {"none"}),
    ({"n": {"$in": [5, "a", None, True]}}, {"int", "null", "none", "bool"}),  # mixed types
    ({"n": {"$nin": [5, None, "5"]}}, ALL_LABELS - {"int", "null", "none", "str5"}),
    ({"n": {"$lt": "6"}}, {"str5"}),  # strings as strings
    ({"n": -1000}, {"<nokey>", "negf"}),
    ({"n": {"$gt": -1000, "$lt": 3}}, {"float", "zero"}),
    ({"n": {"$gt": 10**14}}, {"big"}),
    ({"nested.x": 1}, {"int"}),  # nested metadata paths
    ({"nested.x": "1"}, {"null"}),
    ({"nested.x.y": 2}, {"zero"}),
    ({"nested.x": {"$exists": True}}, {"int", "null", "zero"}),
    ({"nested.x.y": {"$ne": 2}}, ALL_LABELS - {"zero"}),
    ({"tags": "a"}, set()),  # no array-element matching
    ({"$or": [{"n": 5}, {"s": "a"}]}, {"int", "float"}),
    (
        {"$and": [{"$or": [{"n": {"$gt": 1}}, {"s": "c"}]}, {"nested": {"$exists": False}}]},
        {"float", "str5", "big"},
    ),  # fmt: skip
    ({"n": {"$gt": 0}, "s": "b"}, {"int"}),
    ({"s": {"$gte": "a"}}, {"int", "float", "str5", "<nokey>"}),  # code points: "Z" < "a" < "é"
    ({"s": ""}, {"negf"}),
    ({"n": {"$in": []}}, set()),
    ({"n": {"$nin": []}}, ALL_LABELS),
    ({"flag": {"$in": [True, 0]}}, {"int", "zero"}),
    ({"s": "x' OR 1=1 --"}, set()),
    ({"key": {"$exists": False}}, {"<nokey>"}),
    ({"key": {"$in": ["int", "float", "nope"]}}, {"int", "float"}),
    ({"key": {"$gt": "s"}}, {"str5", "zero"}),
]


def _load(h: Harness) -> None:
    h.write_keys(DATASET)


def _oracle(flt: dict[str, Any]) -> list[str]:
    node = parse_filter(flt)
    views = [{"id": "?", "key": k, "metadata": m} for k, m in DATASET]
    return [v["key"] or "<nokey>" for v in views if matches(node, v)]


def test_filter_semantics(conformance: Harness) -> None:
    # MEM-PY-5: numbers numeric, strings as strings, missing fields, $in with mixed types,
    # nested paths; each declared case agrees with the expectation and with the oracle
    _load(conformance)
    wrong: list[str] = []
    for flt, expected in EXPECTED:
        if not conformance.supports_filter(flt):
            continue
        got = conformance.labels(flt)
        if set(got) != expected or len(got) != len(set(got)):
            wrong.append(f"{flt}: got {sorted(got)}, want {sorted(expected)}")
        elif "key" not in flt and got != _oracle(flt):
            wrong.append(f"{flt}: order {got} is not creation order")
    assert not wrong, "\n".join(wrong)


def test_undeclared_filters_fail(conformance: Harness) -> None:
    # MEM-QUERY-3: an unsupported filter fails explicitly in QUERY and SEARCH
    samples = {
        "$eq": {"n": {"$eq": 1}}, "$ne": {"n": {"$ne": 1}}, "$gt": {"n": {"$gt": 1}},
        "$gte": {"n": {"$gte": 1}}, "$lt": {"n": {"$lt": 1}}, "$lte": {"n": {"$lte": 1}},
        "$in": {"n": {"$in": [1]}}, "$nin": {"n": {"$nin": [1]}},
        "$exists": {"n": {"$exists": True}}, "$and": {"$and": [{"n": {"$exists": True}}]},
        "$or": {"$or": [{"n": {"$exists": True}}]},
    }  # fmt: skip
    bad: list[Any] = [
        samples[op] for op in ALL_FILTER_OPERATORS - conformance.caps.filter_operators
    ]
    bad += [{"n": {"$regex": "x"}}, {"n": {"a": 1}}, {"$nor": [{"n": 1}]}, {"": 1}, {"n": [1]}]
    bad += [{"a..b": 1}, {"n": {"$in": [[1]]}}, {"n": {"$gt": None}}, {"n": {"$exists": 1}}]
    for name in RESERVED_FIELDS - conformance.caps.filter_fields:
        bad.append({name: {"$exists": True}})
    if METADATA_FIELDS not in conformance.caps.filter_fields:
        bad.append({"topic": {"$exists": True}})
    caps = conformance.caps
    for name in sorted(caps.filter_fields - caps.string_range_fields):
        # a string bound on a field that only ranges over numbers
        field = "topic" if name == METADATA_FIELDS else name
        bad += [{field: {op: "m"}} for op in ("$gt", "$lte") if op in caps.filter_operators]
    for flt in bad:
        assert conformance.code("MEMORY.QUERY", {"filter": flt}) == "UNSUPPORTED_FILTER", flt
        if conformance.caps.keyword_strategy is not None:
            search = {"query": "x", "strategy": conformance.caps.keyword_strategy, "filter": flt}
            assert conformance.code("MEMORY.SEARCH", search) == "UNSUPPORTED_FILTER", flt


N_ASC = ["null", "none", "<nokey>", "negf", "zero", "float", "int", "big", "str5", "obj", "arr",
         "bool"]  # fmt: skip


def test_typed_sort_order(conformance: Harness) -> None:
    # missing/null < numbers < strings < objects < arrays < booleans; sequence breaks ties
    conformance.require_order_by(METADATA_FIELDS)
    _load(conformance)
    assert conformance.labels(None, [{"field": "n"}]) == N_ASC
    desc = conformance.labels(None, [{"field": "n", "direction": "desc"}])
    assert desc == ["bool", "arr", "obj", "str5", "big", "int", "float", "zero", "<nokey>",
                    "negf", "null", "none"]  # fmt: skip


ORDERS: list[list[dict[str, str]] | None] = [
    None,
    [{"field": "n"}],
    [{"field": "n", "direction": "desc"}],
    [{"field": "s"}, {"field": "n", "direction": "desc"}],
    [{"field": "flag", "direction": "desc"}, {"field": "key"}],
    [{"field": "nested.x"}, {"field": "id", "direction": "desc"}],
    [{"field": "createdAt", "direction": "desc"}],
    [{"field": "updatedAt"}, {"field": "key", "direction": "desc"}],
    [{"field": "key"}],
    [{"field": "key", "direction": "desc"}],
]


def _declared(h: Harness, order_by: list[dict[str, str]] | None) -> bool:
    fields = {
        t["field"] if t["field"] in RESERVED_FIELDS else METADATA_FIELDS for t in order_by or ()
    }
    return fields <= h.caps.order_by_fields


def test_paging_matches_one_page(conformance: Harness) -> None:
    # MEM-QUERY-2/4: every page size gives the one-page order, no repeat, no skip
    _load(conformance)
    for order_by in ORDERS:
        if not _declared(conformance, order_by):
            continue
        whole = conformance.labels(None, order_by)
        assert sorted(whole) == sorted(ALL_LABELS), order_by
        for limit in (1, 2, 5):
            assert conformance.labels(None, order_by, limit=limit) == whole, (order_by, limit)
        flt = {"n": {"$exists": True}}
        if conformance.supports_filter(flt):
            filtered = conformance.labels(flt, order_by)
            assert conformance.labels(flt, order_by, limit=3) == filtered, (order_by, flt)


def test_default_order_is_creation_order(conformance: Harness) -> None:
    # MEM-PY-6: createdAt ascending, input order within a batch
    for batch in (["b", "a", "c"], ["z"], ["y", "x"]):
        conformance.write_keys((k, {}) for k in batch)
    expected = ["b", "a", "c", "z", "y", "x"]
    assert conformance.labels() == expected
    assert conformance.labels(limit=4) == expected
    if _declared(conformance, [{"field": "createdAt"}]):
        assert conformance.labels(None, [{"field": "createdAt"}]) == expected
    if conformance.supports_filter({"createdAt": {"$gt": ""}}):
        old = "2000-01-01T00:00:00.000000Z"
        assert conformance.labels({"createdAt": {"$gt": old}}, limit=2) == expected
        assert conformance.labels({"createdAt": {"$lt": old}}) == []


def test_page_size_and_last_page(conformance: Harness) -> None:
    # MEM-QUERY-2: never more than limit; the last page omits nextCursor
    _load(conformance)
    page = conformance.page(limit=len(DATASET))
    assert len(page.items) == len(DATASET) and page.next_cursor is None
    page = conformance.page(limit=len(DATASET) - 1)
    assert len(page.items) == len(DATASET) - 1 and page.next_cursor is not None
    last = conformance.page(limit=len(DATASET) - 1, cursor=page.next_cursor)
    assert len(last.items) == 1 and last.next_cursor is None


def test_paging_across_inserts_and_deletes(conformance: Harness) -> None:
    # MEM-QUERY-4, MEM-PY-6: records present throughout are seen exactly once
    for order_by in (None, [{"field": "n", "direction": "desc"}]):
        if not _declared(conformance, order_by):
            continue
        tag = "asc" if order_by is None else "desc"
        items = conformance.write([
            {"key": f"{tag}{i}", "content": i, "metadata": {"n": i % 4, "t": tag}}
            for i in range(12)
        ])  # fmt: skip
        ids = {item.key: item.id for item in items}
        seen: list[str] = []
        deleted: set[str] = set()
        cursor = None
        for step in range(100):
            page = conformance.page({"t": tag}, order_by, 3, cursor)
            seen += [item.key for item in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
            victims = [k for k in (seen[-1], f"{tag}{11 - step}") if k not in deleted]
            conformance.ok("MEMORY.DELETE", {"ids": [ids[k] for k in victims]})
            deleted.update(victims)
            new = {"key": f"{tag}new{step}", "content": 0, "metadata": {"n": step % 4, "t": tag}}
            conformance.write([new])
        assert len(seen) == len(set(seen)), f"repeated: {seen}"
        survivors = {f"{tag}{i}" for i in range(12)} - deleted
        assert survivors <= set(seen), f"skipped: {survivors - set(seen)}"


def test_updated_sort_key_may_move(conformance: Harness) -> None:
    # documented: a record whose sort key changes between pages may move; no error
    conformance.require_order_by(METADATA_FIELDS)
    items = conformance.write(
        [{"key": f"r{i}", "content": i, "metadata": {"n": i}} for i in range(4)]
    )
    order = [{"field": "n"}]
    page = conformance.page(None, order, 2)
    conformance.ok("MEMORY.UPDATE", {"memories": [{"id": items[0].id, "metadata": {"n": 9}}]})
    rest = conformance.page(None, order, 10, page.next_cursor)
    assert [i.key for i in rest.items] == ["r2", "r3", "r0"]


def test_cursor_is_bound_to_its_query(conformance: Harness) -> None:
    # MEM-PY-5: INVALID_CURSOR for a cursor made for another query, or malformed
    _load(conformance)
    flt = (
        {"n": {"$exists": True}} if conformance.supports_filter({"n": {"$exists": True}}) else None
    )
    page = conformance.page(flt, None, 2)
    assert page.next_cursor
    other_filter = {"s": {"$exists": True}} if flt is not None else {"n": {"$exists": True}}
    others: list[dict[str, Any]] = [
        {"filter": other_filter, "limit": 2, "cursor": page.next_cursor},
        {"limit": 2, "cursor": "garbage"},
        {"limit": 2, "cursor": page.next_cursor[:-3]},
        {"limit": 2, "cursor": "eyJ2IjoxfQ"},
    ]
    if flt is not None:
        others.append({"limit": 2, "cursor": page.next_cursor})
        if _declared(conformance, [{"field": "n"}]):
            order = [{"field": "n"}]
            others.append({"filter": flt, "orderBy": order, "limit": 2, "cursor": page.next_cursor})
    for query in others:
        if "filter" in query and not conformance.supports_filter(query["filter"]):
            continue
        assert conformance.code("MEMORY.QUERY", query) == "INVALID_CURSOR", query


def test_undeclared_order_by_fails(conformance: Harness) -> None:
    # MEM-QUERY-3: an unsupported orderBy fails explicitly
    bad = ["$n", "a..b", ".a"]
    bad += sorted(RESERVED_FIELDS - conformance.caps.order_by_fields)
    if METADATA_FIELDS not in conformance.caps.order_by_fields:
        bad += ["topic", "a.b"]
    for field in bad:
        query = {"orderBy": [{"field": field}], "limit": 1}
        assert conformance.code("MEMORY.QUERY", query) == "UNSUPPORTED_ORDER_BY", field


ODD_FIELDS = ['a"b', "it's", "100%", "_", "a_b", "a-b", "with space", "ключ", "键", "back\\slash",
              "tab\there", "[0]", "$", "a$"]  # fmt: skip

QUERY_FIELDS: tuple[str, ...] = (
    *("n", "s", "i", "flag", "nested", "nested.x", "nested.x.y", "tag", "tags", "kind"),
    *("topic", "g", "k", "o", "a", "tenant", "a.0", "a.1", "a.-1"),
    *(name for name in ODD_FIELDS if not name.startswith("$")),
    *(f"nest.{name}" for name in ODD_FIELDS if not name.startswith("$")),
)
"""Every metadata field the suite's QUERY and cursor tests filter and sort on: a store
with declared query fields (``queryFields``, issue 28) runs those tests with these
declared, so the compiled expressions of declared fields meet the same cases."""


def test_odd_metadata_field_names(conformance: Harness) -> None:
    # MEM-PY-5: field paths are bound/escaped safely; values never formatted into SQL
    if METADATA_FIELDS not in conformance.caps.filter_fields:
        return
    for odd in ODD_FIELDS:
        if odd.startswith("$"):
            continue
        conformance.write_keys(
            [
                (f"{odd}:hit", {odd: 1, "nest": {odd: "v"}, "g": odd}),
                (f"{odd}:miss", {odd: 2, "o": 1, "g": odd}),
                (f"{odd}:plain", {"a": 1, "o": 1, "g": odd}),
            ]  # fmt: skip
        )
        scope = {"g": odd}
        assert conformance.labels({**scope, odd: 1}) == [f"{odd}:hit"], odd
        assert conformance.labels({**scope, odd: {"$exists": False}}) == [f"{odd}:plain"], odd
        assert conformance.labels({**scope, f"nest.{odd}": "v"}) == [f"{odd}:hit"], odd
        assert conformance.labels({**scope, odd: {"$ne": 1}}) == [f"{odd}:miss", f"{odd}:plain"]
        if METADATA_FIELDS in conformance.caps.order_by_fields:
            desc = [{"field": odd, "direction": "desc"}]
            want = [f"{odd}:miss", f"{odd}:hit", f"{odd}:plain"]
            assert conformance.labels(scope, desc) == want, odd


ARRAY_PATHS: list[Any] = [
    {"a.0": 5},
    {"a.1": "x"},
    {"a.-1": "x"},
    {"a.0": {"$gte": 1}},
    {"a.1": {"$gt": "a"}},
    {"a.0": {"$exists": True}},
    {"a.0": None},
    {"a.0": {"$ne": 5}},
    {"a.0": {"$in": [5, "x"]}},
]


def test_dot_paths_never_index_arrays(conformance: Harness) -> None:
    # MEM-PY-5: a dot path names object members only; "a.0" is not an array's element
    if METADATA_FIELDS not in conformance.caps.filter_fields:
        return
    records = [("arr", {"a": [5, "x"], "g": "ap"}), ("none", {"g": "ap"}),
               ("obj", {"a": {"0": 5, "1": "x"}, "g": "ap"})]  # fmt: skip
    conformance.write_keys(records)
    for flt in ARRAY_PATHS:
        scoped = {"$and": [{"g": "ap"}, flt]}
        if conformance.supports_filter(scoped):
            node = parse_filter(scoped)
            want = [k for k, m in records if matches(node, {"id": "?", "key": k, "metadata": m})]
            assert want != ["arr", "none", "obj"] and conformance.labels(scoped) == want, flt
    if METADATA_FIELDS in conformance.caps.order_by_fields:
        for direction in ("asc", "desc"):
            order = [{"field": "a.0", "direction": direction}]
            want = ["arr", "none", "obj"] if direction == "asc" else ["obj", "arr", "none"]
            assert conformance.labels({"g": "ap"}, order) == want, direction
