"""The records of :class:`~ditto_worker.testing.memory_store.InMemoryMemoryStore` and
the helpers its operations share: JSON copies, the cancel check, BM25 over a scope, sort
keys. Private to the in-memory store.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import SortTerm, SortValue, compare_rows, field_value, sort_key
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.text import (
    bm25,
    bm25_idf,
    index_terms,
    keyword_text,
    query_terms,
    select_terms,
)

__all__: list[str] = []


def _copy(value: Any, where: str) -> Any:
    """A JSON round-trip copy (also rejects non-JSON values and NaN)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc


def _check_cancel(options: MemoryCallOptions | None) -> None:
    """``MEMORY_CANCELLED`` when the call's token is already cancelled (MEM-RUN-2)."""
    if options is not None and options.cancel is not None and options.cancel.cancelled:
        raise MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


@dataclass(eq=False)
class _Record:
    seq: int
    namespace: str
    id: str
    key: str | None
    content: Any
    metadata: dict[str, Any] | None
    created_at: str
    updated_at: str
    terms: Counter[str] = field(default_factory=Counter)
    length: int = 0
    operation_id: str | None = None

    def index(self) -> None:
        """Recount the record's keyword terms (:func:`ditto_worker.memory.text.index_terms`)."""
        terms = index_terms(keyword_text(self.content, self.key))
        self.terms, self.length = Counter(terms), len(terms)

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "metadata": self.metadata,
        }

    def item(self) -> MemoryItem:
        return MemoryItem(
            id=self.id,
            key=self.key,
            content=_copy(self.content, "content"),
            metadata=_copy(self.metadata, "metadata"),
            operation_id=self.operation_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )


def _bm25_scores(query: str, scope: list[_Record]) -> dict[_Record, float]:
    """BM25 of ``scope``'s records holding a term of ``query``, with the scope's own
    statistics (:func:`ditto_worker.memory.text.bm25`)."""
    wanted = query_terms(query)
    if not scope or not wanted:
        return {}
    frequencies: Counter[str] = Counter()
    for record in scope:
        frequencies.update(term for term in wanted if term in record.terms)
    chosen = select_terms(wanted, frequencies)
    idf = {term: bm25_idf(len(scope), frequencies[term]) for term in chosen}
    average = sum(record.length for record in scope) / len(scope)
    scores = {}
    for record in scope:
        counts = {term: record.terms[term] for term in chosen if term in record.terms}
        if counts:
            scores[record] = bm25(counts, record.length, idf, average)
    return scores


def _sort_values(terms: tuple[SortTerm, ...], view: Mapping[str, Any]) -> tuple[SortValue, ...]:
    return tuple(sort_key(field_value(term.field, view)) for term in terms)


def _compare(a: tuple[Any, ...], b: tuple[Any, ...], terms: tuple[SortTerm, ...]) -> int:
    return compare_rows((a[0], a[1]), (b[0], b[1]), terms)
