"""The node calls behind :class:`~ditto_worker.integrations.langgraph.DittoStore`: an item's
put and delete (with its extra-text records and its namespace marker), the TTL refresh of
items read, and the sweep of expired items. Record layout: :mod:`.records`.

Every call is :meth:`Runtime.invoke <ditto_worker.runtime.Runtime.invoke>` under the
host's trusted scope (embedded or fleet alike).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ditto_worker.contracts import MemoryItem
from ditto_worker.integrations.langgraph import records as rec
from ditto_worker.runtime import Runtime
from ditto_worker.scope import Scope

__all__ = ["NodeCallError", "Nodes"]

_PAGE: Final = 1000
"""QUERY page size while collecting a listing; ids per DELETE of a sweep."""


class NodeCallError(RuntimeError):
    """A failed node call: ``CODE: message`` (never content); ``code`` is the error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class Nodes:
    """The MEMORY node calls of one trusted scope of a runtime.

    Raises (from every method): ``ValueError`` for a node's ``INVALID_INPUT`` (our message),
    :class:`NodeCallError` for any other failed call.
    """

    def __init__(self, runtime: Runtime, scope: Scope | Mapping[str, str] | None) -> None:
        self.runtime = runtime
        self.scope = scope

    def call(self, node: str, input: dict[str, Any]) -> Any:
        """One node call; its output."""
        result = self.runtime.invoke(node, input, scope=self.scope)
        if result.status == "success":
            return result.output
        error = result.error
        code = error.code if error is not None else result.status
        message = error.message if error is not None else result.status
        if code == "INVALID_INPUT":
            raise ValueError(message)
        raise NodeCallError(code, message)

    def get(self, keys: Sequence[str]) -> dict[str, MemoryItem]:
        """The records with these keys, by key (missing ones absent)."""
        if not keys:
            return {}
        return {item.key: item for item in self.call("MEMORY.GET", {"keys": list(keys)})}

    def records(self, flt: dict[str, Any], order: str | None = None) -> Iterable[MemoryItem]:
        """Every record matching ``flt``, page by page (``order``: newest change first)."""
        cursor: str | None = None
        while True:
            input: dict[str, Any] = {"filter": flt, "limit": _PAGE}
            if order is not None:
                input["orderBy"] = [{"field": order, "direction": "desc"}]
            if cursor is not None:
                input["cursor"] = cursor
            page = self.call("MEMORY.QUERY", input)
            yield from page.items
            cursor = page.next_cursor
            if cursor is None:
                return

    def delete(self, ids: Sequence[str]) -> None:
        """Delete these records (``_PAGE`` ids per call)."""
        for start in range(0, len(ids), _PAGE):
            self.call("MEMORY.DELETE", {"ids": list(ids[start : start + _PAGE])})

    # --- items ----------------------------------------------------------------------------

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        texts: Sequence[str],
        ttl: float | None,
        now: float,
    ) -> None:
        """Write or replace one item: its record, one hidden record per text after the
        first, and the namespace marker if it has none (``CONFLICT``/``NOT_FOUND`` when
        another writer of the same key came first: the caller tries again)."""
        item_key = rec.item_key(namespace, key)
        marker = rec.namespace_key(namespace)
        extra = [rec.vector_key(namespace, key, i) for i in range(1, len(texts))]
        metadata = rec.item_metadata(namespace, key, value, len(texts), ttl, now)
        held = self.get([item_key, marker, *extra])
        old = held.get(item_key)
        stale: list[str] = []
        if old is not None:
            had = int((old.metadata or {}).get("nv", 0))
            stale = [rec.vector_key(namespace, key, i) for i in range(len(texts) or 1, had + 1)]
        entries: list[tuple[str, str | None, dict[str, Any]]] = [
            (item_key, texts[0] if texts else None, metadata)
        ]
        vector = rec.vector_metadata(metadata)
        entries += [(k, text, vector) for k, text in zip(extra, texts[1:], strict=True)]
        updates = [{"id": held[k].id, "content": c, "metadata": m}
                   for k, c, m in reversed(entries) if k in held]  # fmt: skip
        drafts = [{"key": k, "content": c, "metadata": m} for k, c, m in entries if k not in held]
        if marker not in held:
            drafts.append({"key": marker, "content": None,
                           "metadata": rec.namespace_metadata(namespace)})  # fmt: skip
        # the item record changes last, in one atomic call with the records of its texts:
        # a call failing part-way leaves the item as it was, never its new value without
        # its vectors (a new item: WRITE after the UPDATE; a replaced one: UPDATE after the
        # WRITE, the item record last in its batch)
        first, then = ("MEMORY.UPDATE", updates), ("MEMORY.WRITE", drafts)
        if old is not None:
            first, then = then, first
        for node, batch in (first, then):
            if batch:
                self.call(node, {"memories": batch})
        if stale:
            self.delete([item.id for item in self.get(stale).values()])

    def remove(self, namespace: tuple[str, ...], key: str) -> None:
        """Delete one item (with its hidden records; the marker when the namespace is
        left empty)."""
        found = self.get([rec.item_key(namespace, key)])
        if not found:
            return
        (record,) = found.values()
        extra = int((record.metadata or {}).get("nv", 0))
        hidden = self.get([rec.vector_key(namespace, key, i) for i in range(1, extra + 1)])
        self.delete([record.id, *(item.id for item in hidden.values())])
        self.drop_markers([namespace])

    def drop_markers(self, namespaces: Iterable[tuple[str, ...]]) -> None:
        """Delete the markers of those of ``namespaces`` that hold no item now."""
        empty: list[str] = []
        for namespace in set(namespaces):
            exact = {"kind": rec.ITEM, **rec.prefix_filter(namespace), "nd": len(namespace)}
            if not self.call("MEMORY.QUERY", {"filter": exact, "limit": 1}).items:
                empty.append(rec.namespace_key(namespace))
        self.delete([item.id for item in self.get(empty).values()])

    # --- TTL ------------------------------------------------------------------------------

    def refresh(self, records: Iterable[MemoryItem], now: float) -> None:
        """Restart the TTL of these item records (and their hidden records) at ``now``."""
        updates: list[dict[str, Any]] = []
        hidden: list[str] = []
        for record in records:
            metadata = dict(record.metadata or {})
            if "ttl" not in metadata:
                continue
            metadata["ex"] = rec.expiry(metadata["ttl"], now)
            updates.append({"id": record.id, "metadata": metadata})
            namespace = rec.namespace_of(metadata)
            hidden += [rec.vector_key(namespace, str(metadata["k"]), i)
                       for i in range(1, int(metadata.get("nv", 0)) + 1)]  # fmt: skip
        for item in self.get(hidden).values():
            metadata = dict(item.metadata or {})
            if "ttl" in metadata:
                metadata["ex"] = rec.expiry(metadata["ttl"], now)
                updates.append({"id": item.id, "metadata": metadata})
        if updates:
            self.call("MEMORY.UPDATE", {"memories": updates})

    def sweep(self, now: float) -> int:
        """Delete every item expired at ``now`` (with its hidden records, and the markers
        of namespaces left empty); how many items."""
        expired = {"kind": {"$in": [rec.ITEM, rec.VECTOR]}, "ex": {"$lte": now}}
        found = list(self.records(expired))
        self.delete([item.id for item in found])
        items = [item for item in found if (item.metadata or {}).get("kind") == rec.ITEM]
        self.drop_markers(rec.namespace_of(item.metadata or {}) for item in items)
        return len(items)
