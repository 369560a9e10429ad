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

Modules: this one parses (:func:`parse_filter`, :func:`parse_order_by`) and re-exports
the AST (:mod:`.filter_ast`), the Python evaluation (:mod:`.filter_eval`), the timestamps
(:mod:`.timestamps`) and the cursors (:mod:`.cursors`), so ``from
ditto_worker.memory.filters import matches`` keeps working.

Cursors:
    Signed, opaque url-safe strings carrying a version, a fingerprint of (filter, orderBy)
    and the last row's typed sort values and sequence number; made and checked with the
    store's own secret by :mod:`ditto_worker.memory.cursors` (re-exported here).

Errors (all :class:`~ditto_worker.errors.MemoryError`): ``UNSUPPORTED_FILTER``,
``UNSUPPORTED_ORDER_BY``, ``INVALID_CURSOR``, ``INVALID_INPUT`` (a timestamp operand).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ditto_worker.contracts import OrderBy
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.cursors import (
    Cursor,
    SortValue,
    decode_cursor,
    encode_cursor,
    query_fingerprint,
)
from ditto_worker.memory.filter_ast import (
    MISSING,
    RANGE_OPS,
    RESERVED_FIELDS,
    TIMESTAMP_FIELDS,
    And,
    Compare,
    CompareOp,
    Exists,
    FieldRef,
    FilterNode,
    In,
    Or,
    Scalar,
    SortTerm,
)
from ditto_worker.memory.filter_eval import compare_rows, field_value, matches, sort_key
from ditto_worker.memory.timestamps import TIMESTAMP_HELP, normalize_timestamp, timestamp_now

__all__ = [
    "MISSING",
    "RANGE_OPS",
    "RESERVED_FIELDS",
    "TIMESTAMP_FIELDS",
    "TIMESTAMP_HELP",
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
    if op in RANGE_OPS:
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


def _bad_timestamp(field: FieldRef, op: str) -> MemoryError:
    return MemoryError(
        ErrorCode.INVALID_INPUT, f"Invalid input: filter.{field.name}.{op}: {TIMESTAMP_HELP}"
    )
