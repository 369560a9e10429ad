"""Points of the Qdrant store: payload layout, typed shadow fields, filter translation.

A memory is one point whose id is the memory id (a UUID string). Its payload holds the
full record plus what filters and ordering need::

    {"rec": "memory", "ns": <namespace>,           # tenant scope (memory.scope)
     "id": <memory id>, "key": <key> (absent when none), "content": <any JSON>,
     "metadata": <object or null>,
     "createdAt": <ISO>, "updatedAt": <ISO>,          # ditto_worker.memory.filters format
     "seq": <int µs>, "updatedUs": <int µs>,          # the same instants as integers
     "ft": {h: type}, "fn": {h: number}, "fs": {h: string}, "fb": {h: bool}}

``seq`` is the creation instant in microseconds since the epoch, unique within one store
object (each record of a batch gets its own microsecond), so ``createdAt`` order is
``seq`` order; records of different processes may share a ``seq``, and then the point id
breaks the tie.

Typed shadow fields: Qdrant matches a condition against *every element* of an array, has
no float equality, treats ``null``, ``[]`` and a missing key alike in ``is_empty``, and
has no way to test a value's type. The filter language (MongoDB semantics, MEM-PY-5)
needs all of that exactly, so every metadata path (each nested object key, never into
arrays) is written once more under a hash of the path ``h``: its type letter in ``ft``
(``z`` null, ``n`` number, ``s`` string, ``b`` boolean, ``o`` object, ``a`` array) and
its value in ``fn``/``fs``/``fb`` for scalars. A filter is translated to Qdrant
conditions on those fields only, so ``{"tags": "a"}`` never matches ``["a", "b"]``,
``{"n": 5.0}`` matches ``5`` (a numeric range ``[5, 5]``), and ``{"n": null}`` matches a
``null`` or a missing ``n`` but not ``[]``.

Declared limits (:data:`ditto_plugin_qdrant.search.capabilities`): a range operator
with a string bound is ``UNSUPPORTED_FILTER`` on ``id``, ``key`` and metadata (Qdrant has
no lexicographic range); on ``createdAt``/``updatedAt`` it is exact: the shared parser
hands over the bound in the stored timestamp form, which is turned into the microsecond it
stands for (any other string is placed by a binary search over the fixed-width form).
Numbers are compared as IEEE doubles, so integers beyond 2**53 lose precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from qdrant_client import models

from ditto_worker.dockit import (
    field_hash,
    iso,
    shadow_fields,
    time_bound,
    time_value,
    translate,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import FieldRef, FilterNode, Scalar

__all__ = [
    "CREATED",
    "EXECUTION",
    "MEMORY",
    "NOTHING",
    "UPDATED",
    "field_hash",
    "iso",
    "memory_payload",
    "execution_namespace",
    "namespace_filter",
    "shadow_fields",
    "to_condition",
]

MEMORY: Final = "memory"
"""``rec`` of a memory point."""
EXECUTION: Final = "execution"
"""``rec`` of an execution record (:mod:`ditto_plugin_qdrant.executions`)."""
CREATED: Final = "seq"
"""Payload field of the creation instant (µs), the store's sequence."""
UPDATED: Final = "updatedUs"
"""Payload field of the last update instant (µs)."""
_TIME_FIELDS: Final = {"createdAt": CREATED, "updatedAt": UPDATED}
_MIN_US: Final = -62135596800 * 1_000_000  # 0001-01-01T00:00:00Z

NOTHING: Final = models.Filter(
    must=[models.FieldCondition(key=CREATED, range=models.Range(lt=_MIN_US - 1))]
)
"""A condition no memory point meets (its ``seq`` is never that small)."""
_ALL: Final = models.Filter()


def memory_payload(
    namespace: str,
    memory_id: str,
    key: str | None,
    content: Any,
    metadata: Mapping[str, Any] | None,
    created_us: int,
    updated_us: int,
    operation_id: str | None = None,
) -> dict[str, Any]:
    """The payload of one memory point (module docstring); ``op``: the operation id of the
    mutation that wrote it, when it had one."""
    payload: dict[str, Any] = {
        "rec": MEMORY,
        "ns": namespace,
        "id": memory_id,
        "content": content,
        "metadata": None if metadata is None else dict(metadata),
        "createdAt": iso(created_us),
        "updatedAt": iso(updated_us),
        CREATED: created_us,
        UPDATED: updated_us,
        **shadow_fields(metadata),
    }
    if key is not None:
        payload["key"] = key
    if operation_id is not None:
        payload["op"] = operation_id
    return payload


def execution_namespace(namespace: str) -> str:
    """The ``ns`` of the execution records of ``namespace``: ``!exec:<namespace>``. No
    scope's namespace starts with ``!`` (its parts are percent-encoded) and the unscoped
    one is ``""``, so one ``ns`` condition keeps memories and records apart."""
    return "!exec:" + namespace


def namespace_filter(namespace: str, node: FilterNode | None) -> models.Filter:
    """Memory points of ``namespace`` matching ``node`` (``None``: all of them).

    One condition on ``ns`` (execution records have their own, :func:`execution_namespace`):
    local mode evaluates every condition on every point, so each one counts.
    """
    must: list[models.Condition] = [
        models.FieldCondition(key="ns", match=models.MatchValue(value=namespace)),
    ]
    if node is not None:
        condition = to_condition(node)
        inner = condition.must if isinstance(condition, models.Filter) else None
        plain_and = (
            isinstance(condition, models.Filter)
            and condition.should is None
            and condition.must_not is None
            and condition.min_should is None
        )
        if plain_and and isinstance(inner, list):  # one level less for local mode per point
            must += inner
        else:
            must.append(condition)
    return models.Filter(must=must)


# --- translation --------------------------------------------------------------------------


def _match(key: str, value: str | bool) -> models.Condition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _empty(key: str) -> models.Condition:
    return models.IsEmptyCondition(is_empty=models.PayloadField(key=key))


def _present(key: str) -> models.Condition:
    return models.Filter(must_not=[_empty(key)])


def _not(condition: models.Condition) -> models.Condition:
    return models.Filter(must_not=[condition])


def _any(conditions: Sequence[models.Condition]) -> models.Condition:
    if not conditions:
        return NOTHING
    return conditions[0] if len(conditions) == 1 else models.Filter(should=list(conditions))


def _number(value: Scalar) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _string_range(field: FieldRef) -> MemoryError:
    return MemoryError(
        ErrorCode.UNSUPPORTED_FILTER,
        f"range filters with a string bound are not supported on {field.name[:60]!r} by the "
        "Qdrant store (only on createdAt/updatedAt)",
    )


def _time(key: str, op: str, bound: Scalar) -> models.Condition:
    found = time_bound(op, bound)
    if isinstance(found, bool):
        return _ALL if found else NOTHING
    return models.FieldCondition(key=key, range=models.Range(**{found[0][1:]: found[1]}))


def _range(field: FieldRef, op: str, bound: Scalar) -> models.Condition:
    if field.reserved and field.name in _TIME_FIELDS:
        return _time(_TIME_FIELDS[field.name], op, bound)
    if isinstance(bound, str):
        raise _string_range(field)
    if field.reserved or not _number(bound):
        return NOTHING  # id and key are strings: never in a numeric range
    limits: dict[str, Any] = {op[1:]: bound}
    return models.FieldCondition(key=f"fn.{field_hash(field.path)}", range=models.Range(**limits))


def _equal(field: FieldRef, value: Scalar) -> models.Condition:
    """Records whose field equals ``value`` (``null``: is null or missing)."""
    if field.reserved:
        if field.name in _TIME_FIELDS:
            us = time_value(value)
            if us is None:
                return NOTHING
            return models.FieldCondition(
                key=_TIME_FIELDS[field.name], range=models.Range(gte=us, lte=us)
            )
        if value is None:
            return _empty("key") if field.name == "key" else NOTHING
        return _match(field.name, value) if isinstance(value, str) else NOTHING
    h = field_hash(field.path)
    if value is None:
        return _any([_empty(f"ft.{h}"), _match(f"ft.{h}", "z")])
    if isinstance(value, bool):
        return _match(f"fb.{h}", value)
    if isinstance(value, str):
        return _match(f"fs.{h}", value)
    return models.FieldCondition(key=f"fn.{h}", range=models.Range(gte=value, lte=value))


def _in(field: FieldRef, values: Sequence[Scalar]) -> models.Condition:
    strings = [v for v in dict.fromkeys(values) if isinstance(v, str)]
    others = [_equal(field, v) for v in dict.fromkeys(values) if not isinstance(v, str)]
    if strings and field.reserved and field.name in ("id", "key"):
        others.append(models.FieldCondition(key=field.name, match=models.MatchAny(any=strings)))
    elif strings and not field.reserved:
        key = f"fs.{field_hash(field.path)}"
        others.append(models.FieldCondition(key=key, match=models.MatchAny(any=strings)))
    else:
        others += [_equal(field, v) for v in strings]
    return _any(others)


def _exists(field: FieldRef, exists: bool) -> models.Condition:
    if field.reserved and field.name != "key":
        return _ALL if exists else NOTHING  # id and the timestamps are always there
    key = "key" if field.reserved else f"ft.{field_hash(field.path)}"
    return _present(key) if exists else _empty(key)


def _merge_ranges(conditions: list[models.Condition]) -> list[models.Condition]:
    """AND-ed ranges on one key as one range (``{n: {$gte: 1, $lt: 5}}``): one condition
    less per point in local mode. Exact because every key ranged here (``fn.<h>``,
    ``seq``, ``updatedUs``) holds one number, never an array."""
    out: list[models.Condition] = []
    slots: dict[str, int] = {}  # key -> position in `out` of its (merged) range
    for condition in conditions:
        if isinstance(condition, models.FieldCondition) and isinstance(
            condition.range, models.Range
        ):
            bounds = condition.range.model_dump(exclude_none=True)
            slot = slots.get(condition.key)
            if slot is None:
                slots[condition.key] = len(out)
            else:
                kept = out[slot]
                assert isinstance(kept, models.FieldCondition) and kept.range is not None
                merged = kept.range.model_dump(exclude_none=True)
                if not set(merged) & set(bounds):
                    out[slot] = models.FieldCondition(
                        key=condition.key, range=models.Range(**merged, **bounds)
                    )
                    continue
        out.append(condition)
    return out


class _Conditions:
    """Qdrant's leaves and combinators of the shared translation
    (:class:`ditto_worker.dockit.ExpressionDialect`); Qdrant conditions are two-valued,
    so a negated leaf needs no guard."""

    def all_of(self, parts: list[models.Condition]) -> models.Condition:
        merged = _merge_ranges(parts)
        return merged[0] if len(merged) == 1 else models.Filter(must=merged)

    def any_of(self, parts: list[models.Condition]) -> models.Condition:
        return models.Filter(should=parts)

    def negate(self, part: models.Condition) -> models.Condition:
        return _not(part)

    def exists(self, field: FieldRef, exists: bool) -> models.Condition:
        return _exists(field, exists)

    def member(self, field: FieldRef, values: Sequence[Scalar], negated: bool) -> models.Condition:
        return _in(field, values)

    def equal(self, field: FieldRef, value: Scalar, negated: bool) -> models.Condition:
        return _equal(field, value)

    def ranged(self, field: FieldRef, op: str, bound: Scalar) -> models.Condition:
        return _range(field, op, bound)


_CONDITIONS: Final = _Conditions()


def to_condition(node: FilterNode) -> models.Condition:
    """One Qdrant condition for a parsed filter (:func:`ditto_worker.memory.filters.
    parse_filter`), with the filter language's semantics (module docstring).

    Raises:
        MemoryError: ``UNSUPPORTED_FILTER`` for a range with a string bound on ``id``,
            ``key`` or metadata.
    """
    return translate(node, _CONDITIONS)
