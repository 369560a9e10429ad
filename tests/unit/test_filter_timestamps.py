"""Timestamp operands compare as instants (issue 13 item 4; filters module docstring).

The stores keep ``createdAt``/``updatedAt`` as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` strings and
compare strings; the shared parser rewrites every RFC 3339 operand on these fields to that
form, for every operator, before any store sees it. The conformance suite checks the same
on each store (``test_timestamps_compare_as_instants``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ditto_worker.errors import MemoryError
from ditto_worker.memory.filters import (
    Compare,
    FieldRef,
    In,
    matches,
    normalize_timestamp,
    parse_filter,
)

CREATED = FieldRef("createdAt", ())


@pytest.mark.parametrize(
    ("text", "op", "stored"),
    [
        ("2026-05-01T17:00:00+05:00", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01T05:00:00-07:00", "$lt", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01T12:00:00Z", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01T12:00:00+00:00", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01T12:00:00-00:00", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01t12:00:00z", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01 12:00:00Z", "$eq", "2026-05-01T12:00:00.000000Z"),
        ("2026-05-01T17:30:00.25+05:30", "$eq", "2026-05-01T12:00:00.250000Z"),
        ("2026-05-01T00:00:00.5-12:00", "$eq", "2026-05-01T12:00:00.500000Z"),
        ("2026-01-01T03:00:00+05:00", "$eq", "2025-12-31T22:00:00.000000Z"),  # day and year
        ("2026-12-31T23:59:60Z", "$eq", "2027-01-01T00:00:00.000000Z"),  # leap second
        ("2026-05-01T12:00:00.1234560Z", "$eq", "2026-05-01T12:00:00.123456Z"),  # zero digit
        # digits past the microsecond round the bound the way that keeps its meaning
        ("2026-05-01T12:00:00.123456789Z", "$gte", "2026-05-01T12:00:00.123457Z"),
        ("2026-05-01T12:00:00.123456789Z", "$lt", "2026-05-01T12:00:00.123457Z"),
        ("2026-05-01T12:00:00.123456789Z", "$gt", "2026-05-01T12:00:00.123456Z"),
        ("2026-05-01T12:00:00.123456789Z", "$lte", "2026-05-01T12:00:00.123456Z"),
        ("2026-05-01T12:00:00.999999999Z", "$gte", "2026-05-01T12:00:01.000000Z"),
        ("2026-05-01T12:00:00.123456789Z", "$eq", "2026-05-01T12:00:00.123456789Z"),
    ],
)
def test_rfc3339_becomes_the_stored_form(text: str, op: str, stored: str) -> None:
    assert normalize_timestamp(text, op) == stored


@pytest.mark.parametrize(
    "text",
    [
        "yesterday", "", "2026-05-01", "2026-05-01T12:00:00", "2026-05-01T12:00Z",
        "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-05-01T24:00:00Z",
        "2026-05-01T12:00:61Z", "2026-05-01T12:00:00+24:00", "2026-05-01T12:00:00+05:60",
        "2026-05-01T12:00:00+0500", "2026-05-01T12:00:00.Z", "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:00:00-05:00", "２０２６-05-01T12:00:00Z", " 2026-05-01T12:00:00Z",
        "2026-05-01T12:00:00Z ", "1777636800",
        "2026-05-01T12:00:00.1234567890123456789012345678901Z",
    ],
)  # fmt: skip
def test_anything_else_is_invalid_input_naming_the_field(text: str) -> None:
    with pytest.raises(MemoryError) as caught:
        parse_filter({"createdAt": {"$gte": text}})
    assert caught.value.code == "INVALID_INPUT"
    assert "filter.createdAt.$gte" in caught.value.safe_message
    assert text not in caught.value.safe_message or not text


@pytest.mark.parametrize("op", ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"])
@pytest.mark.parametrize("field", ["createdAt", "updatedAt"])
def test_every_operator_on_both_fields(op: str, field: str) -> None:
    given_text, stored = "2026-05-01T17:00:00+05:00", "2026-05-01T12:00:00.000000Z"
    operand = [given_text, None] if op in ("$in", "$nin") else given_text
    node = parse_filter({field: {op: operand}})
    ref = FieldRef(field, ())
    if op in ("$in", "$nin"):
        assert node == In(ref, (stored, None), negate=op == "$nin")
    else:
        assert node == Compare(ref, op, stored)  # type: ignore[arg-type]
    with pytest.raises(MemoryError) as caught:
        parse_filter({field: {op: [1] if op in ("$in", "$nin") else 1}})  # not a timestamp
    assert caught.value.code == "INVALID_INPUT" and f"filter.{field}.{op}" in str(caught.value)


def test_shorthand_nested_logic_and_metadata_fields() -> None:
    assert parse_filter({"createdAt": "2026-05-01T12:00:00Z"}) == Compare(
        CREATED, "$eq", "2026-05-01T12:00:00.000000Z"
    )
    node = parse_filter({"$or": [{"$and": [{"updatedAt": {"$lt": "2026-05-01T12:00:00Z"}}]}]})
    assert "2026-05-01T12:00:00.000000Z" in repr(node)
    with pytest.raises(MemoryError):
        parse_filter({"$or": [{"createdAt": {"$in": ["2026-05-01T12:00:00Z", "nope"]}}]})
    # metadata keys are not timestamps: a nested "createdAt" and other names stay strings
    assert parse_filter({"meta.createdAt": "today"}) == Compare(
        FieldRef("meta.createdAt", ("meta", "createdAt")), "$eq", "today"
    )
    assert parse_filter({"createdAt": None}) == Compare(CREATED, "$eq", None)


OFFSETS = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timedelta(minutes=m))
MOMENTS = st.datetimes(datetime(1971, 1, 1), datetime(2200, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC)
)


def _rfc3339(moment: datetime, offset: timedelta, digits: int) -> str:
    local = moment.astimezone(timezone(offset))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{local.microsecond:06d}".ljust(digits, "0")[:digits]
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@given(a=MOMENTS, b=MOMENTS, offset=OFFSETS, digits=st.sampled_from([6, 7, 9]))
def test_string_order_of_normalized_bounds_is_instant_order(
    a: datetime, b: datetime, offset: timedelta, digits: int
) -> None:
    stored = a.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    record = {"createdAt": stored}
    bound = _rfc3339(b, offset, digits)
    for op, holds in [("$gte", a >= b), ("$gt", a > b), ("$lt", a < b), ("$lte", a <= b),
                      ("$eq", a == b), ("$ne", a != b)]:  # fmt: skip
        assert matches(parse_filter({"createdAt": {op: bound}}), record) == holds, (op, bound)
