"""The shared filter language: parsing, the pure evaluator, sort keys, cursors (MEM-PY-5)."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import pytest

from ditto_worker.contracts import OrderBy
from ditto_worker.errors import MemoryError
from ditto_worker.memory import filters
from ditto_worker.memory.filters import (
    MISSING,
    And,
    Compare,
    Exists,
    FieldRef,
    In,
    Or,
    compare_rows,
    field_value,
    matches,
    parse_filter,
    parse_order_by,
    sort_key,
    timestamp_now,
)


def record(metadata: dict[str, Any] | None, key: str | None = None) -> dict[str, Any]:
    return {
        "id": "id-1",
        "key": key,
        "createdAt": "2026-01-01T00:00:00.000000Z",
        "updatedAt": "2026-01-02T00:00:00.000000Z",
        "metadata": metadata,
    }


def check(flt: dict[str, Any], metadata: dict[str, Any] | None, key: str | None = None) -> bool:
    return matches(parse_filter(flt), record(metadata, key))


# --- parsing (MEM-PY-5) -----------------------------------------------------------------


def test_parse_shapes() -> None:
    n = FieldRef("n", ("n",))
    assert parse_filter(None) is None
    assert parse_filter({"n": 1}) == Compare(n, "$eq", 1)
    assert parse_filter({"n": {"$gt": 1, "$lt": 5}}) == And(
        (Compare(n, "$gt", 1), Compare(n, "$lt", 5))
    )
    assert parse_filter({"$or": [{"n": 1}, {"n": {"$exists": False}}]}) == Or(
        (Compare(n, "$eq", 1), Exists(n, False))
    )
    assert parse_filter({"n": {"$nin": [1, None]}}) == In(n, (1, None), negate=True)
    assert parse_filter({"a.b": 1}) == Compare(FieldRef("a.b", ("a", "b")), "$eq", 1)
    assert parse_filter({"createdAt": {"$gte": "2026-01-01T05:00:00+05:00"}}) == Compare(
        FieldRef("createdAt", ()), "$gte", "2026-01-01T00:00:00.000000Z"
    )
    assert parse_filter({}) == And(())


@pytest.mark.parametrize(
    ("flt", "mentions"),
    [
        ({"n": {"$regex": "x"}}, "$regex"),
        ({"n": {"$in": 5}}, "$in"),
        ({"n": {"$nin": "ab"}}, "$nin"),
        ({"n": {"$exists": 1}}, "$exists"),
        ({"$and": []}, "$and"),
        ({"$or": [1]}, "$or"),
        ({"$and": {"n": 1}}, "$and"),
        ({"$nor": [{"n": 1}]}, "$nor"),
        ({"$where": "1"}, "$where"),
        ({"": 1}, "''"),
        ({"a..b": 1}, "a..b"),
        ({"a.$b": 1}, "a.$b"),
        ({"n": {"a": 1}}, "n"),  # object equality is not supported (documented)
        ({"n": {}}, "n"),
        ({"n": [1, 2]}, "n"),  # array equality is not supported (documented)
        ({"n": {"$in": [[1]]}}, "n"),
        ({"n": {"$eq": {"a": 1}}}, "n"),
        ({"n": {"$gt": None}}, "$gt"),
        ({"n": {"$lte": True}}, "$lte"),
        ({"n": {"$gte": [1]}}, "$gte"),
        ({"n": {"$eq": float("nan")}}, "n"),
        ({"n": {"$gt": float("inf")}}, "n"),
        ({"n": {"$gt": 1, "x": 2}}, "n"),
    ],
)
def test_unsupported_filters_name_the_culprit(flt: dict[str, Any], mentions: str) -> None:
    # MEM-PY-5, MEM-QUERY-3: fails explicitly, never silently ignored
    with pytest.raises(MemoryError) as info:
        parse_filter(flt)
    assert info.value.code == "UNSUPPORTED_FILTER"
    assert mentions in info.value.safe_message


def test_filter_must_be_an_object() -> None:
    with pytest.raises(MemoryError, match="object"):
        parse_filter([{"n": 1}])  # type: ignore[arg-type]


def test_parse_order_by() -> None:
    terms = parse_order_by([OrderBy(field="a.b", direction="desc"), {"field": "key"}])
    assert [(t.field.name, t.field.path, t.descending) for t in terms] == [
        ("a.b", ("a", "b"), True),
        ("key", (), False),
    ]
    assert parse_order_by(None) == ()
    for bad in ([{"field": "$x"}], [{"field": ""}], [{"field": "a"}, {"field": "b..c"}]):
        with pytest.raises(MemoryError) as info:
            parse_order_by(bad)
        assert info.value.code == "UNSUPPORTED_ORDER_BY"
    with pytest.raises(MemoryError) as info:
        parse_order_by([{"field": "a", "direction": "up"}])
    assert info.value.code == "UNSUPPORTED_ORDER_BY"


# --- typed semantics (MEM-PY-5) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("flt", "metadata", "expected"),
    [
        # numbers compare as numbers, ints and floats alike
        ({"n": {"$gte": 1}}, {"n": 5}, True),
        ({"n": {"$gte": 1}}, {"n": 1.0}, True),
        ({"n": 2}, {"n": 2.0}, True),
        ({"n": {"$lt": 2.5}}, {"n": 2}, True),
        # never across types
        ({"n": {"$gte": 1}}, {"n": "5"}, False),
        ({"n": {"$lt": "6"}}, {"n": 5}, False),
        ({"n": {"$lt": "6"}}, {"n": "5"}, True),
        ({"n": 1}, {"n": True}, False),
        ({"n": True}, {"n": 1}, False),
        ({"n": 0}, {"n": False}, False),
        ({"n": {"$gte": 0}}, {"n": False}, False),
        ({"n": "1"}, {"n": 1}, False),
        ({"n": {"$gt": 0}}, {"n": [1]}, False),
        ({"n": 1}, {"n": [1]}, False),  # no array-element matching (documented)
        ({"n": {"$ne": 1}}, {"n": [1]}, True),
        # strings compare by code point
        ({"s": {"$gt": "Z"}}, {"s": "a"}, True),
        ({"s": {"$gt": "z"}}, {"s": "é"}, True),
        # null
        ({"n": None}, {"n": None}, True),
        ({"n": {"$ne": None}}, {"n": None}, False),
        ({"n": {"$ne": None}}, {"n": 0}, True),
        ({"n": {"$gt": 0}}, {"n": None}, False),
        # booleans
        ({"b": True}, {"b": True}, True),
        ({"b": {"$ne": True}}, {"b": False}, True),
        ({"b": {"$in": [False]}}, {"b": 0}, False),
    ],
)
def test_typed_comparisons(flt: dict[str, Any], metadata: dict[str, Any], expected: bool) -> None:
    assert check(flt, metadata) is expected


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"n": 1}, False),
        ({"n": {"$gt": 1}}, False),
        ({"n": {"$lt": 1}}, False),
        ({"n": {"$in": [1, 2]}}, False),
        ({"n": {"$ne": 1}}, True),
        ({"n": {"$nin": [1, 2]}}, True),
        ({"n": None}, True),
        ({"n": {"$in": [1, None]}}, True),
        ({"n": {"$nin": [None]}}, False),
        ({"n": {"$ne": None}}, False),
        ({"n": {"$exists": False}}, True),
        ({"n": {"$exists": True}}, False),
    ],
)
def test_missing_field_matches_only_ne_nin_null_and_not_exists(
    flt: dict[str, Any], expected: bool
) -> None:
    # MEM-PY-5: MongoDB semantics for a missing field
    assert check(flt, {"other": 1}) is expected
    assert check(flt, None) is expected


def test_in_with_mixed_types() -> None:
    flt = {"n": {"$in": [5, "a", None, True]}}
    assert [check(flt, {"n": v}) for v in (5, 5.0, "5", "a", None, True, 1, False)] == [
        True,
        True,
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    assert check({"n": {"$in": []}}, {"n": 1}) is False
    assert check({"n": {"$nin": []}}, {"n": 1}) is True


def test_nested_paths_and_reserved_fields() -> None:
    meta = {"a": {"b": {"c": 3}, "s": "x"}, "flat": 1, "id": "meta-id"}
    assert check({"a.b.c": 3}, meta)
    assert check({"a.s": "x", "flat": 1}, meta)
    assert not check({"a.b.c.d": {"$exists": True}}, meta)
    assert check({"flat.x": {"$exists": False}}, meta)  # through a scalar: missing
    assert check({"id": "id-1"}, meta)  # reserved field wins over metadata.id
    assert check({"key": None}, meta)  # no key = missing key
    assert check({"key": "k"}, meta, key="k")
    assert check({"createdAt": {"$lt": "2026-01-01T00:00:00.000001Z"}}, meta)
    assert check({"updatedAt": {"$gt": "2026-01-01T23:59:59.999999Z"}}, meta)
    assert field_value(FieldRef("a.x", ("a", "x")), record(meta)) is MISSING


def test_logical_operators() -> None:
    assert check({"$or": [{"n": 1}, {"m": 2}]}, {"m": 2})
    assert not check({"$and": [{"n": 1}, {"m": 2}]}, {"m": 2})
    assert check({"$and": [{"$or": [{"n": 1}, {"n": 2}]}, {"m": {"$exists": False}}]}, {"n": 2})
    assert check({}, None)


# --- sort order -------------------------------------------------------------------------


def test_cross_type_sort_order() -> None:
    values = [True, [1], {"a": 1}, "b", "a", 2.5, -1, None, MISSING, False, 10]
    ordered = sorted(values, key=sort_key)
    assert ordered == [None, MISSING, -1, 2.5, 10, "a", "b", {"a": 1}, [1], False, True]


def test_compare_rows_directions_and_tie_breaker() -> None:
    terms = parse_order_by([{"field": "a", "direction": "desc"}, {"field": "b"}])
    rows = [
        ((sort_key(1), sort_key("x")), 3),
        ((sort_key(2), sort_key("y")), 2),
        ((sort_key(1), sort_key("x")), 1),
        ((sort_key(1), sort_key("w")), 4),
    ]
    compare = functools.partial(compare_rows, terms=terms)
    ordered = sorted(rows, key=functools.cmp_to_key(compare))
    assert [seq for _, seq in ordered] == [2, 4, 1, 3]


def test_timestamps_are_fixed_width_utc_and_monotonic() -> None:
    now = timestamp_now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", now)
    future = "2999-01-01T00:00:00.000000Z"
    assert timestamp_now(future) == future
    assert timestamp_now("2000-01-01T00:00:00.000000Z") >= now


def test_all_is_accurate() -> None:
    defined = {
        name
        for name, value in vars(filters).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == filters.__name__
    }
    assert defined <= set(filters.__all__)
    assert all(hasattr(filters, name) for name in filters.__all__)
