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

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ditto_worker.memory.filters import And, Exists, FieldRef, FilterNode, In, Or, Scalar

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
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_US: Final = -62135596800 * 1_000_000  # 0001-01-01T00:00:00Z
_MAX_US: Final = 253402300799 * 1_000_000 + 999_999  # 9999-12-31T23:59:59.999999Z
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


def iso(us: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of ``us`` microseconds since the epoch (UTC)."""
    t = _EPOCH + timedelta(microseconds=us)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
        f"{t.second:02d}.{t.microsecond:06d}Z"
    )


def field_hash(path: Sequence[str]) -> str:
    """The shadow-field name of a metadata path: ``p`` + 24 hex digits (BLAKE2b-96 of the
    path as a JSON list), safe in any expression whatever the key's characters."""
    text = json.dumps(list(path), ensure_ascii=False, separators=(",", ":"))
    return "p" + hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def _type_letter(value: Any) -> str:
    if value is None:
        return "z"
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int | float):
        return "n"
    if isinstance(value, str):
        return "s"
    return "a" if isinstance(value, list) else "o"


def _walk(obj: Mapping[str, Any], prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, value in obj.items():
        path = (*prefix, name)
        yield path, value
        if isinstance(value, dict):
            yield from _walk(value, path)


def shadow_fields(metadata: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The typed shadow fields of ``metadata``: ``{"ft", "fn", "fs", "fb"}``, each
    ``{hash: value}`` (module docstring); all four always present."""
    out: dict[str, dict[str, Any]] = {"ft": {}, "fn": {}, "fs": {}, "fb": {}}
    for path, value in _walk(metadata or {}, ()):
        h = field_hash(path)
        letter = _type_letter(value)
        out["ft"][h] = letter
        if letter in ("n", "s", "b"):
            out["f" + letter][h] = value
    return out


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


def _parse_us(text: str) -> int | None:
    """The microsecond ``text`` names when it is exactly a stored timestamp, else None."""
    try:
        t = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    delta = t - _EPOCH
    us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return us if iso(us) == text else None


def _first_us(bound: str, inclusive: bool) -> int | None:
    """The smallest µs whose timestamp is ``> bound`` (``>=`` when ``inclusive``), or None
    (timestamps have a fixed width: string order is time order, so bisection is exact)."""

    def after(us: int) -> bool:
        text = iso(us)
        return text >= bound if inclusive else text > bound

    if not after(_MAX_US):
        return None
    low, high = _MIN_US, _MAX_US
    while low < high:
        middle = (low + high) // 2
        if after(middle):
            high = middle
        else:
            low = middle + 1
    return low


_OPS: Final = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _time_range(column: str, op: str, bound: Scalar) -> str:
    if not isinstance(bound, str):
        return NOTHING  # a timestamp is a string: it never compares with a number
    us = _parse_us(bound)
    if us is not None:  # the usual case: the parser normalized the bound
        return f"{column} {_OPS[op]} {us}"
    first = _first_us(bound, inclusive=op in ("$gte", "$lt"))
    if op in ("$gt", "$gte"):
        return NOTHING if first is None else f"{column} >= {first}"
    return _ALL if first is None else f"{column} < {first}"


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
            us = _parse_us(value) if isinstance(value, str) else None
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


def to_expression(node: FilterNode) -> str:
    """One Milvus boolean expression for a parsed filter
    (:func:`ditto_worker.memory.filters.parse_filter`), with the filter language's
    semantics (module docstring). Every sub-expression is parenthesized."""
    if isinstance(node, And):
        return " and ".join(f"({to_expression(c)})" for c in node.children)
    if isinstance(node, Or):
        return " or ".join(f"({to_expression(c)})" for c in node.children)
    if isinstance(node, Exists):
        return _exists(node.field, node.exists)
    if isinstance(node, In):
        found = _in(node.field, node.values, guard=node.negate)
        return _not(found) if node.negate else found
    if node.op in ("$eq", "$ne"):
        equal = _equal(node.field, node.value, guard=node.op == "$ne")
        return equal if node.op == "$eq" else _not(equal)
    return _range(node.field, node.op, node.value)
