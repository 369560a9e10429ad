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
import concurrent.futures
import threading
import time
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
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path

from ditto_worker.contracts import MemoryItem
from ditto_worker.integrations.langgraph import records as rec
from ditto_worker.integrations.langgraph.namespaces import list_namespaces
from ditto_worker.integrations.langgraph.writes import NodeCallError, Nodes
from ditto_worker.runtime import Runtime
from ditto_worker.scope import Scope

__all__ = ["AsyncDittoStore", "DittoStore", "NodeCallError"]

_PUT_TRIES: Final = 8
"""Attempts of one put racing other puts and deletes of the same key or namespace."""
_SEARCH_MAX: Final = 10_000
"""The largest SEARCH limit (MEM-ERR-1)."""


def _now() -> float:
    """The clock of TTLs: Unix seconds."""
    return time.time()


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
            ``["$"]``; ``text_fields`` as LangGraph's ``SqliteStore`` names them is read
            too): ``search(query=…)`` is then our vector SEARCH, one vector per indexed
            text, an item scored by its best text.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``sweep_interval_minutes`` in
            minutes, ``refresh_on_read``): expiry is data of the item; expired items are
            never returned (``omit_expired`` is always on) and :meth:`sweep_ttl` (or the
            sweeper, :meth:`start_ttl_sweeper`) deletes them. A read restarts an item's
            TTL as on LangGraph's SQL stores: only with ``refresh_on_read: True`` here,
            and then unless the call says ``refresh_ttl=False``.

    Raises (from its methods):
        InvalidNamespaceError / ValueError: what LangGraph rejects, as LangGraph does;
            a node's ``INVALID_INPUT`` (over-deep JSON, lone surrogates, oversized
            values) as ``ValueError`` with our message.
        NodeCallError: any other failed node call (``CODE: message``).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        runtime: Runtime,
        *,
        scope: Scope | Mapping[str, str] | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        self._nodes = Nodes(runtime, scope)
        self.index_config = index
        given: dict[str, Any] = dict(index or {})  # SqliteStore's names them text_fields
        fields = given.get("fields") or given.get("text_fields") or ["$"]
        self._fields: list[str] = [fields] if isinstance(fields, str) else list(fields)
        self.ttl_config = ttl
        self._refreshes = bool((ttl or {}).get("refresh_on_read", False))
        self._sweeper: tuple[threading.Event, concurrent.futures.Future[None]] | None = None

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

    # --- TTL ------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete the items expired now (their hidden records and emptied namespaces'
        markers too); how many items."""
        return self._nodes.sweep(_now())

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the ``TTLConfig``'s, else 5)
        in a daemon thread until :meth:`stop_ttl_sweeper`; a future done when it stops."""
        if self._sweeper is not None:
            return self._sweeper[1]
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get(
            "sweep_interval_minutes") or 5  # fmt: skip
        stop = threading.Event()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def loop() -> None:
            try:
                while not stop.wait(float(minutes) * 60.0):
                    try:
                        self.sweep_ttl()
                    except (NodeCallError, ValueError):  # a failed sweep: the next one retries
                        continue
            finally:
                done.set_result(None)

        threading.Thread(target=loop, name="ditto-lg-ttl-sweeper", daemon=True).start()
        self._sweeper = (stop, done)
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; whether it stopped within ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        stop, done = self._sweeper
        stop.set()
        try:
            done.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return False
        self._sweeper = None
        return True

    # --- operations -----------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        now = _now()
        found = self._nodes.get([rec.item_key(op.namespace, op.key)])
        if not found:
            return None
        (record,) = found.values()
        if not rec.is_live(record.metadata or {}, now):
            return None
        if op.refresh_ttl and self._refreshes:
            self._nodes.refresh([record], now)
        return _item(record)

    def _texts(self, value: Mapping[str, Any], index: Any) -> list[str]:
        """The texts LangGraph would embed for ``value``, each its own vector."""
        if self.index_config is None or index is False:
            return []
        paths = self._fields if index is None else list(index)
        return [text for path in paths for text in get_text_at_path(value, path)]

    def _put(self, op: PutOp) -> None:
        if op.value is None:
            self._nodes.remove(op.namespace, op.key)
            return
        if not isinstance(op.value, Mapping):
            raise ValueError("value must be a mapping (a JSON object) or None")
        texts = self._texts(op.value, op.index)
        for attempt in range(_PUT_TRIES):
            try:
                self._nodes.put(op.namespace, op.key, op.value, texts, op.ttl, _now())
                return
            except NodeCallError as exc:  # another put or delete of the key came first
                if exc.code not in ("CONFLICT", "NOT_FOUND") or attempt == _PUT_TRIES - 1:
                    raise

    def _search(self, op: SearchOp) -> list[SearchItem]:
        now = _now()
        ours, rest = rec.value_filter(op.filter)
        flt = {**rec.prefix_filter(op.namespace_prefix), **ours, **rec.live_filter(now)}
        if op.query and self.index_config is not None:
            found = self._vector_search(op, flt, rest)
        else:
            found = self._listed({**flt, "kind": rec.ITEM}, rest, op.offset + op.limit)
            found = found[op.offset :]
        if op.refresh_ttl and self._refreshes:
            self._nodes.refresh([record for record, _ in found], now)
        return [_search_item(record, score) for record, score in found]

    def _listed(
        self, flt: dict[str, Any], rest: Sequence[tuple[str, Any]], want: int
    ) -> list[tuple[MemoryItem, float | None]]:
        """Up to ``want`` records of ``flt`` passing ``rest``, newest change first."""
        kept: list[tuple[MemoryItem, float | None]] = []
        if want <= 0:
            return kept
        for record in self._nodes.records(flt, order="updatedAt"):
            if rec.residual_matches(record.metadata or {}, rest):
                kept.append((record, None))
                if len(kept) >= want:
                    break
        return kept

    def _vector_search(
        self, op: SearchOp, flt: dict[str, Any], rest: Sequence[tuple[str, Any]]
    ) -> list[tuple[MemoryItem, float | None]]:
        """The best ``op.limit`` items after ``op.offset`` by their best text's score, then
        items with no vector (``score=None``) as LangGraph fills a page."""
        want = op.offset + op.limit
        best = self._best_per_item(op.query or "", {**flt, "kind": {"$in": [rec.ITEM, rec.VECTOR]}},
                                   rest, want)  # fmt: skip
        ranked = best[op.offset : want]
        owners = self._nodes.get([rec.item_key(rec.namespace_of(r.metadata or {}),
                                               str((r.metadata or {})["k"]))
                                  for r, _ in ranked if _kind(r) == rec.VECTOR])  # fmt: skip
        found: list[tuple[MemoryItem, float | None]] = []
        for record, score in ranked:
            if _kind(record) == rec.VECTOR:
                metadata = record.metadata or {}
                owner = owners.get(rec.item_key(rec.namespace_of(metadata), str(metadata["k"])))
                if owner is None:  # deleted meanwhile
                    continue
                record = owner
            found.append((record, score))
        if len(found) < op.limit:  # LangGraph fills up with items that have no vector
            skip = max(op.offset - len(best), 0)
            more = self._listed({**flt, "kind": rec.ITEM, "ix": False}, rest,
                                skip + op.limit - len(found))  # fmt: skip
            found += more[skip:]
        return found

    def _best_per_item(
        self, query: str, flt: dict[str, Any], rest: Sequence[tuple[str, Any]], want: int
    ) -> list[tuple[MemoryItem, float | None]]:
        """SEARCH hits, one per item (its best-scoring record), best first, at least
        ``want`` of them when there are so many."""
        limit = min(max(want, 1), _SEARCH_MAX)
        while True:
            hits = self._nodes.call("MEMORY.SEARCH", {"query": query, "strategy": "vector",
                                                      "limit": limit, "filter": flt})  # fmt: skip
            best: dict[tuple[tuple[str, ...], str], tuple[MemoryItem, float | None]] = {}
            for hit in hits:
                metadata = hit.memory.metadata or {}
                if rec.residual_matches(metadata, rest):
                    ident = (rec.namespace_of(metadata), str(metadata["k"]))
                    best.setdefault(ident, (hit.memory, hit.score))
            if len(best) >= want or len(hits) < limit or limit >= _SEARCH_MAX:
                return list(best.values())
            limit = min(limit * 4, _SEARCH_MAX)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """Pages of namespace markers in order (:mod:`.namespaces`)."""
        return list_namespaces(self._nodes, op)


def _kind(record: MemoryItem) -> Any:
    return (record.metadata or {}).get("kind")


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
    (they would block the loop); from other threads they work. ``sweep_ttl`` and the
    sweeper's start and stop are coroutines, as on LangGraph's ``AsyncSqliteStore``."""

    _task: asyncio.Task[None] | None = None

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

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        """:meth:`DittoStore.sweep_ttl` in a worker thread."""
        return await asyncio.to_thread(super().sweep_ttl)

    async def start_ttl_sweeper(  # type: ignore[override]
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the ``TTLConfig``'s, else 5)
        on this event loop until :meth:`stop_ttl_sweeper`."""
        if self._task is not None and not self._task.done():
            return self._task
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get(
            "sweep_interval_minutes") or 5  # fmt: skip

        async def loop() -> None:
            while True:
                await asyncio.sleep(float(minutes) * 60.0)
                try:
                    await self.sweep_ttl()
                except (NodeCallError, ValueError):  # a failed sweep: the next one retries
                    continue

        self._task = asyncio.get_running_loop().create_task(loop())
        return self._task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Stop the sweeper; whether it stopped within ``timeout`` seconds."""
        task, self._task = self._task, None
        if task is None:
            return True
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)
