"""``MilvusMemoryStore``: MemoryStore + native search over one Milvus collection (issue 27).

Built on the plugin kit, as the Qdrant store is: the shared filter parser (translated by
:mod:`ditto_plugin_milvus.expressions`), the shared signed cursors, the scope namespace,
the embedding port and ``search`` from :class:`~ditto_worker.memory.native.NativeSearch`
(``hybrid`` through the shared retrieval pipeline). Rows: :mod:`ditto_plugin_milvus.rows`;
collection and requests: :mod:`ditto_plugin_milvus.collection`; GET/QUERY/search:
:mod:`ditto_plugin_milvus.reads`; this module: WRITE/UPDATE/DELETE.

The collection (created on first use when missing, ``Strong`` consistency so a call reads
every write before it) records in its properties the embedding identity, the embed
policy, the keyword tokenizer and the cursor secret; another provider or policy fails
every call with ``EMBEDDING_MISMATCH``. A model change is ``ditto-worker reindex``
(:meth:`reembed_embeddings`, :mod:`ditto_plugin_milvus.reembed`): the new identity's
collection is built beside and the collection name becomes its alias.

Behaviour (declared in ``capabilities``):

* Every operation is confined to the call's namespace (``ns == …`` on every request).
* Keys: a WRITE whose key is taken (or repeated in the batch) is ``CONFLICT`` and writes
  nothing. Milvus has no unique constraint and no transaction, so the check is made twice:
  before inserting (nothing is written on a conflict seen then) and after (a writer that
  now sees another record holding one of its keys deletes its whole batch and reports
  ``CONFLICT``). Two writers racing on a key therefore never both keep it; both may fail,
  and a writer that dies between its insert and its second check leaves a duplicate
  (docs/stores-milvus.md).
* Batches are not atomic (``partial_commit``): rows are sent in requests of at most
  ``max_message_bytes``; a failure part-way leaves the requests already applied. An UPDATE
  is an upsert of whole rows: one racing with a DELETE of the same id can bring it back.
* Operation ids (MEM-RUN-7): a ledger beside the collection, a WRITE's ids taken from
  the operation, the id carried by the records, a ``pending`` entry a replay completes;
  the race Milvus leaves is in :mod:`ditto_plugin_milvus.operations`. A call without
  one is keyed by its execution id the same way (a redelivered call writes once). Conditional UPDATE
  (``ifMetadata``) is ``UNSUPPORTED``: Milvus has no compare-and-set.
* Cancel: a cancel seen before the first mutation request commits nothing; once started,
  a mutation is completed. Reads check the token before each request.
* QUERY: ``orderBy`` on ``createdAt`` or ``updatedAt`` (one term; metadata order is
  ``UNSUPPORTED_ORDER_BY``). Milvus's query has no order, so the matching rows' ids and
  instants from the cursor on are read and sorted here, then the page's records fetched.
* SEARCH: ``keyword`` (Milvus BM25 over the shared tokenizer's terms,
  :mod:`ditto_plugin_milvus.keywords`; its statistics are the collection's: the scope's
  own with ``collection_per_scope``, every scope's otherwise),
  ``vector`` (COSINE on ``dense``; exact with the ``FLAT`` index) and ``hybrid`` (shared
  pipeline). Ties in score are ordered by sequence; a tie run at the cut is read whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ditto_plugin_milvus.collection import Row
from ditto_plugin_milvus.expressions import CREATED, UPDATED, iso
from ditto_plugin_milvus.keywords import document_terms
from ditto_plugin_milvus.operations import execution_of, record_id
from ditto_plugin_milvus.reads import MilvusReads
from ditto_plugin_milvus.reembed import MilvusReembed
from ditto_plugin_milvus.retention import MilvusRetention
from ditto_plugin_milvus.rows import OUTPUT, item, memory_row, row_operation
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryItem,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, operation_of
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.text import embedding_text
from ditto_worker.memory.vectors import content_vectors

__all__ = ["MilvusMemoryStore"]


def _conflict(index: int, where: str) -> MemoryError:
    return MemoryError(ErrorCode.CONFLICT, f"memories[{index}].key {where}")


class MilvusMemoryStore(MilvusReads, MilvusRetention, MilvusReembed):
    """MemoryStore and native MemorySearchProvider on one Milvus collection.

    Args:
        uri: a Milvus server (``http(s)://host:19530``) or a Milvus Lite path ending in
            ``.db`` (one process at a time).
        token: the server's token (never logged nor put in an error).
        db_name: the Milvus database (``""``: default).
        collection: the collection name.
        timeout_s: longest wait for one gRPC call, seconds (a call's deadline may cut it).
        embedder: the embedding provider of WRITE/UPDATE and of ``vector``/``hybrid``;
            ``None``: keyword search only.
        embed_kinds: only records whose ``metadata.kind`` is one of these get a vector
            (``None``: every record with text).
        hybrid: ``hybrid`` pipeline settings (a ``RetrievalConfig`` or its mapping).
        vector_index: ``FLAT`` (exact, default) or ``HNSW``.
        max_message_bytes: largest insert/upsert request, bytes.
        collection_per_scope: one collection per namespace (``collection`` + ``_`` + a
            hash of it), so keyword statistics are the scope's own
            (``keyword_scope_statistics``); default one collection for every scope.
        index_fields: ``indexFields``: top-level metadata fields indexed with the content,
            for keyword and vector search (:mod:`ditto_worker.memory.indexing`); a
            collection keeps the fields it was made with (another list:
            ``EMBEDDING_MISMATCH``).

    Errors: ``MemoryError`` with ``UNSUPPORTED_ORDER_BY``, ``INVALID_CURSOR``, ``CONFLICT``,
    ``NOT_FOUND``, ``UNSUPPORTED_STRATEGY``, ``INVALID_INPUT``, ``MEMORY_CANCELLED``,
    ``MEMORY_TIMEOUT``, ``EMBEDDING_MISMATCH``, ``EMBEDDING_UNAVAILABLE`` or
    ``MEMORY_BACKEND_ERROR`` (safe messages).
    """

    def _embedded(self, metadata: Any) -> bool:
        if self._embedder is None:
            return False
        if self._embed_kinds is None:
            return True
        kind = metadata.get("kind") if isinstance(metadata, dict) else None
        return isinstance(kind, str) and kind in self._embed_kinds

    def _dense(
        self, records: Sequence[tuple[Any, Any]], wanted: Sequence[bool]
    ) -> list[list[float] | None]:
        """Vectors of the ``(content, metadata)`` records ``wanted``, made of
        :func:`~ditto_worker.memory.text.embedding_text` (``indexFields`` values first)."""
        out: list[list[float] | None] = [None] * len(records)
        chosen = [i for i, want in enumerate(wanted) if want]
        if self._embedder is None or not chosen:
            return out
        fields = self._index_fields

        def text_of(record: tuple[Any, Any]) -> str:
            return embedding_text(record[0], record[1], fields)

        vectors = content_vectors(self._embedder, [records[i] for i in chosen], text_of)
        for i, vector in zip(chosen, vectors, strict=True):
            out[i] = vector
        return out

    def _row(
        self,
        where: str,
        ns: str,
        memory_id: str,
        key: str | None,
        content: Any,
        metadata: Any,
        created: int,
        updated: int,
        dense: list[float] | None,
        op_id: str | None = None,
    ) -> Row:
        return memory_row(
            where,
            ns=ns,
            memory_id=memory_id,
            key=key,
            content=content,
            metadata=metadata,
            created_us=created,
            updated_us=updated,
            terms=document_terms(content, key, metadata, self._index_fields),
            dense=dense,
            dims=self._dims,
            operation_id=op_id,
        )

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts; one full item per draft, in order. With an operation id the
        records take their ids from it and a replay applies nothing (module docstring).

        Raises:
            MemoryError: ``CONFLICT`` for a taken or repeated key (module docstring), or
                an operation id used with another input; ``INVALID_INPUT`` for
                content/metadata over the JSON limit; the embedding provider's errors
                (nothing written).
        """
        drafts = input.memories
        seen: dict[str, int] = {}
        for i, draft in enumerate(drafts):
            if draft.key is not None and draft.key in seen:
                raise _conflict(i, f"repeats memories[{seen[draft.key]}].key")
            if draft.key is not None:
                seen[draft.key] = i
        ns = self._begin(options, write=True)
        op = operation_of(options, "MEMORY.WRITE", input)
        op_id = None if op is None else op.id
        key = op or execution_of(options, "MEMORY.WRITE")  # the ledger's: op, else execution
        ids = [str(uuid.uuid4()) if key is None else record_id(ns, key, i)
               for i in range(len(drafts))]  # fmt: skip
        rows = [
            self._row(
                f"memories[{i}]", ns, ids[i], d.key, d.content, d.metadata, 0, 0, None, op_id
            )  # fmt: skip
            for i, d in enumerate(drafts)
        ]  # sizes checked before any I/O
        entry = self._operation_entry(ns, key, options)
        if entry is not None and not entry.pending:  # done: the same result, nothing applied
            return [MemoryItem.model_validate(i) for i in entry.output]
        self._check_keys(ns, seen, set(ids), options)
        # records an earlier run of this call (its pending entry) wrote are kept as they
        # are; without an entry, a record of these ids is a forgotten run's: written over
        earlier = {} if entry is None else {r["id"]: r for r in self._rows_by(
            ns, "id", ids, options, ["id", CREATED, UPDATED])}  # fmt: skip
        written = set(earlier)
        todo = [i for i in range(len(drafts)) if ids[i] not in written]
        dense = self._dense([(drafts[i].content, drafts[i].metadata) for i in todo],
                            [self._embedded(drafts[i].metadata) for i in todo])  # fmt: skip
        self._start_mutation(options)
        self._record_operation(ns, key, None, options, pending=True)
        start = self._clock.take(len(todo))
        stamps = {k: (int(r[CREATED]), int(r[UPDATED])) for k, r in earlier.items()}
        for n, i in enumerate(todo):
            rows[i][CREATED] = rows[i]["upd"] = start + n
            stamps[ids[i]] = (start + n, start + n)
            if self._dims is not None and dense[n] is not None:
                rows[i]["dense"], rows[i]["dv"] = dense[n], True
        self._insert(ns, [rows[i] for i in todo], options)
        if seen:
            self._recheck_keys(ns, seen, ids, key, options)
        items = [
            MemoryItem(id=memory_id_, key=d.key, content=d.content, metadata=d.metadata,
                       operation_id=op_id, created_at=iso(stamps[memory_id_][0]),
                       updated_at=iso(stamps[memory_id_][1]))
            for memory_id_, d in zip(ids, drafts, strict=True)
        ]  # fmt: skip
        self._record_operation(ns, key, [to_wire(i) for i in items], options)
        return items

    def _check_keys(
        self, ns: str, seen: dict[str, int], own: set[str], options: MemoryCallOptions | None
    ) -> list[Row]:
        holders = self._rows_by(ns, "key", list(seen), options, ["id", "key", CREATED])
        for row in holders:
            if row["id"] not in own:
                raise _conflict(seen[row["key"]], "already exists in the store")
        return holders

    def _recheck_keys(
        self, ns: str, seen: dict[str, int], ids: list[str], op: Operation | None,
        options: MemoryCallOptions | None,
    ) -> None:  # fmt: skip
        """After the insert: another holder of one of the keys means a racing writer; this
        batch is deleted again (and its operation forgotten: nothing stays applied) and
        the WRITE is ``CONFLICT`` (module docstring)."""
        try:
            self._check_keys(ns, seen, set(ids), options)
        except MemoryError as exc:
            if exc.code == ErrorCode.CONFLICT:
                self._delete_ids(ns, ids, options)
                self._forget_operation(ns, op, options)
            raise

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates (MEM-UPDATE-1): an omitted field keeps its value,
        ``metadata`` replaces the whole object, ``content: null`` is a value. With an
        operation id a replay applies nothing (module docstring).

        Raises:
            MemoryError: ``UNSUPPORTED`` for an entry with ``ifMetadata`` (Milvus has no
                conditional write; nothing applied); ``NOT_FOUND`` (nothing applied) when
                an id does not exist in the call's scope; ``CONFLICT`` for an operation
                id used with another input; ``INVALID_INPUT`` for JSON over the limit;
                the embedding provider's errors (nothing applied).
        """
        entries = input.memories
        for i, entry in enumerate(entries):
            if entry.if_metadata is not None:
                raise MemoryError(
                    ErrorCode.UNSUPPORTED,
                    f"memories[{i}].ifMetadata: the Milvus store has no conditional update "
                    "(no compare-and-set in Milvus); nothing was applied",
                )
        ns = self._begin(options, write=any(e.has_content for e in entries))
        op = operation_of(options, "MEMORY.UPDATE", input)
        key = op or execution_of(options, "MEMORY.UPDATE")
        entry_ = self._operation_entry(ns, key, options)
        if entry_ is not None and not entry_.pending:  # done: no second update, same result
            return [MemoryItem.model_validate(i) for i in entry_.output]
        fields = [*OUTPUT, "dense", "dv"] if self._dims is not None else OUTPUT
        found = {
            r["id"]: r for r in self._rows_by(ns, "id", [e.id for e in entries], options, fields)
        }
        for i, entry in enumerate(entries):
            if entry.id not in found:
                raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{i}]: no memory with this id")
        op_id = None if op is None else op.id
        # an entry whose record already carries the operation id was applied by an earlier
        # run of this operation: kept as it is
        done = [op_id is not None and row_operation(found[e.id]) == op_id for e in entries]
        items = [
            item(found[e.id]) if applied else self._merged(e, found[e.id], op_id)
            for e, applied in zip(entries, done, strict=True)
        ]
        refresh = [
            not applied and self._needs_vector(e, found[e.id], m.metadata)
            for e, m, applied in zip(entries, items, done, strict=True)
        ]
        dense = self._dense([(m.content, m.metadata) for m in items], refresh)
        self._start_mutation(options)
        self._record_operation(ns, key, None, options, pending=True)
        now = self._clock.take(len(entries))
        rows: list[Row] = []
        for i, (memory, e) in enumerate(zip(items, entries, strict=True)):
            if done[i]:
                continue
            old = found[e.id]
            vector = dense[i] if refresh[i] else self._kept_vector(old, memory.metadata)
            rows.append(self._row(f"memories[{i}]", ns, memory.id, memory.key, memory.content,
                                  memory.metadata, int(old[CREATED]), now + i, vector,
                                  op_id))  # fmt: skip
            items[i] = memory.model_copy(update={"updated_at": iso(now + i)})
        self._insert(ns, rows, options)
        self._record_operation(ns, key, [to_wire(i) for i in items], options)
        return items

    def _merged(self, entry: MemoryUpdateEntry, row: Row, op_id: str | None) -> MemoryItem:
        old = item(row)
        return MemoryItem(
            id=old.id,
            key=old.key,
            content=entry.content if entry.has_content else old.content,
            metadata=entry.metadata if entry.has_metadata else old.metadata,
            operation_id=op_id,
            created_at=old.created_at,
        )

    def _needs_vector(self, entry: MemoryUpdateEntry, row: Row, metadata: Any) -> bool:
        """A fresh vector: wanted by the embed policy, and new content, new metadata whose
        ``indexFields`` values are part of the vector's text, or none kept."""
        changed = entry.has_content or (entry.has_metadata and bool(self._index_fields))
        return self._embedded(metadata) and (changed or not row.get("dv"))

    def _kept_vector(self, row: Row, metadata: Any) -> list[float] | None:
        if not self._embedded(metadata) or not row.get("dv"):
            return None
        return [float(x) for x in row["dense"]]

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete the existing ids; returns only the ids deleted now, in request order;
        the keys of deleted records are free again (MEM-PY-12). With an operation id a
        replay deletes nothing more and answers the ids the operation deleted."""
        ids = list(dict.fromkeys(input.ids))
        ns = self._begin(options)
        op = operation_of(options, "MEMORY.DELETE", input) or execution_of(options, "MEMORY.DELETE")
        entry = self._operation_entry(ns, op, options)
        if entry is not None and not entry.pending:
            return MemoryDeleteOutput.model_validate(entry.output)
        if entry is not None:  # a run that died after its pending entry: the same ids
            output = MemoryDeleteOutput.model_validate(entry.output)
            self._start_mutation(options)
        else:
            found = {r["id"] for r in self._rows_by(ns, "id", ids, options, ["id"])}
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            self._start_mutation(options)
            self._record_operation(ns, op, to_wire(output), options, pending=True)
        self._delete_ids(ns, output.deleted, options)
        self._record_operation(ns, op, to_wire(output), options)
        return output
