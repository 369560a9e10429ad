"""The shared filter language translated to Milvus boolean expressions, with safe quoting.

A memory's metadata is filtered through *typed shadow fields* (as on the Qdrant store):
every metadata path (each nested object key, never into arrays) is written once more in
the JSON field ``sh`` under a hash of the path ``h`` — its type letter in ``sh["ft"]``
(``z`` null, ``n`` number, ``s`` string, ``b`` boolean, ``o`` object, ``a`` array) and its
value in ``sh["fn"]`` / ``sh["fs"]`` / ``sh["fb"]`` for scalars. So a metadata key is never
spelled in an expression (only ``p`` + 24 hex digits), ``{"tags": "a"}`` never matches
``["a", "b"]``, ``{"n": 5.0}`` matches ``5``, ``{"n": null}`` matches a ``null`` or a
missing ``n`` but not ``[]``, and a string comparison never meets a number.

Values are the only user text in an expression: a string is written as a double-quoted
literal with ``\\``, ``"``, newline, carriage return and tab escaped (:func:`quote`; what
both Milvus's grammar and Milvus Lite's tokenizer read back as the same string); numbers
are written by ``repr`` (integers beyond int64 as floats), booleans as ``true``/``false``.

Reserved fields: ``id`` and ``key`` are VARCHAR columns (``key`` nullable), compared by
code point (lexicographic ranges work); ``createdAt``/``updatedAt`` are the INT64
microsecond columns ``seq``/``upd``, and a timestamp bound is turned into the microsecond
it names (any other string is placed by a binary search over the fixed-width form).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ditto_worker.dockit import field_hash, iso, time_bound, time_value, translate
from ditto_worker.dockit import shadow_fields as _shadow_fields
from ditto_worker.memory.filters import FieldRef, FilterNode, Scalar

__all__ = [
    "CREATED",
    "NOTHING",
    "UPDATED",
    "field_hash",
    "iso",
    "quote",
    "scope_expression",
    "shadow_fields",
    "to_expression",
]

CREATED: Final = "seq"
"""Column of the creation instant (µs since the epoch): the store's sequence."""
UPDATED: Final = "upd"
"""Column of the last update instant (µs since the epoch)."""
NOTHING: Final = "false"
_ALL: Final = "true"
_TIME_FIELDS: Final = {"createdAt": CREATED, "updatedAt": UPDATED}
_INT64: Final = 1 << 63
_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """``text`` as a Milvus string literal (double quotes, C escapes; module docstring)."""
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def _number(value: int | float) -> str:
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return repr(float(value))
    return repr(value)


def _literal(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    return _number(value)


def shadow_fields(metadata: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The typed shadow fields of ``metadata`` (:func:`ditto_worker.dockit.shadow_fields`),
    all four maps always present."""
    return _shadow_fields(metadata, keep_empty=True)


def scope_expression(namespace: str, node: FilterNode | None) -> str:
    """Memories of ``namespace`` matching ``node`` (``None``: all of them)."""
    base = f"ns == {quote(namespace)}"
    return base if node is None else f"{base} and ({to_expression(node)})"


# --- translation --------------------------------------------------------------------------


def _not(expression: str) -> str:
    return f"not ({expression})"


def _any(parts: Sequence[str]) -> str:
    if not parts:
        return NOTHING
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def _shadow(kind: str, field: FieldRef) -> str:
    return f'sh["{kind}"]["{field_hash(field.path)}"]'


def _compare(
    kind: str, field: FieldRef, op: str, value: str | int | float | bool, guard: bool = False
) -> str:
    """A comparison on a shadow field. Milvus evaluates it on a missing JSON key as null
    (three-valued logic: a row where it is null is not returned, nor where its ``not`` is),
    so under a negation (``guard``) it is made two-valued: false when the key is missing,
    and its negation holds there. Unguarded where no ``not`` is above it: each JSON access
    costs Milvus Lite a parse of the row's field."""
    shadow = _shadow(kind, field)
    compared = f"{shadow} {op} {_literal(value)}"
    return f"(exists {shadow}) and ({compared})" if guard else compared


_OPS: Final = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _time_range(column: str, op: str, bound: Scalar) -> str:
    found = time_bound(op, bound)
    if isinstance(found, bool):
        return _ALL if found else NOTHING
    return f"{column} {_OPS[found[0]]} {found[1]}"


def _range(field: FieldRef, op: str, bound: Scalar) -> str:
    if field.reserved and field.name in _TIME_FIELDS:
        return _time_range(_TIME_FIELDS[field.name], op, bound)
    if isinstance(bound, bool) or bound is None:
        return NOTHING
    if field.reserved:  # id and key are strings: never in a numeric range
        if not isinstance(bound, str):
            return NOTHING
        return f"{field.name} {_OPS[op]} {quote(bound)}"  # null keys: never in range
    # a range is never negated (the language has no $not): no guard
    return _compare("fs" if isinstance(bound, str) else "fn", field, _OPS[op], bound)


def _equal(field: FieldRef, value: Scalar, guard: bool = False) -> str:
    """Records whose field equals ``value`` (``null``: is null or missing); ``guard``:
    two-valued, for a negation (:func:`_compare`)."""
    if field.reserved:
        if field.name in _TIME_FIELDS:
            us = time_value(value)
            return NOTHING if us is None else f"{_TIME_FIELDS[field.name]} == {us}"
        if value is None:
            return "key is null" if field.name == "key" else NOTHING
        if not isinstance(value, str):
            return NOTHING
        equal = f"{field.name} == {quote(value)}"
        return f"({field.name} is not null) and ({equal})" if guard else equal
    if value is None:
        return f"(not (exists {_shadow('ft', field)})) or ({_compare('ft', field, '==', 'z')})"
    kind = "fb" if isinstance(value, bool) else "fs" if isinstance(value, str) else "fn"
    return _compare(kind, field, "==", value, guard)


def _in(field: FieldRef, values: Sequence[Scalar], guard: bool = False) -> str:
    distinct = list(dict.fromkeys(values))
    strings = [v for v in distinct if isinstance(v, str)]
    if field.reserved and field.name in ("id", "key") and strings:
        listed = f"{field.name} in [{', '.join(quote(v) for v in strings)}]"
        others = [_equal(field, v, guard) for v in distinct if not isinstance(v, str)]
        first = f"({field.name} is not null) and ({listed})" if guard else listed
        return _any([first, *others])
    return _any([_equal(field, v, guard) for v in distinct])


def _exists(field: FieldRef, exists: bool) -> str:
    if field.reserved and field.name != "key":
        return _ALL if exists else NOTHING  # id and the timestamps are always there
    if field.reserved:
        return "key is not null" if exists else "key is null"
    present = f"exists {_shadow('ft', field)}"
    return present if exists else _not(present)


class _Expressions:
    """Milvus's leaves and combinators of the shared translation
    (:class:`ditto_worker.dockit.ExpressionDialect`): every sub-expression parenthesized;
    a negated leaf guarded (:func:`_compare`)."""

    def all_of(self, parts: list[str]) -> str:
        return " and ".join(f"({p})" for p in parts)

    def any_of(self, parts: list[str]) -> str:
        return " or ".join(f"({p})" for p in parts)

    def negate(self, part: str) -> str:
        return _not(part)

    def exists(self, field: FieldRef, exists: bool) -> str:
        return _exists(field, exists)

    def member(self, field: FieldRef, values: Sequence[Scalar], negated: bool) -> str:
        return _in(field, values, guard=negated)

    def equal(self, field: FieldRef, value: Scalar, negated: bool) -> str:
        return _equal(field, value, guard=negated)

    def ranged(self, field: FieldRef, op: str, bound: Scalar) -> str:
        return _range(field, op, bound)


_EXPRESSIONS: Final = _Expressions()


def to_expression(node: FilterNode) -> str:
    """One Milvus boolean expression for a parsed filter
    (:func:`ditto_worker.memory.filters.parse_filter`), with the filter language's
    semantics (module docstring). Every sub-expression is parenthesized."""
    return translate(node, _EXPRESSIONS)
