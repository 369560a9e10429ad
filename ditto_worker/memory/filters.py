"""The shared filter language of ditto_worker's plugins (SPEC.md MEM-PY-5), backend-neutral.

Parsing turns a QUERY/SEARCH ``filter`` object into a small typed AST and ``orderBy`` into
sort terms; :func:`matches` and :func:`sort_key` evaluate them in pure Python (the reference
in-memory store and the test oracle); a SQL backend compiles the same AST itself.

Fields:
    A bare name (``topic``) is a top-level metadata key; dots reach nested metadata objects
    (``a.b``; a dot path never indexes into arrays). ``id``, ``key``, ``createdAt`` and
    ``updatedAt`` are reserved record fields (a metadata key with one of these names cannot
    be filtered; a dotted name such as ``key.x`` is always a metadata path). A record
    without a key has a *missing* ``key``. A top-level metadata key containing a dot
    cannot be addressed.

Operators and semantics (MongoDB's):
    ``$eq $ne $gt $gte $lt $lte $in $nin $exists $and $or``; ``{"f": v}`` means
    ``{"f": {"$eq": v}}``; several fields (or operators) in one object are AND-ed.
    A missing field matches only ``$ne``, ``$nin``, ``$eq: null`` (also ``$in`` with a
    ``null`` element) and ``$exists: false``. ``$ne``/``$nin`` are the exact negations of
    ``$eq``/``$in``. Comparisons never match across types: the string ``"5"`` is not
    ``>= 1``; booleans are not numbers; ints and floats compare as numbers.
    Operands are JSON scalars only: ``$eq``/``$ne``/``$in``/``$nin`` take ``null``,
    booleans, finite numbers and strings; ``$gt``/``$gte``/``$lt``/``$lte`` take finite
    numbers and strings. Equality against an object or an array value is *not* supported
    (``UNSUPPORTED_FILTER``; reach into objects with dot paths). A stored object or array
    never equals a scalar operand, so it matches ``$ne``/``$nin``/``$exists: true`` only.

Sort order (cross-type, MongoDB-like), ascending:
    missing = ``null`` < numbers < strings (by code point) < objects < arrays < ``false`` <
    ``true``. Objects are not ordered among themselves, nor are arrays: ties (and every
    other tie) are broken by the store's sequence number, ascending, in both directions.

Timestamps (``createdAt``/``updatedAt``):
    Stored as UTC strings with fixed microsecond precision, e.g.
    ``2026-11-29T19:26:50.123456Z`` (:func:`timestamp_now`), which compare as instants
    when compared as strings. A filter operand on these two fields (every operator,
    ``$in``/``$nin`` elements included) is any RFC 3339 date-time — ``Z``, ``+00:00`` or
    any offset (``2026-11-30T00:56:50+05:30``), with or without fractional seconds (any
    number of digits; ``T``, ``t`` or a space between date and time) — and the parser
    rewrites it to that stored form of the same instant, so every store compares
    instants. Digits past the microsecond round the bound the right way (``$gte``/``$lt``
    up, ``$gt``/``$lte`` down; such an ``$eq`` matches nothing). A string that is not an
    RFC 3339 date-time (a date alone, no offset, month 13 …), a number or a boolean there
    is ``INVALID_INPUT`` naming the field, raised here before any I/O; ``null`` keeps its
    meaning (a missing field, which these fields never are).

Cursors:
    Signed, opaque url-safe strings carrying a version, a fingerprint of (filter, orderBy)
    and the last row's typed sort values and sequence number; made and checked with the
    store's own secret by :mod:`ditto_worker.memory.cursors` (re-exported here).

Errors (all :class:`~ditto_worker.errors.MemoryError`): ``UNSUPPORTED_FILTER``,
``UNSUPPORTED_ORDER_BY``, ``INVALID_CURSOR``, ``INVALID_INPUT`` (a timestamp operand).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, Literal, TypeAlias

from ditto_worker.contracts import OrderBy
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.cursors import (
    Cursor,
    SortValue,
    decode_cursor,
    encode_cursor,
    query_fingerprint,
)

__all__ = [
    "MISSING",
    "RESERVED_FIELDS",
    "TIMESTAMP_FIELDS",
    "And",
    "Compare",
    "CompareOp",
    "Cursor",
    "Exists",
    "FieldRef",
    "FilterNode",
    "In",
    "Or",
    "Scalar",
    "SortTerm",
    "SortValue",
    "compare_rows",
    "decode_cursor",
    "encode_cursor",
    "field_value",
    "matches",
    "normalize_timestamp",
    "parse_field",
    "parse_filter",
    "parse_order_by",
    "query_fingerprint",
    "sort_key",
    "timestamp_now",
]

RESERVED_FIELDS: Final = frozenset({"id", "key", "createdAt", "updatedAt"})
"""Record fields addressable by filter and orderBy (everything else is metadata)."""

TIMESTAMP_FIELDS: Final = frozenset({"createdAt", "updatedAt"})
"""Reserved fields holding timestamps: their operands are RFC 3339 instants."""

Scalar: TypeAlias = None | bool | int | float | str
"""A JSON scalar operand."""

CompareOp = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
_RANGE_OPS: Final = ("$gt", "$gte", "$lt", "$lte")


class _Missing:
    """The value of a field a record does not have."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""Sentinel returned by :func:`field_value` for a missing field."""


@dataclass(frozen=True)
class FieldRef:
    """A filter/orderBy field: ``name`` as written; ``path`` its metadata path (``()`` for
    the reserved record fields)."""

    name: str
    path: tuple[str, ...]

    @property
    def reserved(self) -> bool:
        """True for ``id``, ``key``, ``createdAt``, ``updatedAt``."""
        return not self.path


@dataclass(frozen=True)
class Compare:
    """``field <op> value`` with typed (same-kind only) semantics."""

    field: FieldRef
    op: CompareOp
    value: Scalar


@dataclass(frozen=True)
class In:
    """``$in`` (``negate=False``) or ``$nin`` (``negate=True``) over scalar values."""

    field: FieldRef
    values: tuple[Scalar, ...]
    negate: bool = False


@dataclass(frozen=True)
class Exists:
    """``$exists``: True when the field is present (``null`` counts as present)."""

    field: FieldRef
    exists: bool


@dataclass(frozen=True)
class And:
    """All children match (an empty ``And`` matches everything)."""

    children: tuple[FilterNode, ...]


@dataclass(frozen=True)
class Or:
    """At least one child matches (never empty)."""

    children: tuple[FilterNode, ...]


FilterNode: TypeAlias = Compare | In | Exists | And | Or


@dataclass(frozen=True)
class SortTerm:
    """One orderBy term."""

    field: FieldRef
    descending: bool = False


# --- parsing ------------------------------------------------------------------------------


def _unsupported(message: str) -> MemoryError:
    return MemoryError(ErrorCode.UNSUPPORTED_FILTER, message)


def _show(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_field(name: object, code: str = ErrorCode.UNSUPPORTED_FILTER) -> FieldRef:
    """Parse a field name (MEM-PY-5).

    Raises:
        MemoryError: ``code`` when the name is not a string, is empty, or has an empty
            dot segment or one starting with ``$``.
    """
    if not isinstance(name, str) or not name:
        raise MemoryError(code, f"unsupported field name {_show(name)}")
    if name in RESERVED_FIELDS:
        return FieldRef(name, ())
    segments = tuple(name.split("."))
    if any(not segment or segment.startswith("$") for segment in segments):
        raise MemoryError(code, f"unsupported field name {_show(name)}")
    return FieldRef(name, segments)


def parse_filter(raw: Mapping[str, Any] | None) -> FilterNode | None:
    """Parse a ``filter`` object into an AST; ``None`` stays ``None`` (match all).

    Raises:
        MemoryError: ``UNSUPPORTED_FILTER`` naming the offending field or operator.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _unsupported("filter must be an object")
    return _parse_object(raw)


def _parse_object(obj: Mapping[str, Any]) -> FilterNode:
    children: list[FilterNode] = []
    for name, value in obj.items():
        if name in ("$and", "$or"):
            children.append(_parse_logical(name, value))
        elif isinstance(name, str) and name.startswith("$"):
            raise _unsupported(f"unsupported operator {_show(name)}")
        else:
            children.append(_parse_condition(parse_field(name), value))
    return children[0] if len(children) == 1 else And(tuple(children))


def _parse_logical(op: str, value: Any) -> FilterNode:
    if not isinstance(value, list) or not value:
        raise _unsupported(f"{op} needs a non-empty list of objects")
    if not all(isinstance(item, Mapping) for item in value):
        raise _unsupported(f"{op} needs a non-empty list of objects")
    children = tuple(_parse_object(item) for item in value)
    return And(children) if op == "$and" else Or(children)


def _parse_condition(field: FieldRef, value: Any) -> FilterNode:
    if (
        isinstance(value, Mapping)
        and value
        and all(isinstance(k, str) and k.startswith("$") for k in value)
    ):
        parts = [_parse_operator(field, op, operand) for op, operand in value.items()]
        return parts[0] if len(parts) == 1 else And(tuple(parts))
    return Compare(field, "$eq", _operand(field, "$eq", value))


def _parse_operator(field: FieldRef, op: str, operand: Any) -> FilterNode:
    if op in ("$eq", "$ne"):
        return Compare(field, op, _operand(field, op, operand))  # type: ignore[arg-type]
    if op in _RANGE_OPS:
        if isinstance(operand, bool) or not isinstance(operand, int | float | str):
            raise _unsupported(f"{op} on {_show(field.name)} needs a number or a string")
        return Compare(field, op, _operand(field, op, operand))  # type: ignore[arg-type]
    if op in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise _unsupported(f"{op} on {_show(field.name)} needs a list")
        values = tuple(_operand(field, op, item) for item in operand)
        return In(field, values, negate=op == "$nin")
    if op == "$exists":
        if not isinstance(operand, bool):
            raise _unsupported(f"$exists on {_show(field.name)} needs true or false")
        return Exists(field, operand)
    raise _unsupported(f"unsupported operator {_show(op)} on {_show(field.name)}")


def _operand(field: FieldRef, op: str, value: Any) -> Scalar:
    """A checked scalar operand; on a timestamp field, the instant in the stored form."""
    scalar = _scalar(field, op, value)
    if field.name not in TIMESTAMP_FIELDS or not field.reserved or scalar is None:
        return scalar
    if not isinstance(scalar, str):
        raise _bad_timestamp(field, op)
    return normalize_timestamp(scalar, op, f"filter.{field.name}.{op}")


def _scalar(field: FieldRef, op: str, value: Any) -> Scalar:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise _unsupported(
        f"{op} on {_show(field.name)}: operand must be null, a boolean, a finite number or "
        "a string (object and array values are not supported)"
    )


def parse_order_by(order_by: Sequence[OrderBy | Mapping[str, Any]] | None) -> tuple[SortTerm, ...]:
    """Parse ``orderBy``; ``None``/``[]`` gives ``()`` (the store's creation order).

    Raises:
        MemoryError: ``UNSUPPORTED_ORDER_BY`` for a bad field name or direction.
    """
    terms: list[SortTerm] = []
    for item in order_by or ():
        name: Any = item.field if isinstance(item, OrderBy) else item.get("field")
        direction: Any = (
            item.direction if isinstance(item, OrderBy) else item.get("direction", "asc")
        )
        if direction not in ("asc", "desc"):
            raise MemoryError(ErrorCode.UNSUPPORTED_ORDER_BY, f"bad direction {_show(direction)}")
        field = parse_field(name, ErrorCode.UNSUPPORTED_ORDER_BY)
        terms.append(SortTerm(field, descending=direction == "desc"))
    return tuple(terms)


# --- evaluation ---------------------------------------------------------------------------


def field_value(field: FieldRef, record: Mapping[str, Any]) -> Any:
    """The field's value in ``record`` or :data:`MISSING`.

    Args:
        field: a parsed field.
        record: ``{"id", "key", "createdAt", "updatedAt", "metadata"}``; ``key``/
            ``metadata`` may be ``None`` (a ``None`` key is missing).
    """
    if field.reserved:
        value = record.get(field.name)
        return MISSING if value is None else value
    current = record.get("metadata")
    for segment in field.path:
        if not isinstance(current, dict) or segment not in current:
            return MISSING
        current = current[segment]
    return current


def _kind(value: Any) -> str:
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def _equals(value: Any, operand: Scalar) -> bool:
    if operand is None:
        return value is MISSING or value is None
    return _kind(value) == _kind(operand) and bool(value == operand)


_RANGE: Final = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _compare(value: Any, op: CompareOp, operand: Any) -> bool:
    if op in ("$eq", "$ne"):
        return _equals(value, operand) == (op == "$eq")
    kind, bound = _kind(value), operand
    if kind != _kind(bound) or kind not in ("number", "string"):
        return False
    return bool(_RANGE[op](value, bound))


def matches(node: FilterNode | None, record: Mapping[str, Any]) -> bool:
    """Evaluate a parsed filter against one record (see :func:`field_value` for its shape)."""
    if node is None:
        return True
    if isinstance(node, And):
        return all(matches(child, record) for child in node.children)
    if isinstance(node, Or):
        return any(matches(child, record) for child in node.children)
    value = field_value(node.field, record)
    if isinstance(node, Exists):
        return (value is not MISSING) == node.exists
    if isinstance(node, In):
        found = any(_equals(value, operand) for operand in node.values)
        return found != node.negate
    return _compare(value, node.op, node.value)


_RANKS: Final = {"missing": 0, "null": 0, "number": 1, "string": 2, "object": 3, "array": 4}


def sort_key(value: Any) -> SortValue:
    """The typed sort value of a field value (see the module docstring for the order)."""
    kind = _kind(value)
    if kind == "bool":
        return (5, int(value))
    if kind in ("number", "string"):
        return (_RANKS[kind], value)
    return (_RANKS[kind], 0)


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def compare_rows(
    a: tuple[Sequence[SortValue], int],
    b: tuple[Sequence[SortValue], int],
    terms: Sequence[SortTerm],
) -> int:
    """Compare two rows ``(sort values, seq)`` in query order: -1, 0 or 1.

    Each term compares its typed values (reversed when descending); the sequence number,
    ascending, breaks ties.
    """
    for a_value, b_value, term in zip(a[0], b[0], terms, strict=True):
        result = _cmp(a_value[0], b_value[0]) or _cmp(a_value[1], b_value[1])
        if result:
            return -result if term.descending else result
    return _cmp(a[1], b[1])


# --- timestamps ---------------------------------------------------------------


_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,30}))?"
    r"(?:[Zz]|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
_TIMESTAMP_HELP: Final = (
    "needs an RFC 3339 timestamp with an offset (a real date and time, years 0001-9999 "
    "in UTC), e.g. 2025-12-31T23:00:00Z or 2026-01-01T04:00:00.250+05:00"
)


def _bad_timestamp(field: FieldRef, op: str) -> MemoryError:
    return MemoryError(
        ErrorCode.INVALID_INPUT, f"Invalid input: filter.{field.name}.{op}: {_TIMESTAMP_HELP}"
    )


def _format_utc(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the year always 4 digits, unlike ``strftime``)."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def normalize_timestamp(text: str, op: str = "$eq", where: str = "timestamp") -> str:
    """An RFC 3339 date-time as the stores keep it: UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

    Args:
        text: e.g. ``2026-05-01T17:00:00+05:00``, ``2026-05-01t12:00:00.25Z``, ``…-00:00``;
            a leap second ``:60`` is the first instant of the next second.
        op: the operator the bound is for: digits past the microsecond round ``$gte``/
            ``$lt`` bounds up and ``$gt``/``$lte`` bounds down, so the comparison means
            the same on microsecond timestamps; for ``$eq``/``$ne``/``$in``/``$nin`` the
            result keeps those digits (it then equals no stored timestamp).
        where: the location named in the error (e.g. ``filter.createdAt.$gte``).

    Returns:
        The same instant in UTC, 27 characters (28+ with extra digits, equality only).

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``where`` when ``text`` is not an RFC 3339
            date-time (offset required), names no real date or time, or falls outside
            years 0001-9999 once in UTC (source: RFC 3339 section 5.6).
    """
    match = _RFC3339.fullmatch(text)
    bad = MemoryError(ErrorCode.INVALID_INPUT, f"Invalid input: {where}: {_TIMESTAMP_HELP}")
    if match is None:
        raise bad
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, sign, off_hours, off_minutes = match.group(7) or "", *match.groups()[7:]
    offset = timedelta(hours=int(off_hours or 0), minutes=int(off_minutes or 0))
    if offset >= timedelta(hours=24) or int(off_minutes or 0) > 59 or second > 60:
        raise bad
    try:
        zone = timezone(-offset if sign == "-" else offset)
        moment = datetime(year, month, day, hour, minute, min(second, 59),
                          int(fraction[:6].ljust(6, "0")), tzinfo=zone)  # fmt: skip
        moment = (moment + timedelta(seconds=second - min(second, 59))).astimezone(UTC)
        extra = fraction[6:].rstrip("0")
        if extra and op in ("$gte", "$lt"):
            moment += timedelta(microseconds=1)
    except (ValueError, OverflowError):
        raise bad from None
    if moment.year < 1 or moment.year > 9999:
        raise bad
    normal = _format_utc(moment)
    return normal[:-1] + extra + "Z" if extra and op not in _RANGE_OPS else normal


def timestamp_now(previous: str | None = None) -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, never before ``previous``.

    Args:
        previous: the latest timestamp already assigned, if any; the result is
            ``max(now, previous)`` so creation order and ``createdAt`` order agree (MEM-PY-6).
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return previous if previous is not None and previous > now else now
