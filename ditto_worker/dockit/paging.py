"""Reads of a document store: QUERY pages over a stored instant, ranked candidates.

A document store (Qdrant, Milvus) orders QUERY by one stored instant, ``createdAt`` or
``updatedAt`` (:func:`time_order`), a tie broken by the record's sequence and id; its
cursor holds the last record's instant and id, signed with the collection's secret
(:meth:`TimeOrder.after`, :meth:`TimeOrder.next_cursor`). SEARCH's candidates are the
best ``limit`` by score, a tie run at the cut read whole (:func:`ranked`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from ditto_worker.contracts import MemoryQueryInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import (
    FilterNode,
    SortValue,
    decode_cursor,
    encode_cursor,
    parse_filter,
    parse_order_by,
    query_fingerprint,
)

__all__ = ["TIE_CAP", "After", "TimeOrder", "by_creation", "ranked", "time_order"]

TIE_CAP: Final = 10_000
"""Most records read past the cut to finish a tie run in score."""
T = TypeVar("T")
After = tuple[int, int, str]
"""A record's place in a time order: (±instant, sequence, id)."""


@dataclass(frozen=True)
class TimeOrder:
    """A QUERY request ordered by one stored instant (:func:`time_order`)."""

    node: FilterNode | None
    """The parsed filter (``None``: every record)."""
    field: str
    """``createdAt`` or ``updatedAt``."""
    desc: bool
    fingerprint: str

    def key(self, instant: int, seq: int, record_id: str) -> After:
        """The sort key of a record: ``(±instant, seq, id)``."""
        return (-instant if self.desc else instant, seq, record_id)

    def after(self, cursor: str | None, secret: str, namespace: str) -> tuple[int, After] | None:
        """The cursor's ``(instant, place)``: records after ``place`` come next
        (``None`` without a cursor).

        Raises:
            MemoryError: ``INVALID_CURSOR``.
        """
        if not cursor:
            return None
        decoded = decode_cursor(cursor, self.fingerprint, 2, secret, namespace=namespace)
        (rank, value), (id_rank, last_id) = decoded.values
        if rank != 1 or id_rank != 2 or not isinstance(value, int):
            raise MemoryError(ErrorCode.INVALID_CURSOR, "invalid cursor: malformed")
        return value, self.key(value, decoded.seq, str(last_id))

    def next_cursor(
        self, instant: int, record_id: str, seq: int, secret: str, namespace: str
    ) -> str:
        """The signed cursor after the page's last record."""
        values: list[SortValue] = [(1, instant), (2, record_id)]
        return encode_cursor(self.fingerprint, values, seq, secret, namespace=namespace)


def time_order(input: MemoryQueryInput, store: str) -> TimeOrder:
    """Parse a QUERY request for a store that orders by one stored instant.

    Raises:
        MemoryError: ``UNSUPPORTED_FILTER`` (the shared parser's), ``UNSUPPORTED_ORDER_BY``
            for more than one term or a field other than ``createdAt``/``updatedAt``
            (naming ``store``, e.g. ``"Qdrant"``).
    """
    node = parse_filter(input.filter)
    terms = parse_order_by(input.order_by)
    if len(terms) > 1 or any(
        t.field.name not in ("createdAt", "updatedAt") or not t.field.reserved for t in terms
    ):
        raise MemoryError(
            ErrorCode.UNSUPPORTED_ORDER_BY,
            f"the {store} store orders by one field, createdAt or updatedAt",
        )
    field = "updatedAt" if terms and terms[0].field.name == "updatedAt" else "createdAt"
    desc = bool(terms) and terms[0].descending
    return TimeOrder(node, field, desc, query_fingerprint(input.filter, input.order_by))


def ranked(
    fetch: Callable[[int], list[T]],
    limit: int,
    score: Callable[[T], float],
    tiebreak: Callable[[T], tuple[int, str]],
    most: int | None = None,
) -> list[T]:
    """The best ``limit`` of ``fetch(n)`` (the best ``n`` by score, best first), ties in
    score by ``tiebreak``: a tie run at the cut is read whole (up to :data:`TIE_CAP`
    more, and never more than ``most`` at once)."""
    n = limit + 1 if most is None else min(limit + 1, most)
    while True:
        found = fetch(n)
        if len(found) < n or score(found[-1]) != score(found[limit - 1]):
            break
        if n > limit + TIE_CAP or (most is not None and n >= most):
            break
        n = n * 4 if most is None else min(n * 4, most)
    found.sort(key=lambda record: (-score(record), *tiebreak(record)))
    return found[:limit]


def by_creation(
    by_id: Mapping[str, T], by_key: Iterable[T], key: Callable[[T], tuple[int, str]]
) -> list[T]:
    """GET's answer: the records found by id, then those found by key not already there,
    each once, in creation order (``key``: sequence, id) (MEM-GET)."""
    found = dict(by_id)
    for record in by_key:
        found.setdefault(key(record)[1], record)
    return sorted(found.values(), key=key)
