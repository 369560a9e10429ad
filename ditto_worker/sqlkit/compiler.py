"""The filter compiler and keyset paging every SQL store shares; a dialect does the rest.

The shared filter language (:mod:`ditto_worker.memory.filters`) parses to a small AST;
:func:`compile_filter` walks it once for every SQL store: ``$and``/``$or`` join their
children (``true``/``false`` when empty), ``$in`` is the ``OR`` of equalities, ``$ne``
and ``$nin`` are the exact ``NOT`` of ``$eq``/``$in`` (so a dialect's equality must be
true or false, never SQL ``NULL``). The dialect (:class:`FilterDialect`, one subclass
per database, SQLAlchemy's shape) writes the leaves: equality, the range operators and
``$exists`` on a field, with its placeholders, JSON paths, casts and collation, and
knows the store's declared ``queryFields``.

Sort terms select a few columns each (the dialect's :attr:`FilterDialect.sort_letters`,
``r{i}`` first: the type rank of :func:`ditto_worker.memory.filters.sort_key`);
:func:`order_clause` orders by them (or by the fewer :meth:`FilterDialect.order_items`
names, a record column's own so its index serves the order), then by the store's
sequence ``seq`` ascending, and :func:`keyset_condition` selects the rows strictly after
a cursor in that order.

Every value and every field path from a request is a bound parameter; nothing from a
request is formatted into SQL text (a dialect may format configured names).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ditto_worker.memory.filters import (
    And,
    Compare,
    Cursor,
    Exists,
    FieldRef,
    FilterNode,
    In,
    Or,
    Scalar,
    SortTerm,
)

__all__ = [
    "FilterDialect",
    "Sql",
    "compile_filter",
    "join",
    "keyset_condition",
    "negate",
    "order_clause",
    "uses_declared",
]


@dataclass
class Sql:
    """A SQL fragment and its positional parameters, in text order (one per
    placeholder of the dialect: ``?`` for SQLite, ``%s`` for psycopg and PyMySQL)."""

    text: str
    params: list[Any] = field(default_factory=list)


def join(op: str, parts: Sequence[Sql], empty: str) -> Sql:
    """``(a <op> b <op> …)`` of ``parts`` with their parameters in order; ``empty`` (a SQL
    literal) for no parts. ``op`` is ``AND`` or ``OR``."""
    if not parts:
        return Sql(empty)
    return Sql(
        "(" + f" {op} ".join(p.text for p in parts) + ")", [x for p in parts for x in p.params]
    )


def negate(sql: Sql) -> Sql:
    """``(NOT <sql>)``: the exact negation of a predicate that is never ``NULL``."""
    return Sql(f"(NOT {sql.text})", sql.params)


class FilterDialect(ABC):
    """How one database writes the leaves of a filter and the keyset steps of a cursor.

    A subclass sets :attr:`true`, :attr:`false`, :attr:`mark` and :attr:`sort_letters`
    and implements :meth:`equals`, :meth:`compare`, :meth:`exists` and :meth:`at`; an
    instance holds what a query needs beyond the request (the store's declared
    ``queryFields``). Each predicate it returns is true or false, never SQL ``NULL``.
    """

    true: ClassVar[str] = "TRUE"
    """The SQL literal of a predicate that always holds (``1`` on SQLite)."""
    false: ClassVar[str] = "FALSE"
    """The SQL literal of a predicate that never holds (``0`` on SQLite)."""
    mark: ClassVar[str] = "%s"
    """The driver's positional placeholder."""
    sort_letters: ClassVar[tuple[str, ...]] = ("r", "v")
    """Column prefixes a sort term selects, ``r`` (the type rank) first: term ``i``'s
    columns are ``r{i}``, ``v{i}`` …, ordered in this sequence."""

    @abstractmethod
    def equals(self, ref: FieldRef, value: Scalar) -> Sql:
        """``ref = value`` with typed semantics (MEM-PY-5): ``None`` matches missing or
        JSON ``null``; numbers equal numbers only, strings strings, booleans booleans."""

    @abstractmethod
    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:
        """``ref <op> value`` for ``op`` in ``$gt $gte $lt $lte`` and a number or string
        ``value``: same JSON type only, strings by code point."""

    @abstractmethod
    def exists(self, ref: FieldRef, exists: bool) -> Sql:
        """Whether the record has the field (``exists``) or has it not."""

    @abstractmethod
    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:
        """Rows whose sort term ``index`` has type ``rank`` and a value ``op`` the
        cursor's ``value`` (``op`` is ``<``, ``>`` or ``=``), over the columns of
        :attr:`sort_letters`; a rank without values (missing, objects, arrays) is
        ``r{index} = rank`` for ``=`` and :attr:`false` otherwise."""

    def order_items(self, index: int, term: SortTerm) -> list[str]:
        """``ORDER BY`` items of sort term ``index``: its :attr:`sort_letters` columns in
        the term's direction. A dialect may name fewer for a term whose value column alone
        sorts as its rank and value do (a record column such as ``key``, ``NULL`` where the
        rank is 0), so the column's index serves the order and a ``LIMIT`` stops early."""
        direction = "DESC" if term.descending else "ASC"
        return [f"{letter}{index} {direction}" for letter in self.sort_letters]


def compile_filter(dialect: FilterDialect, node: FilterNode | None) -> Sql:
    """A boolean SQL expression for a parsed filter (:attr:`FilterDialect.true` for none).

    Args:
        dialect: the database's leaves, holding its declared fields.
        node: :func:`ditto_worker.memory.filters.parse_filter`'s result.

    Returns:
        The predicate and its parameters (one per :attr:`FilterDialect.mark`).
    """
    if node is None:
        return Sql(dialect.true)
    if isinstance(node, And):
        return join("AND", [compile_filter(dialect, c) for c in node.children], dialect.true)
    if isinstance(node, Or):
        return join("OR", [compile_filter(dialect, c) for c in node.children], dialect.false)
    if isinstance(node, Exists):
        return dialect.exists(node.field, node.exists)
    if isinstance(node, In):
        found = join("OR", [dialect.equals(node.field, v) for v in node.values], dialect.false)
        return negate(found) if node.negate else found
    return _compare(dialect, node)


def _compare(dialect: FilterDialect, node: Compare) -> Sql:
    if node.op in ("$eq", "$ne"):
        equal = dialect.equals(node.field, node.value)
        return equal if node.op == "$eq" else negate(equal)
    return dialect.compare(node.field, node.op, node.value)


def uses_declared(
    node: FilterNode | None, terms: Sequence[SortTerm], declared: Callable[[FieldRef], bool]
) -> bool:
    """True when a sort term or a filter condition is on a field ``declared`` accepts
    (a declared ``queryFields`` field with an index: the store's planner hints)."""
    if any(declared(term.field) for term in terms):
        return True
    if node is None:
        return False
    if isinstance(node, And | Or):
        return any(uses_declared(child, (), declared) for child in node.children)
    return declared(node.field)


def order_clause(dialect: FilterDialect, terms: Sequence[SortTerm]) -> str:
    """``ORDER BY`` items over each term's columns (:meth:`FilterDialect.order_items`),
    then ``seq ASC`` (the sequence breaks every tie, in both directions)."""
    items = [item for index, term in enumerate(terms) for item in dialect.order_items(index, term)]
    return ", ".join([*items, "seq ASC"])


def keyset_condition(dialect: FilterDialect, terms: Sequence[SortTerm], cursor: Cursor) -> Sql:
    """Rows strictly after ``cursor`` in the order of :func:`order_clause`: for each
    term, the earlier terms equal and this one after (a lower or higher rank, or the same
    rank and a value past the cursor's), and finally every term equal and ``seq`` after.

    Raises:
        ValueError: ``cursor`` has another number of values than ``terms`` (a decoded
            cursor always matches: :func:`ditto_worker.memory.filters.decode_cursor`).
    """
    true, mark = dialect.true, dialect.mark
    branches: list[Sql] = []
    prefix: list[Sql] = []
    for index, (term, (rank, value)) in enumerate(zip(terms, cursor.values, strict=True)):
        op = "<" if term.descending else ">"
        same = dialect.at(index, rank, value, op)
        after = Sql(f"(r{index} {op} {mark} OR {same.text})", [rank, *same.params])
        branches.append(join("AND", [*prefix, after], true))
        prefix.append(dialect.at(index, rank, value, "="))
    branches.append(join("AND", [*prefix, Sql(f"seq > {mark}", [cursor.seq])], true))
    return join("OR", branches, true)
