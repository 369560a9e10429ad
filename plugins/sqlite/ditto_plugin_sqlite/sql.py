"""Compile the shared filter language (:mod:`ditto_worker.memory.filters`) to SQLite SQL.

Every value and every field path is a bound parameter; nothing from a request is
formatted into the SQL text. A metadata field is read from the ``metadata`` JSON column of
the table aliased ``m``:

* plain keys (no ``"``, ``\\`` or control characters) use ``json_type``/``json_extract``
  with the path ``$."seg"."seg"`` bound as a parameter;
* other keys walk the object with ``json_each`` (whose ``key`` column is the decoded key),
  one correlated sub-select per path segment.

Each field yields a *type* expression, never NULL (``json_type`` names, or ``'missing'``)
and a *value* expression (booleans read as 0/1, so typed predicates always check the type
first; numbers compare only with numbers, strings only with strings).

Declared fields (``queryFields``, issue 28): a plain field the store declares gets its
path as a SQL string literal instead of a parameter, so the expressions are exactly those
of the store's expression indexes (:mod:`ditto_plugin_sqlite.query_index`, built from the
same functions) and SQLite can use them. The literal is the configured name (quotes
doubled), never text from a request: a request naming another field gets parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

from ditto_worker.memory.filters import FieldRef, FilterNode, Scalar, SortTerm
from ditto_worker.sqlkit import FilterDialect, Sql
from ditto_worker.sqlkit import compile_filter as _compile

__all__ = [
    "Declared",
    "Sql",
    "SqliteFilter",
    "compile_filter",
    "field_expressions",
    "in_namespace",
    "indexable",
    "sort_columns",
    "sort_expressions",
]

_RESERVED_COLUMNS: Final = {
    "id": ("'text'", "m.id"),
    "key": ("(CASE WHEN m.key IS NULL THEN 'missing' ELSE 'text' END)", "m.key"),
    "createdAt": ("'text'", "m.created_at"),
    "updatedAt": ("'text'", "m.updated_at"),
}
_SQL_OPS: Final = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_INT64_MAX: Final = 2**63 - 1


def _plain(segment: str) -> bool:
    return not any(ch in segment for ch in '"\\') and all(ord(ch) >= 0x20 for ch in segment)


Declared = frozenset[str]
"""The names of a store's declared ``queryFields``."""


def field_expressions(path: Sequence[str], column: str = "m.metadata") -> tuple[str, str]:
    """(type, value) expressions of a plain metadata ``path`` with the path as a literal:
    the text the filter compiler emits for a declared field, and the text its index is
    built on (``column`` ``metadata``, no alias)."""
    literal = "'" + ("$" + "".join(f'."{segment}"' for segment in path)).replace("'", "''") + "'"
    return (
        f"COALESCE(json_type({column}, {literal}), 'missing')",
        f"json_extract({column}, {literal})",
    )


def _field_sql(ref: FieldRef, declared: Declared = frozenset()) -> tuple[Sql, Sql]:
    """(type expression, value expression) of a field."""
    if ref.reserved:
        type_text, value_text = _RESERVED_COLUMNS[ref.name]
        return Sql(type_text), Sql(value_text)
    if all(_plain(segment) for segment in ref.path):
        if ref.name in declared:
            type_text, value_text = field_expressions(ref.path)
            return Sql(type_text), Sql(value_text)
        path = "$" + "".join(f'."{segment}"' for segment in ref.path)
        return (
            Sql("COALESCE(json_type(m.metadata, ?), 'missing')", [path]),
            Sql("json_extract(m.metadata, ?)", [path]),
        )
    source = Sql("m.metadata")
    for depth, segment in enumerate(ref.path[:-1]):
        alias = f"je{depth}"
        source = Sql(
            f"(SELECT {alias}.value FROM json_each({source.text}) AS {alias} "
            f"WHERE {alias}.key = ? AND {alias}.type = 'object')",
            [*source.params, segment],
        )
    last = ref.path[-1]
    lookup = f"FROM json_each({source.text}) AS jl WHERE jl.key = ?"
    return (
        Sql(f"COALESCE((SELECT jl.type {lookup}), 'missing')", [*source.params, last]),
        Sql(f"(SELECT jl.value {lookup})", [*source.params, last]),
    )


def indexable(ref: FieldRef, declared: Declared) -> bool:
    """True when ``ref`` is a declared field with an index (a plain path)."""
    return ref.name in declared and not ref.reserved and all(map(_plain, ref.path))


def _bind(value: Scalar) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
        return float(value)
    return value


def _typed(ref: FieldRef, sql_op: str, value: Scalar, declared: Declared) -> Sql:
    """``field <sql_op> value`` for a scalar, never NULL, never across types."""
    type_sql, value_sql = _field_sql(ref, declared)
    if value is None:
        return Sql(f"({type_sql.text} IN ('missing', 'null'))", type_sql.params)
    if isinstance(value, bool):
        return Sql(f"({type_sql.text} = ?)", [*type_sql.params, "true" if value else "false"])
    kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
    return Sql(
        f"({type_sql.text} IN {kinds} AND {value_sql.text} {sql_op} ?)",
        [*type_sql.params, *value_sql.params, _bind(value)],
    )


def in_namespace(where: Sql, namespace: str, lookup: bool = True, indexed: bool = False) -> Sql:
    """``where`` confined to one tenant namespace (exact ``=`` on a bound parameter, so
    ``_``/``%`` are plain characters; :mod:`ditto_worker.memory.scope`).

    A scope's slice is found through the ``(namespace, seq)`` index. The unscoped
    namespace is usually the whole table (single-tenant use), where that index only adds
    a lookup per row, so its column is written ``+m.namespace`` (SQLite then does not
    use the index; without ANALYZE statistics it would assume the index is selective).
    ``lookup=False`` writes it so for every namespace: the rows are found otherwise (a
    keyword search's candidates are its scope's already) and the test is a check.
    ``indexed`` (the query reads a declared field, whose indexes lead with the namespace;
    the store keeps statistics then; or it orders by ``key``, which
    ``memories_namespace_key`` serves): ``m.namespace`` for every namespace.
    """
    plus = not lookup or (namespace == "" and not indexed)
    column = "+m.namespace" if plus else "m.namespace"
    return Sql(f"({column} = ? AND {where.text})", [namespace, *where.params])


def sort_expressions(type_text: str, value_text: str) -> tuple[str, str]:
    """(rank, value) sort expressions of a field's type and value expressions (the typed
    order of :func:`ditto_worker.memory.filters.sort_key`); also a declared field's
    sort index columns (:mod:`ditto_plugin_sqlite.query_index`)."""
    rank = (
        f"CASE {type_text} WHEN 'integer' THEN 1 WHEN 'real' THEN 1 WHEN 'text' THEN 2 "
        "WHEN 'object' THEN 3 WHEN 'array' THEN 4 WHEN 'true' THEN 5 WHEN 'false' THEN 5 "
        "ELSE 0 END"
    )
    value = (
        f"CASE WHEN {type_text} IN ('integer', 'real', 'text', 'true', 'false') "
        f"THEN {value_text} ELSE 0 END"
    )
    return rank, value


def sort_columns(terms: Sequence[SortTerm], declared: Declared = frozenset()) -> Sql:
    """Select-list items ``rank_i AS r{i}, value_i AS v{i}`` for each term (typed order of
    :func:`ditto_worker.memory.filters.sort_key`), with a leading comma; empty for no terms.
    A record column (``key``, ``id``, ``createdAt``, ``updatedAt``) is ``v{i}`` as stored,
    ``NULL`` for a missing key: alone it sorts as its rank and value do
    (:meth:`SqliteFilter.order_items`)."""
    parts: list[Sql] = []
    for index, term in enumerate(terms):
        if term.field.reserved:  # the column itself (NULL: a missing key), as its index holds it
            column = _RESERVED_COLUMNS[term.field.name][1]
            rank = f"(CASE WHEN {column} IS NULL THEN 0 ELSE 2 END)"
            parts.append(Sql(f", {rank} AS r{index}, {column} AS v{index}"))
            continue
        type_sql, value_sql = _field_sql(term.field, declared)
        rank, value = sort_expressions(type_sql.text, value_sql.text)
        parts.append(
            Sql(
                f", {rank} AS r{index}, {value} AS v{index}",
                [*type_sql.params, *type_sql.params, *value_sql.params],
            )
        )
    return Sql("".join(p.text for p in parts), [x for p in parts for x in p.params])


class SqliteFilter(FilterDialect):
    """SQLite's leaves of the shared compiler (:mod:`ditto_worker.sqlkit`): ``json_type``
    and ``json_extract`` (module doc), ``?`` placeholders, 0/1 booleans; sort terms
    select ``r{i}``/``v{i}`` (:func:`sort_columns`). ``declared``: the store's declared
    ``queryFields`` (their index expressions)."""

    true: ClassVar[str] = "1"
    false: ClassVar[str] = "0"
    mark: ClassVar[str] = "?"
    sort_letters: ClassVar[tuple[str, ...]] = ("r", "v")

    def __init__(self, declared: Declared = frozenset()) -> None:
        self.declared = declared

    def equals(self, ref: FieldRef, value: Scalar) -> Sql:  # noqa: D102 (the base's doc)
        return _typed(ref, "=", value, self.declared)

    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:  # noqa: D102
        return _typed(ref, _SQL_OPS[op], value, self.declared)

    def exists(self, ref: FieldRef, exists: bool) -> Sql:  # noqa: D102
        type_sql, _ = _field_sql(ref, self.declared)
        return Sql(f"({type_sql.text} {'<>' if exists else '='} 'missing')", type_sql.params)

    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:  # noqa: D102
        if rank in (1, 2, 5):
            return Sql(f"(r{index} = ? AND v{index} {op} ?)", [rank, _bind(value)])
        return Sql(f"(r{index} = ?)", [rank]) if op == "=" else Sql(self.false)

    def order_items(self, index: int, term: SortTerm) -> list[str]:
        """A record column's ``v{index}`` alone (SQLite sorts ``NULL``, rank 0, first
        ascending and last descending), so ``memories_namespace_key`` serves ``orderBy key``
        and its ``LIMIT``; other terms by rank and value."""
        if term.field.reserved:
            return [f"v{index} {'DESC' if term.descending else 'ASC'}"]
        return super().order_items(index, term)


def compile_filter(node: FilterNode | None, declared: Declared = frozenset()) -> Sql:
    """Compile a parsed filter to a boolean SQL expression over ``m`` (0/1, never NULL);
    ``declared`` fields get the expressions of their indexes (module doc)."""
    return _compile(SqliteFilter(declared), node)
