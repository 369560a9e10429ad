"""The parsed form of the shared filter language: fields, conditions, sort terms.

:func:`ditto_worker.memory.filters.parse_filter` and ``parse_order_by`` build these
frozen dataclasses; :mod:`ditto_worker.memory.filter_eval` evaluates them in Python and a
SQL backend compiles them itself. The language and its semantics:
:mod:`ditto_worker.memory.filters`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = [
    "MISSING",
    "RANGE_OPS",
    "RESERVED_FIELDS",
    "TIMESTAMP_FIELDS",
    "And",
    "Compare",
    "CompareOp",
    "Exists",
    "FieldRef",
    "FilterNode",
    "In",
    "Or",
    "Scalar",
    "SortTerm",
]

RESERVED_FIELDS: Final = frozenset({"id", "key", "createdAt", "updatedAt"})
"""Record fields addressable by filter and orderBy (everything else is metadata)."""

TIMESTAMP_FIELDS: Final = frozenset({"createdAt", "updatedAt"})
"""Reserved fields holding timestamps: their operands are RFC 3339 instants."""

Scalar: TypeAlias = None | bool | int | float | str
"""A JSON scalar operand."""

CompareOp = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
RANGE_OPS: Final = ("$gt", "$gte", "$lt", "$lte")
"""The order comparisons (strings and numbers only, same kind)."""


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
