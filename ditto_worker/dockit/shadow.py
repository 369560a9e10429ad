"""Typed shadow fields, stored instants and the store clock of a document store.

A document store (Qdrant, Milvus) filters metadata through *typed shadow fields*: every
metadata path (each nested object key, never into arrays) is written once more under a
hash of the path ``h`` (:func:`field_hash`: ``p`` + 24 hex digits, safe in any payload
path or expression whatever the key's characters) — its type letter in ``ft`` (``z``
null, ``n`` number, ``s`` string, ``b`` boolean, ``o`` object, ``a`` array) and its value
in ``fn`` / ``fs`` / ``fb`` for scalars (:func:`shadow_fields`). A filter is translated
to conditions on those fields only, so ``{"tags": "a"}`` never matches ``["a", "b"]``,
``{"n": 5.0}`` matches ``5`` and ``{"n": null}`` matches a ``null`` or a missing ``n``
but not ``[]``.

``createdAt`` / ``updatedAt`` are stored as microseconds since the epoch beside their
fixed-width text (:func:`iso`); a filter bound on them is turned into the microsecond it
stands for (:func:`time_bound`, :func:`time_value`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ditto_worker.memory.filters import Scalar

__all__ = [
    "TIME_FIELDS",
    "Clock",
    "field_hash",
    "iso",
    "parse_us",
    "shadow_fields",
    "time_bound",
    "time_value",
]

TIME_FIELDS: Final = ("createdAt", "updatedAt")
"""The reserved fields stored as microsecond instants."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_US: Final = -62135596800 * 1_000_000  # 0001-01-01T00:00:00Z
_MAX_US: Final = 253402300799 * 1_000_000 + 999_999  # 9999-12-31T23:59:59.999999Z


def iso(us: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of ``us`` microseconds since the epoch (UTC)."""
    t = _EPOCH + timedelta(microseconds=us)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
        f"{t.second:02d}.{t.microsecond:06d}Z"
    )


def field_hash(path: Sequence[str]) -> str:
    """The shadow-field name of a metadata path: ``p`` + 24 hex digits (BLAKE2b-96 of the
    path as a JSON list)."""
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


def shadow_fields(
    metadata: Mapping[str, Any] | None, keep_empty: bool = False
) -> dict[str, dict[str, Any]]:
    """The typed shadow fields of ``metadata`` (module docstring): ``{"ft", "fn", "fs",
    "fb"}``, each ``{hash: value}``; empty maps left out unless ``keep_empty``."""
    out: dict[str, dict[str, Any]] = {"ft": {}, "fn": {}, "fs": {}, "fb": {}}
    for path, value in _walk(metadata or {}, ()):
        h = field_hash(path)
        letter = _type_letter(value)
        out["ft"][h] = letter
        if letter in ("n", "s", "b"):
            out["f" + letter][h] = value
    return out if keep_empty else {name: fields for name, fields in out.items() if fields}


def parse_us(text: str) -> int | None:
    """The microsecond ``text`` names when it is exactly a stored timestamp, else None."""
    try:
        t = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    delta = t - _EPOCH
    us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return us if iso(us) == text else None


def _first_us(bound: str, inclusive: bool) -> int | None:
    """The smallest µs whose timestamp is ``> bound`` (``>=`` when ``inclusive``), or None.

    Timestamps have a fixed width, so their string order is their time order and the
    predicate is monotone: a binary search over the representable range is exact.
    """

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


def time_bound(op: str, bound: Scalar) -> tuple[str, int] | bool:
    """A range ``op`` (``$gt``, ``$gte``, ``$lt``, ``$lte``) on a stored instant as
    ``(op, µs)``, or ``True`` (every record) / ``False`` (none).

    A bound in the stored timestamp form (what the shared parser hands over) keeps its
    operator; any other string is placed by a binary search over the fixed-width form
    (then ``$gte`` or ``$lt``); a number never compares with a timestamp (``False``).
    """
    if not isinstance(bound, str):
        return False
    us = parse_us(bound)
    if us is not None:  # the usual case: the parser normalized the bound
        return (op, us)
    first = _first_us(bound, inclusive=op in ("$gte", "$lt"))
    if op in ("$gt", "$gte"):
        return False if first is None else ("$gte", first)
    return True if first is None else ("$lt", first)


def time_value(value: Scalar) -> int | None:
    """The microsecond an equality with a stored instant asks for (``None``: none)."""
    return parse_us(value) if isinstance(value, str) else None


class Clock:
    """Unique, increasing microsecond instants for one store object (its sequence)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def take(self, count: int) -> int:
        """The first of ``count`` consecutive unused instants (µs since the epoch)."""
        with self._lock:
            start = max(time.time_ns() // 1000, self._last + 1)
            self._last = start + max(count, 1) - 1
            return start
