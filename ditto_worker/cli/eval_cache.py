"""What the LoCoMo evaluation caches so that comparing settings is cheap (issue 38 item 1).

Every setting the leave-one-out grid compares searches the same store with the same
questions; only fusion, mention and context scoring differ. So:

* :class:`CachingEmbedder` embeds each distinct text once (and, with a file, once across
  runs: the turns of the six conversations are embedded once, ever, per model identity);
* :class:`MemoSource` answers each distinct store ``search`` once per conversation, and the
  context stage's neighbour QUERY (:func:`~ditto_worker.memory.search.scoring.neighbour_filter`:
  "these turns ±window of these sessions") from one in-memory listing of the conversation,
  read once through the store's own QUERY in its own default order. That QUERY differed per
  setting and per question, and converting its rows cost about a third of a grid run.

Both are for read-only evaluation: nothing may be written while they answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ditto_worker.contracts import (
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
)
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider, MemoryCallOptions

__all__ = ["CachingEmbedder", "MemoSource", "neighbour_ranges"]

_PAGE: Final = 1000


class CachingEmbedder:
    """An ``EmbeddingProvider`` that embeds each distinct text once (same identity).

    Args:
        inner: the provider embedding what is not cached yet.
        path: optional JSON file of earlier runs' vectors for ``inner``'s identity
            (read now if it exists, written by :meth:`save`); vectors of another identity
            in it are ignored, never mixed (MEM-RET-4).
    """

    def __init__(self, inner: EmbeddingProvider, path: str | Path | None = None) -> None:
        self.inner = inner
        self.path = Path(path) if path is not None else None
        self._vectors: dict[str, list[float]] = {}
        if self.path is not None and self.path.exists():
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            if stored.get("identity") == inner.identity.describe():
                self._vectors = stored.get("vectors", {})

    @property
    def identity(self) -> EmbeddingIdentity:
        """``inner``'s identity."""
        return self.inner.identity

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """``inner.embed`` of the texts not seen before (one call), the rest from the cache."""
        missing = list(dict.fromkeys(t for t in texts if self._key(t) not in self._vectors))
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self._vectors[self._key(text)] = vector
        return [self._vectors[self._key(text)] for text in texts]

    def save(self) -> None:
        """Write the cache to ``path`` (no-op without one)."""
        if self.path is not None:
            payload = {"identity": self.identity.describe(), "vectors": self._vectors}
            self.path.write_text(json.dumps(payload), encoding="utf-8")


def neighbour_ranges(where: Any) -> list[tuple[str, Any, str, float, float]] | None:
    """The ranges of a neighbour filter, ``[(group field, group, order field, low, high)]``,
    or ``None`` when ``where`` has another shape.

    The shape is exactly what :func:`~ditto_worker.memory.search.scoring.neighbour_filter`
    builds without a user filter: ``{"$or": [{group: {"$eq": g}, order: {"$gte": a,
    "$lte": b}}, …]}``.
    """
    if (
        not isinstance(where, Mapping)
        or set(where) != {"$or"}
        or not isinstance(where["$or"], list)
    ):
        return None
    ranges = []
    for part in where["$or"]:
        if not isinstance(part, Mapping) or len(part) != 2:
            return None
        (group_field, group), (order_field, order) = part.items()
        if not (isinstance(group, Mapping) and set(group) == {"$eq"}):
            return None
        if not (isinstance(order, Mapping) and set(order) == {"$gte", "$lte"}):
            return None
        ranges.append((group_field, group["$eq"], order_field, order["$gte"], order["$lte"]))
    return ranges


def _key(value: Any) -> Any:
    """A group value as a dict key: JSON equality (``True`` is not ``1``; ``1`` is ``1.0``)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return (type(value).__name__, json.dumps(value, sort_keys=True))
    return value


class MemoSource:
    """A store whose identical ``search`` calls are answered once and whose neighbour
    QUERYs (:func:`neighbour_ranges`) are answered from one listing of the store (read-only
    evaluation only: nothing is written meanwhile). Any other QUERY goes to the store,
    once per distinct input."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.embedder = store.embedder
        self.capabilities = store.capabilities
        self._answers: dict[tuple[str, str], Any] = {}
        self._listing: list[MemoryItem] | None = None
        self._places: dict[tuple[str, str], dict[Any, list[tuple[float, int]]]] = {}

    def _memo(self, kind: str, input: Any, call: Any) -> Any:
        key = (kind, input.model_dump_json())
        if key not in self._answers:
            self._answers[key] = call()
        return self._answers[key]

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult]:
        """The store's ``search``, once per distinct input."""
        answer: Sequence[MemorySearchResult] = self._memo(
            "search", input, lambda: list(self.store.search(input, options))
        )
        return answer

    def listing(self, options: MemoryCallOptions | None = None) -> list[MemoryItem]:
        """Every memory of the store in its default QUERY order (read once, paged)."""
        if self._listing is None:
            items: list[MemoryItem] = []
            cursor = None
            while True:
                page = self.store.query(MemoryQueryInput(limit=_PAGE, cursor=cursor), options)
                items.extend(page.items)
                cursor = page.next_cursor
                if not cursor:
                    break
            self._listing = items
        return self._listing

    def _members(self, group_field: str, order_field: str) -> dict[Any, list[tuple[float, int]]]:
        """{group value: [(order, place in :meth:`listing`)]} of the memories with both
        fields (the order a number, not a boolean), built once per pair of fields."""
        if (group_field, order_field) not in self._places:
            groups: dict[Any, list[tuple[float, int]]] = {}
            for place, item in enumerate(self._listing or []):
                metadata = item.metadata or {}
                group, order = metadata.get(group_field), metadata.get(order_field)
                if group is None or isinstance(order, bool) or not isinstance(order, int | float):
                    continue
                groups.setdefault(_key(group), []).append((float(order), place))
            self._places[group_field, order_field] = groups
        return self._places[group_field, order_field]

    def query(self, input: MemoryQueryInput, options: MemoryCallOptions | None = None) -> Any:
        """A neighbour QUERY (first page, no ``orderBy``) from :meth:`listing`, in the
        store's order; any other QUERY: the store's, once per distinct input."""
        ranges = neighbour_ranges(input.filter)
        if ranges is None or input.order_by or input.cursor:
            return self._memo("query", input, lambda: self.store.query(input, options))
        listing = self.listing(options)
        places: set[int] = set()
        for group_field, group, order_field, low, high in ranges:
            members = self._members(group_field, order_field).get(_key(group), [])
            places.update(place for order, place in members if low <= order <= high)
        found = [listing[place] for place in sorted(places)]
        limit = input.limit or _PAGE
        if len(found) > limit:  # a next page: the store's own cursor, never one made up here
            return self._memo("query", input, lambda: self.store.query(input, options))
        return MemoryQueryOutput(items=found)
