"""``InMemoryMemoryStore``: the reference MemoryStore + MemorySearchProvider.

Instance state only (no class-level dict), thread-safe (one lock), no I/O. It follows the
same rules as the SQLite plugin and serves as the oracle of the shared filter language
(:mod:`ditto_worker.memory.filters`): MEM-GET-2/5, MEM-QUERY-2/3/4, MEM-WRITE-2/3,
MEM-UPDATE-1/2/4, MEM-DELETE-2/3, MEM-SEARCH-1/2, MEM-PY-5/6/11/12.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities, transactional_capabilities
from ditto_worker.memory.cursors import new_cursor_secret
from ditto_worker.memory.filters import (
    compare_rows,
    decode_cursor,
    encode_cursor,
    matches,
    parse_filter,
    parse_order_by,
    query_fingerprint,
    timestamp_now,
)
from ditto_worker.memory.operations import (
    Operation,
    check_replay,
    condition_failed,
    metadata_holds,
    operation_of,
)
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.scope import namespace_of
from ditto_worker.testing._memory_records import (
    _bm25_scores,
    _check_cancel,
    _compare,
    _copy,
    _Record,
    _sort_values,
)

__all__ = ["InMemoryMemoryStore", "create_store"]

_DEFAULT_QUERY_LIMIT: Final = 100
_DEFAULT_SEARCH_LIMIT: Final = 10


class InMemoryMemoryStore:
    """The reference store: same behaviour as ``SqliteMemoryStore``, in process memory.

    Declared behaviour (:attr:`capabilities`): atomic batches (everything is checked
    before anything is applied; MEM-PY-11); unique keys (``CONFLICT``, nothing written);
    ``NOT_FOUND`` for UPDATE of a missing id (nothing applied); delete frees the key
    (MEM-PY-12); QUERY default order is creation order (``createdAt``, then a sequence;
    MEM-PY-6); keyset cursors bound to (filter, orderBy) and signed with a secret of
    this instance (:mod:`ditto_worker.memory.cursors`). A call whose
    ``options.cancel`` is already cancelled raises ``MEMORY_CANCELLED`` (calls are
    instantaneous, so there is nothing to interrupt). Returned items are copies.

    SEARCH strategy ``keyword`` (the default): the terms of
    :mod:`ditto_worker.memory.text` (the key, the content with its JSON field names),
    ``score`` = BM25 with the statistics of the call's scope alone
    (:func:`ditto_worker.memory.text.bm25`), as the SQLite store scores: a float > 0,
    **higher is better**; ties in sequence order; records without any query term are not
    returned.

    Scope (:mod:`ditto_worker.scope`): every operation sees only the records of
    ``options.scope``'s namespace; keys are unique per namespace.

    Operation ids and conditional updates (:mod:`ditto_worker.memory.operations`): a
    mutation with ``options.operation_id`` applies once per namespace (a ledger in this
    instance, kept as long as the instance); ``ifMetadata`` is checked under the store's
    lock with the write. Execution ids are not deduplicated here (the SQL and Qdrant stores
    do).
    """

    capabilities: ClassVar[StoreCapabilities] = transactional_capabilities(("keyword",))
    search_strategies: ClassVar[tuple[str, ...]] = capabilities.search_strategies

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: dict[int, _Record] = {}
        self._by_id: dict[str, int] = {}
        self._by_key: dict[tuple[str, str], int] = {}
        self._seq = 0
        self._latest: str | None = None
        self._cursor_secret = new_cursor_secret()  # this instance's cursors only
        self._operations: dict[tuple[str, str], tuple[str, str, Any]] = {}

    def __len__(self) -> int:
        return len(self._records)

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one memory, sorted (``""``: the unscoped one;
        :attr:`ditto_worker.scope.Scope.namespace` otherwise). An operator's listing for
        ``ditto-worker export --all-scopes``, never reached by a node call."""
        with self._lock:
            return sorted({record.namespace for record in self._records.values()})

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order."""
        _check_cancel(options)
        ns = namespace_of(options)
        with self._lock:
            seqs = {self._by_id[i] for i in input.ids or () if i in self._by_id}
            seqs = {seq for seq in seqs if self._records[seq].namespace == ns}
            seqs |= {self._by_key[ns, k] for k in input.keys or () if (ns, k) in self._by_key}
            return [self._records[seq].item() for seq in sorted(seqs)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records (``UNSUPPORTED_FILTER``,
        ``UNSUPPORTED_ORDER_BY``, ``INVALID_CURSOR`` as in :mod:`ditto_worker.memory.filters`)."""
        _check_cancel(options)
        node = parse_filter(input.filter)
        terms = parse_order_by(input.order_by)
        fingerprint = query_fingerprint(input.filter, input.order_by)
        secret = self._cursor_secret
        ns = namespace_of(options)
        cursor = (
            decode_cursor(input.cursor, fingerprint, len(terms), secret, namespace=ns)
            if input.cursor
            else None
        )
        limit = input.limit or _DEFAULT_QUERY_LIMIT
        with self._lock:
            rows = [
                (_sort_values(terms, record.view()), record.seq, record)
                for record in self._records.values()
                if record.namespace == ns and matches(node, record.view())
            ]
            compare = functools.partial(_compare, terms=terms)
            rows.sort(key=functools.cmp_to_key(compare))
            if cursor is not None:
                rows = [
                    r for r in rows if compare_rows(r[:2], (cursor.values, cursor.seq), terms) > 0
                ]
            page = rows[:limit]
            items = [record.item() for _, _, record in page]
        next_cursor = None
        if len(rows) > limit:
            next_cursor = encode_cursor(fingerprint, page[-1][0], page[-1][1], secret, namespace=ns)
        return MemoryQueryOutput(items=items, next_cursor=next_cursor)

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts atomically (``CONFLICT`` for a taken or repeated key)."""
        _check_cancel(options)
        drafts = [
            (
                d.key,
                _copy(d.content, f"memories[{i}].content"),
                _copy(d.metadata, f"memories[{i}].metadata"),
            )
            for i, d in enumerate(input.memories)
        ]
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.WRITE", input)
        with self._lock:
            replay = self._replay(ns, op)
            if replay is not None:
                return [MemoryItem.model_validate(item) for item in replay]
            seen: set[str] = set()
            for index, (key, _, _) in enumerate(drafts):
                if key is not None and (key in seen or (ns, key) in self._by_key):
                    raise MemoryError(ErrorCode.CONFLICT, f"memories[{index}].key is taken")
                if key is not None:
                    seen.add(key)
            now = self._latest = timestamp_now(self._latest)
            created = [
                self._insert(ns, key, content, metadata, now, op)
                for key, content, metadata in drafts
            ]
            items = [record.item() for record in created]
            self._remember(ns, op, [to_wire(item) for item in items])
            return items

    def _replay(self, ns: str, op: Operation | None) -> Any | None:
        """The committed output of ``op`` in ``ns`` (``CONFLICT`` for another input)."""
        found = None if op is None else self._operations.get((ns, op.id))
        if op is None or found is None:
            return None
        check_replay(op, found[0], found[1])
        return _copy(found[2], "output")

    def _remember(self, ns: str, op: Operation | None, output: Any) -> None:
        """Keep ``output`` (wire JSON) as the committed result of ``op`` in ``ns``."""
        if op is not None:
            self._operations[ns, op.id] = (op.node, op.digest, _copy(output, "output"))

    def _insert(
        self, ns: str, key: str | None, content: Any, metadata: Any, now: str,
        op: Operation | None,
    ) -> _Record:  # fmt: skip
        self._seq += 1
        record = _Record(self._seq, ns, uuid.uuid4().hex, key, content, metadata, now, now,
                         operation_id=None if op is None else op.id)  # fmt: skip
        record.index()
        self._records[record.seq] = record
        self._by_id[record.id] = record.seq
        if key is not None:
            self._by_key[ns, key] = record.seq
        return record

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Partial updates (MEM-UPDATE-1), atomically; ``NOT_FOUND`` applies nothing."""
        _check_cancel(options)
        changes = [
            (
                e.id,
                e.has_content,
                _copy(e.content, f"memories[{i}].content"),
                e.has_metadata,
                _copy(e.metadata, f"memories[{i}].metadata"),
            )
            for i, e in enumerate(input.memories)
        ]
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.UPDATE", input)
        with self._lock:
            replay = self._replay(ns, op)
            if replay is not None:
                return [MemoryItem.model_validate(item) for item in replay]
            for index, (change, entry) in enumerate(zip(changes, input.memories, strict=True)):
                seq = self._by_id.get(change[0])
                if seq is None or self._records[seq].namespace != ns:
                    raise MemoryError(
                        ErrorCode.NOT_FOUND, f"memories[{index}]: no memory with this id"
                    )
                held = self._records[seq].metadata
                if entry.if_metadata is not None and not metadata_holds(held, entry.if_metadata):
                    raise condition_failed(index)
            now = timestamp_now()
            updated = []
            for memory_id, has_content, content, has_metadata, metadata in changes:
                record = self._records[self._by_id[memory_id]]
                if has_content:
                    record.content = content
                    record.index()
                if has_metadata:
                    record.metadata = metadata
                record.updated_at = now
                record.operation_id = None if op is None else op.id
                updated.append(record.item())
            self._remember(ns, op, [to_wire(item) for item in updated])
            return updated

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids; only ids deleted now, in request order; frees keys."""
        _check_cancel(options)
        deleted: list[str] = []
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.DELETE", input)
        with self._lock:
            replay = self._replay(ns, op)
            if replay is not None:
                return MemoryDeleteOutput.model_validate(replay)
            for memory_id in dict.fromkeys(input.ids):
                seq = self._by_id.get(memory_id)
                if seq is None or self._records[seq].namespace != ns:
                    continue
                del self._by_id[memory_id]
                record = self._records.pop(seq)
                if record.key is not None:
                    del self._by_key[ns, record.key]
                deleted.append(memory_id)
            output = MemoryDeleteOutput(deleted=deleted)
            self._remember(ns, op, to_wire(output))
            return output

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> list[MemorySearchResult]:
        """Keyword term-overlap search (see the class docstring); filter before limit.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` unless strategy is ``None``/``keyword``;
                ``INVALID_INPUT`` when ``query`` is not a string; ``UNSUPPORTED_FILTER``.
        """
        _check_cancel(options)
        strategy = input.strategy or "keyword"
        if strategy not in self.search_strategies:
            raise MemoryError(ErrorCode.UNSUPPORTED_STRATEGY, "unsupported search strategy")
        if not isinstance(input.query, str):
            raise MemoryError(ErrorCode.INVALID_INPUT, "keyword search needs a text query")
        node = parse_filter(input.filter)
        ns = namespace_of(options)
        with self._lock:
            scope = [r for r in self._records.values() if r.namespace == ns and r.length]
            scored = [
                (score, r.seq, r)
                for r, score in _bm25_scores(input.query, scope).items()
                if matches(node, r.view())
            ]
            hits = sorted(scored, key=lambda s: (-s[0], s[1]))
            hits = hits[: input.limit or _DEFAULT_SEARCH_LIMIT]
            return [
                MemorySearchResult(
                    memory=record.item(),
                    score=float(score),
                    metadata={"strategy": strategy, "rank": position},
                )
                for position, (score, _, record) in enumerate(hits, start=1)
            ]


def create_store(
    settings: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> InMemoryMemoryStore:
    """Entry point ``memory`` of ``ditto_worker.stores``: a fresh, empty store.

    Args:
        settings: must be empty (the in-memory store has no settings).
        env: ignored.

    Raises:
        ConfigError: when ``settings`` has any key.
    """
    if settings:
        raise ConfigError(f"unknown memory store settings: {', '.join(map(str, settings))}")
    return InMemoryMemoryStore()
