"""Compile the shared filter language (:mod:`ditto_worker.memory.filters`) to PostgreSQL SQL.

Every value and every metadata path is a bound parameter (``%s``); nothing from a request
is formatted into the SQL text. Records are the table aliased ``m``; a metadata field is
``m.metadata #> %s::text[]`` (a ``jsonb`` value, SQL ``NULL`` when missing).

Typed semantics (MEM-PY-5), every predicate ``true``/``false``, never ``NULL``:

* equality to a boolean, number or string is ``(m.metadata IS NOT NULL AND m.metadata
  @> %s::jsonb)`` (never ``NULL``, and a form the GIN ``jsonb_path_ops`` index on
  ``metadata`` serves; jsonb equality is typed: ``5 = 5.0``, ``"5" <> 5``, ``true <> 1``;
  a dot path never reaches into arrays) — reserved fields compare their column;
* ``$eq: null`` matches missing or JSON ``null``;
* ranges apply only to the same JSON type (``jsonb_typeof``): numbers as ``numeric``,
  strings by code point (``COLLATE "C"``); a ``CASE`` guards every cast;
* ``$ne``/``$nin`` are the exact negations of ``$eq``/``$in``;
* a string operand holding NUL (which no stored string or key can hold: PostgreSQL text
  cannot, and writes refuse it) equals nothing, and compares as its prefix before the
  first NUL would: ``> v`` and ``>= v`` are ``> prefix``, ``< v`` and ``<= v`` are ``<=
  prefix`` (code point order; no stored string lies between them), never a driver error.

Declared fields (``queryFields``, issue 28): the path of a field the store declares is a
SQL literal (``'{"f"}'::text[]``) instead of a parameter, so its expressions are those of
its index (:mod:`ditto_plugin_postgres.query_index`, built by :func:`sort_expressions`);
a range or an equality on it is written ``r = 1 AND n <op> x`` (numbers), ``r = 2 AND n
IS NULL AND t <op> x`` (strings), ``r = 5 AND n = 0|1`` (booleans) or ``r = 0`` (``null``:
missing or JSON ``null``), equality only for the last two, over the sort expressions:
the same test in a form its B-tree index serves.
The literal is the configured name, never text from a request.

Sort terms select three columns each: ``r{i}`` (type rank of
:func:`ditto_worker.memory.filters.sort_key`), ``n{i}`` (numbers; booleans as 0/1) and ``t{i}``
(strings, ``COLLATE "C"``). :func:`keyset_condition` continues after a cursor, the
sequence breaking ties.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar, Final

from ditto_worker.memory.filters import FieldRef, FilterNode, Scalar, SortTerm
from ditto_worker.sqlkit import FilterDialect, Sql
from ditto_worker.sqlkit import compile_filter as _compile

__all__ = [
    "Declared",
    "PostgresFilter",
    "Sql",
    "compile_filter",
    "decimal_value",
    "in_namespace",
    "number_param",
    "sort_columns",
    "sort_expressions",
    "value_expression",
]

_COLUMNS: Final = {"id": "m.id", "key": "m.key", "createdAt": "m.created_at",
                   "updatedAt": "m.updated_at"}  # fmt: skip
_RANGE: Final = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_VALUE: Final = "(m.metadata #> %s::text[])"
_INDEX_LIKE: Final = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]")


Declared = frozenset[str]
"""The names of a store's declared ``queryFields``."""


def in_namespace(where: Sql, namespace: str, lookup: bool = True) -> Sql:
    """``where`` confined to one tenant namespace (exact ``=`` on a bound parameter, so
    ``_``/``%`` are plain characters; :mod:`ditto_worker.memory.scope`). ``lookup=False``
    keeps the planner from finding rows by the namespace index (``m.namespace || ''``):
    the rows are found otherwise (a keyword search's GIN lookup yields its scope's rows
    only) and the test is a check."""
    column = "m.namespace" if lookup else "(m.namespace || '')"
    return Sql(f"({column} = %s AND {where.text})", [namespace, *where.params])


def number_param(value: int | float) -> str:
    """A number as exact ``numeric`` text (``repr`` of a float round-trips)."""
    return str(value) if isinstance(value, int) else repr(float(value))


def _path_literal(path: Sequence[str], bound: bool) -> str:
    items = ",".join('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in path)
    literal = ("{" + items + "}").replace("'", "''")
    return f"'{literal.replace('%', '%%') if bound else literal}'::text[]"


def _array_guards(path: Sequence[str]) -> list[int]:
    """Positions of segments ``#>`` would read as an array index (``strtol`` syntax), after
    the first: their parent must be an object (a dot path never reaches into arrays)."""
    return [i for i, segment in enumerate(path) if i and _INDEX_LIKE.match(segment)]


def value_expression(path: Sequence[str], column: str = "m.metadata", bound: bool = True) -> str:
    """``(<column> #> '<path>'::text[])`` with the path as a literal (a declared field);
    ``bound``: for a statement run with parameters (``%`` doubled). A segment that reads
    as an integer is guarded: its parent must be an object, never an array."""
    found = f"({column} #> {_path_literal(path, bound)})"
    guards = [
        f"jsonb_typeof({column} #> {_path_literal(path[:i], bound)}) = 'object'"
        for i in _array_guards(path)
    ]
    return f"(CASE WHEN {' AND '.join(guards)} THEN {found} END)" if guards else found


def _value(ref: FieldRef, declared: Declared) -> Sql:
    """The field's ``jsonb`` value expression: a literal path when declared, else bound
    parameters; guarded as :func:`value_expression`."""
    if ref.name in declared:
        return Sql(value_expression(ref.path))
    guards = _array_guards(ref.path)
    if not guards:
        return Sql(_VALUE, [list(ref.path)])
    parents = " AND ".join("jsonb_typeof(m.metadata #> %s::text[]) = 'object'" for _ in guards)
    return Sql(
        f"(CASE WHEN {parents} THEN {_VALUE} END)",
        [*(list(ref.path[:i]) for i in guards), list(ref.path)],
    )


def _nested(path: Sequence[str], value: Scalar) -> str:
    doc: Any = value
    for segment in reversed(path):
        doc = {segment: doc}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False)


def _without_nul(op: str, value: str) -> tuple[str, str]:
    """The range ``op value`` without NUL, the same over strings without NUL (module doc)."""
    if "\x00" not in value:
        return op, value
    return ("$gt" if op in ("$gt", "$gte") else "$lte"), value[: value.index("\x00")]


def _equals(ref: FieldRef, value: Scalar, declared: Declared = frozenset()) -> Sql:
    if isinstance(value, str) and "\x00" in value:  # no stored string holds NUL
        return Sql("false")
    if ref.reserved:
        column = _COLUMNS[ref.name]
        if value is None:
            return Sql(f"({column} IS NULL)")
        if not isinstance(value, str):
            return Sql("false")
        return Sql(f"COALESCE({column} = %s, false)", [value])
    if ref.name in declared:
        return _declared_equals(ref, value)
    if value is None:
        found = _value(ref, declared)
        return Sql(f"COALESCE(jsonb_typeof({found.text}) = 'null', true)", found.params)
    return Sql("(m.metadata IS NOT NULL AND m.metadata @> %s::jsonb)", [_nested(ref.path, value)])


def _declared_equals(ref: FieldRef, value: Scalar) -> Sql:
    """Equality on a declared field over its index's sort expressions (module doc): the
    same typed test as ``@>`` (``5 = 5.0``, ``"5" <> 5``, ``true <> 1``); ``null``
    (missing or JSON ``null``) is type rank 0."""
    rank, number, text = sort_expressions(value_expression(ref.path))
    if value is None:
        return Sql(f"({rank} = 0)")
    if isinstance(value, str):
        return Sql(f"({rank} = 2 AND {number} IS NULL AND {text} = %s)", [value])
    if isinstance(value, bool):
        return Sql(f"({rank} = 5 AND {number} = %s::numeric)", [int(value)])
    return Sql(f"({rank} = 1 AND {number} = %s::numeric)", [number_param(value)])


def _range(ref: FieldRef, op: str, value: Scalar, declared: Declared = frozenset()) -> Sql:
    if isinstance(value, str):
        op, value = _without_nul(op, value)
    sql_op = _RANGE[op]
    if ref.reserved:
        if not isinstance(value, str):
            return Sql("false")
        column = _COLUMNS[ref.name]  # not COALESCE(...): the column's index serves the range
        return Sql(f"({column} IS NOT NULL AND {column} {sql_op} %s)", [value])
    if ref.name in declared:
        rank, number, text = sort_expressions(value_expression(ref.path))
        if isinstance(value, str):
            return Sql(f"({rank} = 2 AND {number} IS NULL AND {text} {sql_op} %s)", [value])
        bound = number_param(value)  # type: ignore[arg-type]
        return Sql(f"({rank} = 1 AND {number} {sql_op} %s::numeric)", [bound])
    found = _value(ref, declared)
    if isinstance(value, str):
        return Sql(
            f"COALESCE(CASE WHEN jsonb_typeof({found.text}) = 'string' THEN "
            f"({found.text} #>> '{{}}') COLLATE \"C\" {sql_op} %s END, false)",
            [*found.params, *found.params, value],
        )
    return Sql(
        f"COALESCE(CASE WHEN jsonb_typeof({found.text}) = 'number' THEN "
        f"({found.text} #>> '{{}}')::numeric {sql_op} %s::numeric END, false)",
        [*found.params, *found.params, number_param(value)],  # type: ignore[arg-type]
    )


def _exists(ref: FieldRef, exists: bool, declared: Declared = frozenset()) -> Sql:
    if ref.reserved:
        present = "(m.key IS NOT NULL)" if ref.name == "key" else "true"
        return Sql(present if exists else f"(NOT {present})")
    found = _value(ref, declared)
    return Sql(f"({found.text} IS {'NOT ' if exists else ''}NULL)", found.params)


def sort_expressions(value: str) -> tuple[str, str, str]:
    """(rank, number, text) sort expressions of a ``jsonb`` value expression (the typed
    order of :func:`ditto_worker.memory.filters.sort_key`); also a declared field's
    index columns (:mod:`ditto_plugin_postgres.query_index`)."""
    kind = f"jsonb_typeof({value})"
    return (
        f"(CASE {kind} WHEN 'number' THEN 1 WHEN 'string' THEN 2 WHEN 'object' THEN 3 "
        "WHEN 'array' THEN 4 WHEN 'boolean' THEN 5 ELSE 0 END)",
        f"(CASE {kind} WHEN 'number' THEN ({value} #>> '{{}}')::numeric "
        f"WHEN 'boolean' THEN (CASE WHEN {value} = 'true'::jsonb THEN 1 ELSE 0 END) END)",
        f"((CASE WHEN {kind} = 'string' THEN ({value} #>> '{{}}') END) COLLATE \"C\")",
    )


def _term_columns(index: int, ref: FieldRef, declared: Declared) -> Sql:
    if ref.reserved:
        column = _COLUMNS[ref.name]
        rank = f"(CASE WHEN {column} IS NULL THEN 0 ELSE 2 END)"
        return Sql(f", {rank} AS r{index}, NULL::numeric AS n{index}, {column} AS t{index}")
    found = _value(ref, declared)
    rank, number, text = sort_expressions(found.text)
    columns = f", {rank} AS r{index}, {number} AS n{index}, {text} AS t{index}"
    return Sql(columns, found.params * columns.count(found.text))


def sort_columns(terms: Sequence[SortTerm], declared: Declared = frozenset()) -> Sql:
    """Select-list items ``r{i}, n{i}, t{i}`` per term, with a leading comma."""
    parts = [_term_columns(i, term.field, declared) for i, term in enumerate(terms)]
    return Sql("".join(p.text for p in parts), [x for p in parts for x in p.params])


def decimal_value(value: Decimal | int | None) -> int | float:
    """A ``numeric`` sort value as the cursor's number (``int`` when integral)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return int(value) if value == value.to_integral_value() else float(value)


class PostgresFilter(FilterDialect):
    """PostgreSQL's leaves of the shared compiler (:mod:`ditto_worker.sqlkit`): ``jsonb``
    paths and containment, ``numeric`` casts, ``COLLATE "C"`` (module doc), ``%s``
    placeholders; sort terms select ``r{i}``/``n{i}``/``t{i}`` (:func:`sort_columns`).
    ``declared``: the store's declared ``queryFields`` (their index expressions)."""

    true: ClassVar[str] = "true"
    false: ClassVar[str] = "false"
    sort_letters: ClassVar[tuple[str, ...]] = ("r", "n", "t")

    def __init__(self, declared: Declared = frozenset()) -> None:
        self.declared = declared

    def equals(self, ref: FieldRef, value: Scalar) -> Sql:  # noqa: D102 (the base's doc)
        return _equals(ref, value, self.declared)

    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:  # noqa: D102
        return _range(ref, op, value, self.declared)

    def exists(self, ref: FieldRef, exists: bool) -> Sql:  # noqa: D102
        return _exists(ref, exists, self.declared)

    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:  # noqa: D102
        if rank in (1, 5):
            return Sql(f"(r{index} = %s AND n{index} {op} %s::numeric)",
                       [rank, number_param(value)])  # fmt: skip
        if rank == 2:
            return Sql(f"(r{index} = %s AND t{index} {op} %s)", [rank, value])
        return Sql(f"(r{index} = %s)", [rank]) if op == "=" else Sql("false")

    def order_items(self, index: int, term: SortTerm) -> list[str]:
        """A record column's ``t{index}`` alone, ``NULL`` (a missing key, rank 0) first
        ascending and last descending, so ``memories_namespace_key_order`` (migration 8)
        serves ``orderBy key`` and its ``LIMIT``; other terms by rank, number and text."""
        if term.field.reserved:
            nulls = "DESC NULLS LAST" if term.descending else "ASC NULLS FIRST"
            return [f"t{index} {nulls}"]
        return super().order_items(index, term)


def compile_filter(node: FilterNode | None, declared: Declared = frozenset()) -> Sql:
    """A boolean SQL expression over ``m`` for a parsed filter (``true`` for none);
    ``declared`` fields get the expressions of their indexes (module doc)."""
    return _compile(PostgresFilter(declared), node)
