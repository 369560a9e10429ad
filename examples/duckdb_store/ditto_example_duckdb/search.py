"""The example store's native keyword search: BM25 over a terms table, per scope.

A record's keyword text (:func:`ditto_worker.memory.text.keyword_text`: key and content)
is cut into terms (:func:`~ditto_worker.memory.text.index_terms`), one row per distinct
term with its count in ``memory_terms``, and the record's term count in
``memories.terms``. A query's terms (:func:`~ditto_worker.memory.text.query_terms`, the
most selective kept) are looked up in the call's scope only, and each matching record
scored by :func:`~ditto_worker.memory.text.bm25` with the scope's statistics; results
best first, creation order breaking ties. ``score`` is positive, higher is better.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ditto_example_duckdb.dialect import DuckdbFilter
from ditto_worker.contracts import MemorySearchInput
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit, NativeSearch
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.text import (
    bm25,
    bm25_idf,
    index_terms,
    keyword_text,
    query_terms,
    select_terms,
)
from ditto_worker.sqlkit import compile_filter
from ditto_worker.sqlkit.records import COLUMNS, WIDTH, row_item

__all__ = ["KeywordSearch", "index_record"]


def index_record(cursor: Any, seq: int, namespace: str, key: str | None, content: Any) -> None:
    """(Re)write the terms of one record (its old ones removed first)."""
    terms = Counter(index_terms(keyword_text(content, key)))
    cursor.execute("DELETE FROM memory_terms WHERE seq = ?", [seq])
    if terms:
        cursor.executemany(
            "INSERT INTO memory_terms VALUES (?, ?, ?, ?)",
            [(namespace, seq, term, count) for term, count in terms.items()],
        )
    cursor.execute("UPDATE memories SET terms = ? WHERE seq = ?", [sum(terms.values()), seq])


class KeywordSearch(NativeSearch):
    """``keyword`` candidates for :class:`~ditto_worker.memory.native.NativeSearch`."""

    def _read(self, options: MemoryCallOptions | None) -> Any:
        raise NotImplementedError

    def _check_identity(self) -> None:
        """No vectors: nothing to check."""

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        wanted = query_terms(query)
        if not wanted:
            return []
        ns = namespace_of(options)
        where = compile_filter(DuckdbFilter(), parse_filter(input.filter))
        marks = ",".join("?" * len(wanted))
        with self._read(options) as cursor:
            found = cursor.execute(
                f"SELECT term, COUNT(*) FROM memory_terms WHERE namespace = ? AND term IN"
                f" ({marks}) GROUP BY term",
                [ns, *wanted],
            ).fetchall()
            terms = select_terms(wanted, dict(found))
            if not terms:
                return []
            records, average = cursor.execute(
                "SELECT COUNT(*), AVG(terms) FROM memories WHERE namespace = ?", [ns]
            ).fetchone()
            marks = ",".join("?" * len(terms))
            rows = cursor.execute(
                f"SELECT {COLUMNS}, m.terms, t.term, t.tf FROM memory_terms AS t"
                f" JOIN memories AS m ON m.seq = t.seq WHERE t.namespace = ? AND m.namespace"
                f" = ? AND t.term IN ({marks}) AND {where.text}",
                [ns, ns, *terms, *where.params],
            ).fetchall()
        frequency = dict(found)
        idf = {term: bm25_idf(int(records), int(frequency[term])) for term in terms}
        counts: dict[int, dict[str, int]] = {}
        by_seq: dict[int, Any] = {}
        for row in rows:
            by_seq[row[0]] = row
            counts.setdefault(row[0], {})[row[WIDTH + 1]] = int(row[WIDTH + 2])
        scored = [
            (bm25(counts[seq], int(row[WIDTH]), idf, float(average or 1.0)), seq)
            for seq, row in by_seq.items()
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [(row_item(by_seq[seq]), score) for score, seq in scored[:limit]]
