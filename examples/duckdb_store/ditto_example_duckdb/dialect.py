"""DuckDB's dialect of the SQL store kit: the leaves of a filter, the sort columns.

A metadata field is read from the ``metadata`` JSON column of the table aliased ``m``
with DuckDB's JSON functions and the field's path as a *JSON pointer* bound as a
parameter (``/a/b``, ``~`` and ``/`` in a key escaped as ``~0`` and ``~1``), so any key
is safe and nothing from a request is formatted into SQL. Each field has a type
expression, never NULL (``json_type``'s names, or ``'MISSING'``), and a value expression
per kind: numbers as ``DOUBLE`` (so integers beyond 2**53 lose precision), strings as
``VARCHAR`` (compared by code point: DuckDB's default binary collation), booleans as
``'true'``/``'false'``. A predicate checks the type first, so it is never NULL and
never compares across types (MEM-PY-5).

Sort terms select three columns each (``r{i}`` the type rank of
:func:`ditto_worker.memory.filters.sort_key`, ``n{i}`` the number or boolean,
``s{i}`` the string): DuckDB's columns have one type, so numbers and strings sort in
columns of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

from ditto_worker.memory.filters import FieldRef, Scalar, SortTerm, SortValue
from ditto_worker.sqlkit import FilterDialect, Sql

__all__ = ["DuckdbFilter", "pointer", "sort_columns", "sort_values"]

_NUMBER: Final = "('UBIGINT', 'BIGINT', 'HUGEINT', 'UHUGEINT', 'DOUBLE')"
_OPS: Final = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_RESERVED: Final = {
    "id": ("'VARCHAR'", "m.id"),
    "key": ("(CASE WHEN m.key IS NULL THEN 'MISSING' ELSE 'VARCHAR' END)", "m.key"),
    "createdAt": ("'VARCHAR'", "m.created_at"),
    "updatedAt": ("'VARCHAR'", "m.updated_at"),
}


def pointer(path: Sequence[str]) -> str:
    """The JSON pointer of a metadata path (RFC 6901)."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path)


class _Field:
    """The SQL of one field: its type, its number and its text."""

    def __init__(self, ref: FieldRef) -> None:
        if ref.reserved:
            type_text, value = _RESERVED[ref.name]
            self.type, self.number, self.text = Sql(type_text), Sql("NULL"), Sql(value)
            return
        path = pointer(ref.path)
        self.type = Sql("COALESCE(json_type(m.metadata, ?), 'MISSING')", [path])
        # a pointer indexes arrays ("/tags/0"); a dot path never does: a digit segment
        # is read only below an object
        parents = [pointer(ref.path[:i]) for i in range(1, len(ref.path))
                   if ref.path[i].isdigit()]  # fmt: skip
        if parents:
            guard = " AND ".join(["json_type(m.metadata, ?) = 'OBJECT'"] * len(parents))
            self.type = Sql(
                f"(CASE WHEN {guard} THEN {self.type.text} ELSE 'MISSING' END)",
                [*parents, path],
            )
        self.number = Sql("TRY_CAST(json_extract_string(m.metadata, ?) AS DOUBLE)", [path])
        self.text = Sql("json_extract_string(m.metadata, ?)", [path])


def _typed(ref: FieldRef, op: str, value: Scalar) -> Sql:
    """``field <op> value`` for a scalar, never NULL, never across types."""
    field = _Field(ref)
    kind = field.type
    if value is None:
        return Sql(f"({kind.text} IN ('MISSING', 'NULL'))", kind.params)
    if isinstance(value, bool):
        return Sql(
            f"({kind.text} = 'BOOLEAN' AND {field.text.text} = ?)",
            [*kind.params, *field.text.params, "true" if value else "false"],
        )
    if isinstance(value, str):
        kinds, operand = "('VARCHAR')", field.text
    else:
        kinds, operand, value = _NUMBER, field.number, float(value)
    return Sql(
        f"({kind.text} IN {kinds} AND {operand.text} {_OPS[op]} ?)",
        [*kind.params, *operand.params, value],
    )


class DuckdbFilter(FilterDialect):
    """DuckDB's leaves of the shared compiler (module docstring): ``?`` placeholders,
    ``TRUE``/``FALSE``, sort columns ``r``, ``n``, ``s``."""

    true: ClassVar[str] = "TRUE"
    false: ClassVar[str] = "FALSE"
    mark: ClassVar[str] = "?"
    sort_letters: ClassVar[tuple[str, ...]] = ("r", "n", "s")

    def equals(self, ref: FieldRef, value: Scalar) -> Sql:  # noqa: D102 (the base's doc)
        return _typed(ref, "$eq", value)

    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:  # noqa: D102
        return _typed(ref, op, value)

    def exists(self, ref: FieldRef, exists: bool) -> Sql:  # noqa: D102
        kind = _Field(ref).type
        return Sql(f"({kind.text} {'<>' if exists else '='} 'MISSING')", kind.params)

    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:  # noqa: D102
        if rank in (1, 5):
            return Sql(f"(r{index} = ? AND n{index} {op} ?)", [rank, float(value)])
        if rank == 2:
            return Sql(f"(r{index} = ? AND s{index} {op} ?)", [rank, value])
        return Sql(f"(r{index} = ?)", [rank]) if op == "=" else Sql(self.false)


def sort_columns(terms: Sequence[SortTerm]) -> Sql:
    """Select-list items ``r{i}``, ``n{i}``, ``s{i}`` per term (module docstring), with a
    leading comma; empty for no terms."""
    text, params = "", []
    for index, term in enumerate(terms):
        field = _Field(term.field)
        kind = field.type.text
        rank = (
            f"CASE WHEN {kind} IN {_NUMBER} THEN 1 WHEN {kind} = 'VARCHAR' THEN 2 "
            f"WHEN {kind} = 'OBJECT' THEN 3 WHEN {kind} = 'ARRAY' THEN 4 "
            f"WHEN {kind} = 'BOOLEAN' THEN 5 ELSE 0 END"
        )
        number = (
            f"CASE WHEN {kind} IN {_NUMBER} THEN {field.number.text} "
            f"WHEN {kind} = 'BOOLEAN' THEN (CASE WHEN {field.text.text} = 'true' THEN 1.0 "
            "ELSE 0.0 END) ELSE 0.0 END"
        )
        string = f"CASE WHEN {kind} = 'VARCHAR' THEN {field.text.text} ELSE '' END"
        text += f", {rank} AS r{index}, {number} AS n{index}, {string} AS s{index}"
        params += [*field.type.params * 5, *field.type.params, *field.number.params]
        params += [*field.type.params, *field.text.params]
        params += [*field.type.params, *field.text.params]
    return Sql(text, params)


def sort_values(extra: Sequence[Any]) -> tuple[SortValue, ...]:
    """A QUERY row's cursor values ``(rank, value)`` per term from its sort columns."""
    out: list[SortValue] = []
    for start in range(0, len(extra), 3):
        rank, number, string = extra[start : start + 3]
        if rank == 1:
            out.append((1, float(number)))
        elif rank == 5:
            out.append((5, int(number)))
        else:
            out.append((int(rank), str(string) if rank == 2 else 0))
    return tuple(out)
