"""A parsed filter translated into a document store's own conditions, node by node.

:func:`translate` walks the shared filter AST (:func:`ditto_worker.memory.filters.
parse_filter`) and leaves every leaf and combinator to an :class:`ExpressionDialect`:
Qdrant builds ``models.Filter`` objects, Milvus boolean expression text (its one escaping
routine quotes every value). The walk is the filter language's semantics (MEM-PY-5):
``$ne`` and ``$nin`` are the negation of ``$eq`` and ``$in``; a dialect whose
comparisons are three-valued on a missing field (Milvus) makes the negated leaf
two-valued (the ``negated`` argument), so the negation holds there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ditto_worker.memory.filters import And, Exists, FieldRef, FilterNode, In, Or, Scalar

__all__ = ["ExpressionDialect", "translate"]

E = TypeVar("E")


class ExpressionDialect(Protocol[E]):
    """The leaves and combinators of one document store's filter conditions."""

    def all_of(self, parts: list[E]) -> E:
        """Every one of ``parts`` (an ``And`` node's children)."""
        ...

    def any_of(self, parts: list[E]) -> E:
        """At least one of ``parts`` (an ``Or`` node's children)."""
        ...

    def negate(self, part: E) -> E:
        """Not ``part``."""
        ...

    def exists(self, field: FieldRef, exists: bool) -> E:
        """``{field: {"$exists": exists}}``."""
        ...

    def member(self, field: FieldRef, values: Sequence[Scalar], negated: bool) -> E:
        """``field`` equals one of ``values`` (two-valued when ``negated``)."""
        ...

    def equal(self, field: FieldRef, value: Scalar, negated: bool) -> E:
        """``field`` equals ``value`` (``null``: is null or missing; two-valued when
        ``negated``)."""
        ...

    def ranged(self, field: FieldRef, op: str, bound: Scalar) -> E:
        """``field`` ``op`` (``$gt``, ``$gte``, ``$lt``, ``$lte``) ``bound``."""
        ...


def translate(node: FilterNode, dialect: ExpressionDialect[E]) -> E:
    """``node`` as the dialect's condition (module docstring).

    Raises:
        MemoryError: whatever the dialect raises (``UNSUPPORTED_FILTER`` for what the
            store cannot express).
    """
    if isinstance(node, And):
        return dialect.all_of([translate(child, dialect) for child in node.children])
    if isinstance(node, Or):
        return dialect.any_of([translate(child, dialect) for child in node.children])
    if isinstance(node, Exists):
        return dialect.exists(node.field, node.exists)
    if isinstance(node, In):
        found = dialect.member(node.field, node.values, node.negate)
        return dialect.negate(found) if node.negate else found
    if node.op in ("$eq", "$ne"):
        equal = dialect.equal(node.field, node.value, node.op == "$ne")
        return equal if node.op == "$eq" else dialect.negate(equal)
    return dialect.ranged(node.field, node.op, node.value)
