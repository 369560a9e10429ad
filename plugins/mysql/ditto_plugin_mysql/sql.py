"""Compile the shared filter language (:mod:`ditto_worker.memory.filters`) to MySQL SQL.

Every value and every metadata path is a bound parameter (``%s``); nothing from a request
is formatted into the SQL text. Records are the table aliased ``m``; a metadata field is
``JSON_EXTRACT(m.metadata, %s)`` with the path ``$."seg"."seg"`` (each segment a JSON
string, so quotes, backslashes, dots and ``$`` inside a name are plain characters) and
its type ``JSON_TYPE(…)`` — SQL ``NULL`` when the field is missing. Only functions both
MySQL 8.0+ and MariaDB 10.6+ have are used (no ``->>``, no ``JSON_EQUALS``, no ``CAST(… AS
JSON)``); MariaDB returns ``JSON_EXTRACT`` as text, MySQL as ``JSON``, and both give the
same ``JSON_TYPE`` names and ``JSON_UNQUOTE`` text used here.

Typed semantics (MEM-PY-5), every predicate true or false, never ``NULL``:

* numbers compare with numbers only, as the pair (``DOUBLE``, ``DECIMAL(65,30)``): the
  double orders any magnitude, the decimal is exact for 64-bit integers and decimals
  within 35 integer / 30 fractional digits (so ``2**63 - 1 <> 2**63 - 2``);
* strings compare with strings only, by code point (``CAST(… AS BINARY)``: the UTF-8
  bytes, never a collation that pads spaces or folds case); booleans with booleans;
* ``$eq: null`` matches missing or JSON ``null``; ``$ne``/``$nin`` negate exactly;
* ``key`` is matched through ``key_hash`` (SHA-256 of its bytes), ``id`` and the
  timestamps by their bytes.

Declared fields (``queryFields``, issue 28): a condition on a field the store declares
also tests its generated columns (:mod:`ditto_plugin_mysql.query_index`), which its
indexes serve: ``_r = 1 AND _d = x AND <exact test>`` (numbers), ``_r = 2 AND _h =
SHA-256 AND <exact test>`` (strings, with ``_d IS NULL``), ``_r = 5 AND _d = 0|1``
(booleans; equalities also ``_h IS NULL``), ``_r = 0``
(``null``), ``_r = 1 AND _d >= x AND <exact test>`` (number ranges).
The column names come from the configured names, never from a request.

Sort terms select four columns each: ``r{i}`` (type rank of
:func:`ditto_worker.memory.filters.sort_key`), ``d{i}``/``x{i}`` (numbers; booleans 0/1)
and ``t{i}`` (strings as bytes); :func:`keyset_condition` continues after a cursor, the
sequence breaking ties.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar, Final

from ditto_worker.memory.filters import FieldRef, FilterNode, Scalar, SortTerm
from ditto_worker.sqlkit import FilterDialect, Sql
from ditto_worker.sqlkit import compile_filter as _compile

__all__ = [
    "Declared",
    "MysqlFilter",
    "Sql",
    "compile_filter",
    "json_path",
    "key_hash",
    "sort_columns",
    "sort_number",
]

_COLUMNS: Final = {"id": "m.id", "key": "m.`key`", "createdAt": "m.created_at",
                   "updatedAt": "m.updated_at"}  # fmt: skip
_RANGE: Final = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_STRICT: Final = {">=": ">", "<=": "<", ">": ">", "<": "<"}
_NUMBER_TYPES: Final = "('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL')"
_VALUE: Final = "JSON_EXTRACT(m.metadata, %s)"
_TYPE: Final = f"JSON_TYPE({_VALUE})"
_TEXT: Final = f"JSON_UNQUOTE({_VALUE})"
_DOUBLE: Final = f"(CASE WHEN {_TYPE} IN {_NUMBER_TYPES} THEN CAST({_TEXT} AS DOUBLE) END)"
_DECIMAL: Final = f"(CASE WHEN {_TYPE} IN {_NUMBER_TYPES} THEN CAST({_TEXT} AS DECIMAL(65,30)) END)"
_DECIMAL_LIMIT: Final = 1e35
_INDEXED_LIMIT: Final = 1e299  # below it a declared column holds every number's double

Declared = Mapping[str, str]
"""``{field name: column prefix}`` of a store's declared ``queryFields``
(:func:`ditto_plugin_mysql.query_index.column_prefixes`)."""


def json_path(path: Sequence[str]) -> str:
    """The MySQL JSON path of a metadata field: ``$."a"."b"`` (segments as JSON strings)."""
    return "$" + "".join("." + json.dumps(segment, ensure_ascii=False) for segment in path)


def key_hash(key: str) -> bytes:
    """SHA-256 of a key's UTF-8 bytes (the ``memories.key_hash`` column)."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def _utf8(text: str) -> bytes:
    return text.encode("utf-8")


def _number(value: int | float) -> tuple[float, str]:
    """A number's (double, exact decimal text) parameters."""
    return float(value), (str(value) if isinstance(value, int) else repr(float(value)))


def _fill(template: str, path: str, *values: Any) -> Sql:
    """``template`` with each ``%s`` (a metadata path) bound to ``path`` and each ``%v``
    bound to the next of ``values``, in text order."""
    params: list[Any] = []
    queue = iter(values)
    for piece in re.findall(r"%[sv]", template):
        params.append(path if piece == "%s" else next(queue))
    return Sql(template.replace("%v", "%s"), params)


def _reserved_equals(name: str, value: Scalar) -> Sql:
    if name == "key":
        if value is None:
            return Sql("(m.key_hash IS NULL)")
        return (
            Sql("COALESCE(m.key_hash = %s, FALSE)", [key_hash(value)])
            if isinstance(value, str)
            else Sql("FALSE")
        )
    if not isinstance(value, str):
        return Sql("FALSE")
    column = _COLUMNS[name]
    return Sql(f"({column} = %s AND CAST({column} AS BINARY) = %s)", [value, _utf8(value)])


def _equals(ref: FieldRef, value: Scalar, declared: Declared | None = None) -> Sql:
    if ref.reserved:
        return _reserved_equals(ref.name, value)
    exact = _exact_equals(ref, value)
    prefix = (declared or {}).get(ref.name)
    if prefix is None:
        return exact
    if value is None:
        return Sql(f"({prefix}_r = 0)")
    if isinstance(value, bool):
        return Sql(f"({prefix}_r = 5 AND {prefix}_d = %s AND {prefix}_h IS NULL)", [int(value)])
    if isinstance(value, str):
        digest = hashlib.sha256(_utf8(value)).digest()
        return Sql(
            f"({prefix}_r = 2 AND {prefix}_d IS NULL AND {prefix}_h = %s AND {exact.text})",
            [digest, *exact.params],
        )
    if abs(value) >= _INDEXED_LIMIT:
        return exact
    return Sql(
        f"({prefix}_r = 1 AND {prefix}_d = %s AND {prefix}_h IS NULL AND {exact.text})",
        [float(value), *exact.params],
    )


def _exact_equals(ref: FieldRef, value: Scalar) -> Sql:
    """Equality on a metadata field over ``JSON_EXTRACT`` (the typed test itself)."""
    path = json_path(ref.path)
    if value is None:
        return _fill(f"COALESCE({_TYPE} = 'NULL', TRUE)", path)
    if isinstance(value, bool):
        text = f"COALESCE({_TYPE} = 'BOOLEAN' AND {_TEXT} = %v, FALSE)"
        return _fill(text, path, "true" if value else "false")
    if isinstance(value, str):
        text = f"COALESCE({_TYPE} = 'STRING' AND CAST({_TEXT} AS BINARY) = %v, FALSE)"
        return _fill(text, path, _utf8(value))
    double, exact = _number(value)
    text = f"COALESCE({_DOUBLE} = %v AND {_DECIMAL} = CAST(%v AS DECIMAL(65,30)), FALSE)"
    return _fill(text, path, double, exact)


def _range(ref: FieldRef, op: str, value: Scalar, declared: Declared | None = None) -> Sql:
    exact = _exact_range(ref, op, value)
    prefix = (declared or {}).get(ref.name)
    if prefix is None or ref.reserved or isinstance(value, str):
        return exact
    if abs(value) >= _INDEXED_LIMIT:  # type: ignore[arg-type]
        return exact
    # the double of a number above (below) the bound is at or above (below) its double
    # (every number the core admits has a double in its column: 64-bit integers, floats)
    side = ">=" if op in ("$gt", "$gte") else "<="
    return Sql(
        f"({prefix}_r = 1 AND {prefix}_d {side} %s AND {exact.text})",
        [float(value), *exact.params],  # type: ignore[arg-type]
    )


def _exact_range(ref: FieldRef, op: str, value: Scalar) -> Sql:
    sql_op = _RANGE[op]
    if ref.reserved:
        if not isinstance(value, str):
            return Sql("FALSE")
        return Sql(f"COALESCE(CAST({_COLUMNS[ref.name]} AS BINARY) {sql_op} %s, FALSE)",
                   [_utf8(value)])  # fmt: skip
    path = json_path(ref.path)
    if isinstance(value, str):
        text = f"COALESCE({_TYPE} = 'STRING' AND CAST({_TEXT} AS BINARY) {sql_op} %v, FALSE)"
        return _fill(text, path, _utf8(value))
    double, exact = _number(value)  # type: ignore[arg-type]
    text = (
        f"COALESCE({_DOUBLE} {_STRICT[sql_op]} %v OR ({_DOUBLE} = %v AND "
        f"{_DECIMAL} {sql_op} CAST(%v AS DECIMAL(65,30))), FALSE)"
    )
    return _fill(text, path, double, double, exact)


def _exists(ref: FieldRef, exists: bool) -> Sql:
    if ref.reserved:
        present = "(m.key_hash IS NOT NULL)" if ref.name == "key" else "TRUE"
        return Sql(present if exists else f"(NOT {present})")
    return Sql(f"({_VALUE} IS {'NOT ' if exists else ''}NULL)", [json_path(ref.path)])


def _term_columns(index: int, ref: FieldRef) -> Sql:
    if ref.reserved:
        column = _COLUMNS[ref.name]
        return Sql(
            f", (CASE WHEN {column} IS NULL THEN 0 ELSE 2 END) AS r{index}, NULL AS d{index}"
            f", NULL AS x{index}, CAST({column} AS BINARY) AS t{index}"
        )
    boolean = f"(CASE WHEN {_TYPE} = 'BOOLEAN' THEN ({_TEXT} = 'true') END)"
    text = (
        f", (CASE {_TYPE} WHEN 'INTEGER' THEN 1 WHEN 'UNSIGNED INTEGER' THEN 1 "
        "WHEN 'DOUBLE' THEN 1 WHEN 'DECIMAL' THEN 1 WHEN 'STRING' THEN 2 WHEN 'OBJECT' "
        f"THEN 3 WHEN 'ARRAY' THEN 4 WHEN 'BOOLEAN' THEN 5 ELSE 0 END) AS r{index}"
        f", COALESCE({_DOUBLE}, {boolean}) AS d{index}"
        f", COALESCE({_DECIMAL}, {boolean}) AS x{index}"
        f", (CASE WHEN {_TYPE} = 'STRING' THEN CAST({_TEXT} AS BINARY) END) AS t{index}"
    )
    return _fill(text, json_path(ref.path))


def sort_columns(terms: Sequence[SortTerm]) -> Sql:
    """Select-list items ``r{i}, d{i}, x{i}, t{i}`` per term, with a leading comma."""
    parts = [_term_columns(i, term.field) for i, term in enumerate(terms)]
    return Sql("".join(p.text for p in parts), [x for p in parts for x in p.params])


def _same_number(index: int, op: str, value: Any) -> Sql:
    """Rows of the same rank after (or, with ``=``, equal to) the number ``value``."""
    double, exact = _number(value)
    if op == "=":
        return Sql(f"(d{index} = %s AND x{index} = CAST(%s AS DECIMAL(65,30)))", [double, exact])
    return Sql(
        f"(d{index} {op} %s OR (d{index} = %s AND x{index} {op} CAST(%s AS DECIMAL(65,30))))",
        [double, double, exact],
    )


def _at(index: int, rank: int, value: Any, op: str) -> Sql:
    """Rows whose term ``index`` has ``rank`` and a value ``op`` the cursor's."""
    if rank in (1, 5):
        same = _same_number(index, op, value)
    elif rank == 2:
        same = Sql(f"t{index} {op} %s", [_utf8(str(value))])
    else:
        return Sql(f"(r{index} = %s)", [rank]) if op == "=" else Sql("FALSE")
    return Sql(f"(r{index} = %s AND {same.text})", [rank, *same.params])


def sort_number(double: float | None, exact: Decimal | None) -> int | float:
    """A number sort value for a cursor: the exact decimal when it holds the value
    (``int`` when integral), else the double (beyond the decimal's range or precision)."""
    if double is None or exact is None:
        return 0
    if abs(double) >= _DECIMAL_LIMIT or float(exact) != double:
        return double
    return int(exact) if exact == exact.to_integral_value() else float(exact)


class MysqlFilter(FilterDialect):
    """MySQL's and MariaDB's leaves of the shared compiler (:mod:`ditto_worker.sqlkit`):
    ``JSON_EXTRACT`` paths, ``DOUBLE``/``DECIMAL`` pairs, binary strings (module doc),
    ``%s`` placeholders; sort terms select ``r{i}``/``d{i}``/``x{i}``/``t{i}``
    (:func:`sort_columns`). ``declared``: ``{field: column prefix}`` of the store's
    declared ``queryFields`` (their generated columns)."""

    sort_letters: ClassVar[tuple[str, ...]] = ("r", "d", "x", "t")

    def __init__(self, declared: Declared | None = None) -> None:
        self.declared = declared

    def equals(self, ref: FieldRef, value: Scalar) -> Sql:  # noqa: D102 (the base's doc)
        return _equals(ref, value, self.declared)

    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:  # noqa: D102
        return _range(ref, op, value, self.declared)

    def exists(self, ref: FieldRef, exists: bool) -> Sql:  # noqa: D102
        return _exists(ref, exists)

    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:  # noqa: D102
        return _at(index, rank, value, op)


def compile_filter(node: FilterNode | None, declared: Declared | None = None) -> Sql:
    """A boolean SQL expression over ``m`` for a parsed filter (``TRUE`` for none);
    conditions on ``declared`` fields also test their indexed columns (module doc)."""
    return _compile(MysqlFilter(declared), node)
