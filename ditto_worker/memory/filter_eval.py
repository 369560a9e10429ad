"""The shared filter language evaluated in pure Python: :func:`matches`, the sort order.

The reference in-memory store and the test oracle use it; a SQL backend compiles the same
AST instead and must agree with it. Semantics (missing fields, no cross-type comparison,
the cross-type sort order): :mod:`ditto_worker.memory.filters`.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ditto_worker.memory.cursors import SortValue
from ditto_worker.memory.filter_ast import (
    MISSING,
    And,
    CompareOp,
    Exists,
    FieldRef,
    FilterNode,
    In,
    Or,
    Scalar,
    SortTerm,
)

__all__ = ["compare_rows", "field_value", "matches", "sort_key"]


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
