"""How a LangGraph item is kept as one of our records, and its filters as ours (no I/O).

A LangGraph item ``(namespace, key, value)`` is one record of the host's trusted scope,
``memory`` space (MEM-DATA-1), laid out as::

    key:      "lg:" + JSON [*namespace, key]        (unique per scope: GET by key)
    content:  the first text LangGraph would embed (IndexConfig fields), or null when
              the item is not indexed: what our vector search embeds
    metadata: {"kind": "lg-item", "ns": {"p0": label0, ...}, "sx": {"s0": last label, ...},
               "nd": depth, "k": key, "ix": indexed?, "v": value, "nv": extra vectors,
               ["ttl": minutes, "ex": expiry in Unix seconds]}

Each namespace in use has one more record, key ``"lgns:"`` + the namespace in an
order-keeping text (:func:`namespace_key`: code point order of the keys is LangGraph's
order of the tuples), metadata ``{"kind": "lg-ns", "ns": …, "sx": …, "nd": …}``, so
``list_namespaces`` reads namespaces, never items, in order: a range of marker keys
(:func:`marker_range`) sorted by ``key``, which every store's key index serves. The
namespace tuple is only data inside the scope: no label ever reaches the scope or the
space (MEM-SCOPE), so no namespace names another tenant.

LangGraph embeds every indexed text of an item on its own and scores the item by its best
text; so do we: texts 2…n of an item are hidden records of their own, key ``"lgv:" + JSON
[*namespace, key, "<i>"]``, content the text, metadata ``{"kind": "lg-vec", ns/sx/nd, "k",
"v", ["ttl", "ex"]}`` (the value rides along for filters). GET, QUERY and list never show them;
a vector search takes each item's best-scoring record.

An item with a TTL carries ``ttl`` (minutes) and ``ex`` (when it expires); reads skip
expired items (:func:`live_filter`, :func:`is_live`) and a sweep deletes them.

Filters: LangGraph's ``{"field": value}`` and ``{"field": {"$op": x}}`` on the value
become ours on ``v.field`` (``$eq $ne $gt $gte $lt $lte``); a nested object compares its
leaves; a list operand (which our filters do not compare) is checked here on the page.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

__all__ = [
    "ITEM",
    "NAMESPACE",
    "VECTOR",
    "after",
    "expiry",
    "is_live",
    "item_key",
    "item_metadata",
    "live_filter",
    "marker_range",
    "namespace_key",
    "namespace_metadata",
    "namespace_of",
    "prefix_filter",
    "residual_matches",
    "timestamp",
    "value_filter",
    "vector_key",
    "vector_metadata",
]

ITEM: Final = "lg-item"
NAMESPACE: Final = "lg-ns"
VECTOR: Final = "lg-vec"
_OPS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
_FILTER_KEY: Final = re.compile(r"^[a-zA-Z0-9_.-]+$")
"""Filter keys LangGraph's SQL stores accept (``langgraph.store.sqlite.base``)."""
_SAFE_INT: Final = 2**53


def _json(parts: Sequence[str]) -> str:
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def item_key(namespace: Sequence[str], key: str) -> str:
    """Our record key of LangGraph item ``key`` in ``namespace``."""
    return "lg:" + _json([*namespace, key])


def vector_key(namespace: Sequence[str], key: str, i: int) -> str:
    """Our record key of the ``i``-th extra text (1, 2, …) of item ``key``."""
    return "lgv:" + _json([*namespace, key, str(i)])


def _label(label: str) -> str:
    """``label`` then ``" "``; a character at or below ``"!"`` written ``"!"`` + 2 hex
    digits, so ``" "`` ends the label and sorts below all it holds, and code point order
    is kept: a label sorts before its extensions and before any greater label."""
    return "".join(f"!{ord(c):02X}" if c <= "!" else c for c in label) + " "


def namespace_key(namespace: Sequence[str]) -> str:
    """Our record key of the namespace marker of ``namespace``: the markers' keys in code
    point order are the namespaces in LangGraph's order (tuples compared label by label,
    a namespace before its extensions), and the keys of the namespaces starting with
    ``prefix`` are those starting with ``namespace_key(prefix)``."""
    return "lgns:" + "".join(_label(label) for label in namespace)


def after(text: str) -> str:
    """The least text greater than every text starting with ``text`` (non-empty)."""
    return text[:-1] + chr(ord(text[-1]) + 1)


def marker_range(prefix: Sequence[str]) -> dict[str, str]:
    """Our filter on ``key`` for the markers of the namespaces starting with ``prefix``
    (a key range in code point order, which the stores' key index serves: no item is
    read)."""
    low = namespace_key(prefix)
    return {"$gte": low, "$lt": after(low)}


def _labels(namespace: Sequence[str]) -> dict[str, Any]:
    return {
        "ns": {f"p{i}": label for i, label in enumerate(namespace)},
        "sx": {f"s{i}": label for i, label in enumerate(reversed(namespace))},
        "nd": len(namespace),
    }


def item_metadata(
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    texts: int,
    ttl: float | None = None,
    now: float = 0.0,
) -> dict[str, Any]:
    """The metadata of an item record with ``texts`` texts to embed (module docstring);
    with a ``ttl`` in minutes it expires ``ttl`` minutes after ``now`` (Unix seconds)."""
    metadata = {"kind": ITEM, **_labels(namespace), "k": key, "ix": texts > 0,
                "v": dict(value), "nv": max(texts - 1, 0)}  # fmt: skip
    if ttl is not None:
        metadata["ttl"] = ttl
        metadata["ex"] = expiry(ttl, now)
    return metadata


def vector_metadata(item: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of the extra-text records of an item whose metadata is ``item``."""
    keep = ("ns", "sx", "nd", "k", "v", "ttl", "ex")
    return {"kind": VECTOR, **{name: item[name] for name in keep if name in item}}


def expiry(ttl: float, now: float) -> float:
    """When an item with a TTL of ``ttl`` minutes, written or read at ``now``, expires.

    Raises:
        ValueError: ``ttl`` is not a number of minutes with a finite expiry ("ttl: …").
    """
    try:
        at = now + float(ttl) * 60.0
    except (TypeError, ValueError):
        raise ValueError(f"ttl: a number of minutes, not {type(ttl).__name__}") from None
    if not math.isfinite(at):
        raise ValueError("ttl: must be a finite number of minutes")
    return at


def live_filter(now: float) -> dict[str, Any]:
    """Our filter for records not expired at ``now`` (Unix seconds)."""
    return {"$or": [{"ex": {"$exists": False}}, {"ex": {"$gt": now}}]}


def is_live(metadata: Mapping[str, Any], now: float) -> bool:
    """Whether a record is not expired at ``now`` (as :func:`live_filter`)."""
    ex = metadata.get("ex")
    return not isinstance(ex, int | float) or ex > now


def namespace_metadata(namespace: Sequence[str]) -> dict[str, Any]:
    """The metadata of a namespace marker record."""
    return {"kind": NAMESPACE, **_labels(namespace)}


def namespace_of(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """The namespace tuple a record's metadata holds."""
    labels = metadata["ns"]
    return tuple(str(labels[f"p{i}"]) for i in range(int(metadata["nd"])))


def prefix_filter(prefix: Sequence[str]) -> dict[str, Any]:
    """Our filter for namespaces starting with ``prefix``."""
    flt: dict[str, Any] = {f"ns.p{i}": label for i, label in enumerate(prefix)}
    if prefix:
        flt["nd"] = {"$gte": len(prefix)}
    return flt


def value_filter(flt: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """LangGraph's value filter as ours on ``v.…``, plus the conditions our filters cannot
    express (list operands), to check on the records found (:func:`residual_matches`).

    Raises:
        ValueError: an operator LangGraph does not define.
    """
    ours: dict[str, Any] = {}
    rest: list[tuple[str, Any]] = []
    for field, operand in (flt or {}).items():
        if not _FILTER_KEY.match(str(field)):
            raise ValueError(
                f"Invalid filter key: '{field}'. Filter keys must contain only alphanumeric "
                "characters, underscores, dots, and hyphens."
            )
        _translate(f"v.{field}", operand, ours, rest)
    return ours, rest


def _translate(path: str, operand: Any, ours: dict[str, Any], rest: list[tuple[str, Any]]) -> None:
    if isinstance(operand, Mapping):
        if any(str(k).startswith("$") for k in operand):
            unknown = [k for k in operand if k not in _OPS]
            if unknown:
                raise ValueError(f"Unsupported operator: {unknown[0]}")
            if not all(_plain(v) for v in operand.values()):
                rest.append((path, operand))
            else:
                ours[path] = dict(operand)
            return
        for key, inner in operand.items():
            _translate(f"{path}.{key}", inner, ours, rest)
        return
    if not _plain(operand):
        rest.append((path, operand))
        return
    ours[path] = operand


def _plain(operand: Any) -> bool:
    """An operand our filters compare as LangGraph does: a string, a boolean, ``null`` or
    a finite number within ±2^53 (others are checked in Python: lists, NaN, ±inf, 10^100)."""
    if isinstance(operand, bool) or operand is None or isinstance(operand, str):
        return True
    if isinstance(operand, int):
        return abs(operand) <= _SAFE_INT
    return isinstance(operand, float) and math.isfinite(operand)


def residual_matches(metadata: Mapping[str, Any], rest: Sequence[tuple[str, Any]]) -> bool:
    """Whether a record passes the conditions :func:`value_filter` left to Python
    (LangGraph's own comparison: lists element by element)."""
    for path, operand in rest:
        value: Any = metadata
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if not _compare(value, operand):
            return False
    return True


def _compare(value: Any, operand: Any) -> bool:
    if isinstance(operand, Mapping):
        if any(str(k).startswith("$") for k in operand):
            return all(_apply(value, op, x) for op, x in operand.items())
        return isinstance(value, Mapping) and all(
            _compare(value.get(k), v) for k, v in operand.items()
        )
    if isinstance(operand, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(operand)
            and all(_compare(a, b) for a, b in zip(value, operand, strict=True))
        )
    return bool(value == operand)


def _apply(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right,
            "$lte": left <= right}[op]  # fmt: skip


def timestamp(text: str | None) -> datetime:
    """A record's ``createdAt``/``updatedAt`` (MEM-DATA-5) as an aware datetime."""
    if text is None:
        raise ValueError("the store returned a record without timestamps (MEM-DATA-5)")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
