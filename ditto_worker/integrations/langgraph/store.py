"""``DittoStore``: LangGraph's ``BaseStore`` over the MEMORY nodes of a runtime.

Every operation is one or a few node calls through :meth:`Runtime.invoke
<ditto_worker.runtime.Runtime.invoke>` under the trusted scope the host gave, so the same
object works embedded (``create_ditto``) and on a fleet (a broker in the config). Records
are laid out as :mod:`.records` says; the namespace tuple is data inside the scope.

Source: ``langgraph.store.base`` of langgraph-checkpoint 4.3 (``BaseStore.batch`` /
``abatch`` over ``GetOp``, ``PutOp``, ``SearchOp``, ``ListNamespacesOp``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path

from ditto_worker.contracts import MemoryItem
from ditto_worker.integrations.langgraph import records as rec
from ditto_worker.runtime import Runtime
from ditto_worker.scope import Scope

__all__ = ["AsyncDittoStore", "DittoStore", "NodeCallError"]

_PAGE: Final = 1000
"""QUERY page size while collecting a listing."""
_PUT_TRIES: Final = 8
"""Attempts of one put racing other puts and deletes of the same key or namespace."""


class NodeCallError(RuntimeError):
    """A failed node call: ``CODE: message`` (never content); ``code`` is the error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class DittoStore(BaseStore):
    """A LangGraph store whose items are records of one trusted scope's ``memory`` space.

    Args:
        runtime: from :func:`~ditto_worker.create_ditto` (embedded or fleet) with a
            MEMORY worker; with ``index``, its store embeds with
            :func:`~ditto_worker.integrations.langgraph.embedding_provider` of the same
            ``index`` (so record and query vectors are LangGraph's ``embed``).
        scope: the host's trusted tenant scope (``{"tenant": …, "user": …}``); a
            namespace can never change it.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``, default
            ``["$"]``): ``search(query=…)`` is then our vector SEARCH.

    Raises (from its methods):
        InvalidNamespaceError / ValueError: what LangGraph rejects, as LangGraph does;
            a node's ``INVALID_INPUT`` (over-deep JSON, lone surrogates, oversized
            values) as ``ValueError`` with our message.
        RuntimeError: any other failed node call (``CODE: message``).
        NotImplementedError: ``ttl=`` on ``put`` (``supports_ttl`` is ``False``).
    """

    supports_ttl: bool = False

    def __init__(
        self,
        runtime: Runtime,
        *,
        scope: Scope | Mapping[str, str] | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        self._runtime = runtime
        self._scope = scope
        self.index_config = index
        fields = (index or {}).get("fields") or ["$"]
        self._fields: list[str] = list(fields)
        self.ttl_config = None

    # --- node calls -----------------------------------------------------------------------

    def _call(self, node: str, input: dict[str, Any]) -> Any:
        result = self._runtime.invoke(node, input, scope=self._scope)
        if result.status == "success":
            return result.output
        error = result.error
        code = error.code if error is not None else result.status
        message = error.message if error is not None else result.status
        if code == "INVALID_INPUT":
            raise ValueError(message)
        raise NodeCallError(code, message)

    def _records(self, flt: dict[str, Any], order: str | None = None) -> Iterable[MemoryItem]:
        """Every record matching ``flt``, page by page (``order``: newest change first)."""
        cursor: str | None = None
        while True:
            input: dict[str, Any] = {"filter": flt, "limit": _PAGE}
            if order is not None:
                input["orderBy"] = [{"field": order, "direction": "desc"}]
            if cursor is not None:
                input["cursor"] = cursor
            page = self._call("MEMORY.QUERY", input)
            yield from page.items
            cursor = page.next_cursor
            if cursor is None:
                return

    # --- BaseStore ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; one result per op (``None`` for a put)."""
        ops = list(ops)
        for op in ops:  # the whole batch is refused before anything runs
            validate_op_namespace(op)
            if isinstance(op, SearchOp):
                rec.value_filter(op.filter)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (node calls block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # --- operations -----------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        found = self._call("MEMORY.GET", {"keys": [rec.item_key(op.namespace, op.key)]})
        return _item(found[0]) if found else None

    def _text(self, value: Mapping[str, Any], index: Any) -> str | None:
        """The text our store embeds for ``value`` (``None``: not indexed)."""
        if self.index_config is None or index is False:
            return None
        paths = self._fields if index is None else list(index)
        texts = [text for path in paths for text in get_text_at_path(value, path)]
        return "\n".join(texts) if texts else None

    def _put(self, op: PutOp) -> None:
        if op.value is None:
            self._delete(op.namespace, op.key)
            return
        if not isinstance(op.value, Mapping):
            raise ValueError("value must be a mapping (a JSON object) or None")
        for attempt in range(_PUT_TRIES):
            try:
                self._put_once(op)
                return
            except NodeCallError as exc:  # another put or delete of the key came first
                if exc.code not in ("CONFLICT", "NOT_FOUND") or attempt == _PUT_TRIES - 1:
                    raise

    def _put_once(self, op: PutOp) -> None:
        assert op.value is not None
        key = rec.item_key(op.namespace, op.key)
        marker = rec.namespace_key(op.namespace)
        text = self._text(op.value, op.index)
        metadata = rec.item_metadata(op.namespace, op.key, op.value, text is not None)
        held = {i.key: i for i in self._call("MEMORY.GET", {"keys": [key, marker]})}
        if key in held:
            entry = {"id": held[key].id, "content": text, "metadata": metadata}
            self._call("MEMORY.UPDATE", {"memories": [entry]})
            return
        drafts: list[dict[str, Any]] = [{"key": key, "content": text, "metadata": metadata}]
        if marker not in held:
            drafts.append({"key": marker, "content": None,
                           "metadata": rec.namespace_metadata(op.namespace)})  # fmt: skip
        self._call("MEMORY.WRITE", {"memories": drafts})

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        found = self._call("MEMORY.GET", {"keys": [rec.item_key(namespace, key)]})
        if not found:
            return
        self._call("MEMORY.DELETE", {"ids": [found[0].id]})
        exact = {"kind": rec.ITEM, **rec.prefix_filter(namespace), "nd": len(namespace)}
        left = self._call("MEMORY.QUERY", {"filter": exact, "limit": 1})
        if not left.items:  # the namespace is empty now: its marker goes too
            markers = self._call("MEMORY.GET", {"keys": [rec.namespace_key(namespace)]})
            if markers:
                self._call("MEMORY.DELETE", {"ids": [markers[0].id]})

    def _search(self, op: SearchOp) -> list[SearchItem]:
        ours, rest = rec.value_filter(op.filter)
        flt = {"kind": rec.ITEM, **rec.prefix_filter(op.namespace_prefix), **ours}
        if op.query and self.index_config is not None:
            return self._vector_search(op, flt, rest)
        kept: list[SearchItem] = []
        for record in self._records(flt, order="updatedAt"):
            if rec.residual_matches(record.metadata or {}, rest):
                kept.append(_search_item(record, None))
                if len(kept) >= op.offset + op.limit:
                    break
        return kept[op.offset :]

    def _vector_search(
        self, op: SearchOp, flt: dict[str, Any], rest: Sequence[tuple[str, Any]]
    ) -> list[SearchItem]:
        want = op.offset + op.limit
        hits = self._call("MEMORY.SEARCH", {"query": op.query, "strategy": "vector",
                                            "limit": max(want, 1), "filter": flt})  # fmt: skip
        ranked = [
            _search_item(h.memory, h.score)
            for h in hits
            if rec.residual_matches(h.memory.metadata or {}, rest)
        ][op.offset : want]
        if len(ranked) < op.limit:  # LangGraph fills up with items that have no vector
            for record in self._records({**flt, "ix": False}, order="updatedAt"):
                if rec.residual_matches(record.metadata or {}, rest):
                    ranked.append(_search_item(record, None))
                    if len(ranked) >= op.limit:
                        break
        return ranked

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        flt: dict[str, Any] = {"kind": rec.NAMESPACE}
        depth = 0
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                part = rec.prefix_filter(condition.path, wildcards=True)
            else:
                part = rec.suffix_filter(condition.path)
            depth = max(depth, len(condition.path))
            flt.update({k: v for k, v in part.items() if k != "nd"})
        if depth:
            flt["nd"] = {"$gte": depth}
        found: set[tuple[str, ...]] = set()
        for record in self._records(flt):
            namespace = rec.namespace_of(record.metadata or {})
            found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        listed = sorted(found)
        return listed[op.offset : op.offset + op.limit]


def _item(record: MemoryItem) -> Item:
    metadata = record.metadata or {}
    return Item(value=metadata["v"], key=str(metadata["k"]), namespace=rec.namespace_of(metadata),
                created_at=rec.timestamp(record.created_at),
                updated_at=rec.timestamp(record.updated_at))  # fmt: skip


def _search_item(record: MemoryItem, score: float | None) -> SearchItem:
    item = _item(record)
    return SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                      created_at=item.created_at, updated_at=item.updated_at,
                      score=score)  # fmt: skip


class AsyncDittoStore(DittoStore):
    """:class:`DittoStore` for async hosts, as LangGraph's async stores behave: the sync
    methods called on the event loop's own thread raise ``asyncio.InvalidStateError``
    (they would block the loop); from other threads they work."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`DittoStore.batch`, refused on a running event loop's thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return super().batch(ops)
        raise asyncio.InvalidStateError(
            "Synchronous calls to AsyncDittoStore block the event loop: use the async "
            "methods, e.g. replace `store.get(...)` with `await store.aget(...)`"
        )

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`DittoStore.batch` in a worker thread."""
        return await asyncio.to_thread(super().batch, list(ops))
