"""The Qdrant store's writing half: WRITE, UPDATE, DELETE, exactly-once records, reindex.

Every mutation is sent with ``wait=true`` in requests of :data:`~.points.CHUNK` points
(not atomic; exactly-once by execution id and by operation id,
:mod:`ditto_plugin_qdrant.executions`); a cancel seen before the first mutation request
commits nothing. In local mode the store's mutations run one at a time (the owning process
is the only writer), so an UPDATE's ``ifMetadata`` check and its write are atomic there;
on a server they are not (no compare-and-set), and the store does not declare
``conditional_update``. Semantics: :mod:`ditto_plugin_qdrant.store`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant import executions as ex
from ditto_plugin_qdrant.keywords import SPARSE_VECTOR, document_vector
from ditto_plugin_qdrant.payload import CREATED, MEMORY, memory_payload
from ditto_plugin_qdrant.points import Point, UpdatePlan, check_json, chunks, item_of
from ditto_plugin_qdrant.retention import QdrantRetention
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryDraft,
    MemoryItem,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import (
    Operation,
    condition_failed,
    metadata_holds,
    operation_of,
)
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.vectors import content_vectors

__all__ = ["QdrantWrites"]


def _new_point_id(ns: str, eid: str | None, op: Operation | None, index: int) -> str:
    """A WRITE's ``index``-th point id: from the operation id, else the execution id (a
    replay writes the same points), else random."""
    if op is not None:
        return ex.operation_point_id(ns, op.id, index)
    return ex.memory_point_id(ns, eid, index) if eid else str(uuid.uuid4())


class QdrantWrites(QdrantRetention):
    """WRITE, UPDATE, DELETE and ``reindex_embeddings`` over the collection."""

    def _embedded(self, metadata: Any) -> bool:
        if self._embedder is None:
            return False
        if self._embed_kinds is None:
            return True
        kind = metadata.get("kind") if isinstance(metadata, dict) else None
        return isinstance(kind, str) and kind in self._embed_kinds

    def _dense_vectors(self, contents: Sequence[Any]) -> list[list[float] | None]:
        if self._embedder is None or not contents:
            return [None] * len(contents)
        return content_vectors(self._embedder, contents)

    def _vectors(
        self, content: Any, dense: list[float] | None, key: str | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        sparse = document_vector(content, key)
        if sparse is not None:
            out[SPARSE_VECTOR] = sparse
        if dense is not None and self._dense is not None:
            out[self._dense] = dense
        return out

    def _replay(
        self, ns: str, eid: str | None, node: str, options: MemoryCallOptions | None,
        op: Operation | None = None,
    ) -> ex.Replay | None:  # fmt: skip
        """The earlier run of ``op`` (else of ``eid``), or ``None``."""
        if op is not None:
            record_id = ex.operation_record_id(ns, op.id)
            points = self._conn.call(options, QdrantClient.retrieve, self.collection, [record_id])
            payload = points[0].payload if points else None
            found = ex.operation_replay(payload, ns, op, self.retention)
            if found is not None:
                return found
        if not eid:
            return None
        record_id = ex.record_point_id(ns, eid)
        points = self._conn.call(options, QdrantClient.retrieve, self.collection, [record_id])
        return ex.replay_of(points[0].payload if points else None, ns, node)

    def _upsert(
        self, points: Sequence[models.PointStruct], options: MemoryCallOptions | None
    ) -> None:
        for chunk in chunks(points):
            try:
                self._conn.call(
                    options, QdrantClient.upsert, self.collection, list(chunk), wait=True,
                    check_cancel=False,
                )  # fmt: skip
            except MemoryError as exc:
                raise self._switched(exc) from exc

    def _record(
        self, ns: str, eid: str | None, node: str, output: Any,
        options: MemoryCallOptions | None, pending: bool = False, op: Operation | None = None,
    ) -> None:  # fmt: skip
        if op is not None:
            at = self.retention.clock()
            self._upsert([ex.operation_record(ns, op, output, pending, at)], options)
        if eid:
            self._upsert([ex.record_point(ns, eid, node, output, pending)], options)
        if not pending and self.retention.due():
            self._prune_batch(options)

    def _mutating(self) -> AbstractContextManager[Any]:
        """Local mode: this store's mutations one at a time (module docstring)."""
        return self._mutation_lock if self._conn.local else contextlib.nullcontext()

    def _start_mutation(self, options: MemoryCallOptions | None) -> None:
        """The last point where a cancel commits nothing (module docstring)."""
        token = options.cancel if options is not None else None
        if token is not None and token.cancelled:
            raise MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content/metadata that is not JSON; the embedding
                provider's errors (nothing written).
        """
        drafts = input.memories
        for i, draft in enumerate(drafts):
            check_json(draft.content, f"memories[{i}].content")
            check_json(draft.metadata, f"memories[{i}].metadata")
        seen: dict[str, int] = {}
        for i, draft in enumerate(drafts):
            if draft.key is not None and draft.key in seen:
                raise MemoryError(
                    ErrorCode.CONFLICT, f"memories[{i}].key repeats memories[{seen[draft.key]}].key"
                )
            if draft.key is not None:
                seen[draft.key] = i
        ns = self._begin(options, write=True)
        with self._mutating():
            return self._write(drafts, seen, ns, operation_of(options, "MEMORY.WRITE", input),
                               options)  # fmt: skip

    def _write(
        self, drafts: Sequence[MemoryDraft], seen: dict[str, int], ns: str,
        op: Operation | None, options: MemoryCallOptions | None,
    ) -> list[MemoryItem]:  # fmt: skip
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.WRITE", options, op)
        if replay is not None:
            return [MemoryItem.model_validate(item) for item in replay.output]
        ids = [_new_point_id(ns, eid, op, i) for i in range(len(drafts))]
        own = set(ids)
        for point in self._with_keys(ns, list(seen), options, ["key"]):
            if str(point.id) not in own:
                index = seen[point.payload["key"]]
                raise MemoryError(
                    ErrorCode.CONFLICT, f"memories[{index}].key already exists in the store"
                )
        embed = [i for i, d in enumerate(drafts) if self._embedded(d.metadata)]
        dense: list[list[float] | None] = [None] * len(drafts)
        for i, vector in zip(embed, self._dense_vectors([drafts[i].content for i in embed]),
                             strict=True):  # fmt: skip
            dense[i] = vector
        self._start_mutation(options)
        start = self._clock.take(len(drafts))
        points = [
            models.PointStruct(
                id=memory_id,
                vector=self._vectors(draft.content, dense[i], draft.key),
                payload=memory_payload(
                    ns,
                    memory_id,
                    draft.key,
                    draft.content,
                    draft.metadata,
                    start + i,
                    start + i,
                    None if op is None else op.id,
                ),  # fmt: skip
            )
            for i, (memory_id, draft) in enumerate(zip(ids, drafts, strict=True))
        ]
        self._upsert(points, options)
        items = [item_of(point.payload or {}) for point in points]
        self._record(ns, eid, "MEMORY.WRITE", [to_wire(i) for i in items], options, op=op)
        return items

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates (MEM-UPDATE-1): an omitted field keeps its value,
        ``metadata`` replaces the whole object, ``content: null`` is a value.

        Raises:
            MemoryError: ``NOT_FOUND`` (nothing applied) when an id does not exist in the
                call's scope; the embedding provider's errors (nothing applied).
        """
        entries = input.memories
        for i, entry in enumerate(entries):
            if entry.has_content:
                check_json(entry.content, f"memories[{i}].content")
            if entry.has_metadata:
                check_json(entry.metadata, f"memories[{i}].metadata")
        ns = self._begin(options, write=any(e.has_content for e in entries))
        with self._mutating():
            return self._update(entries, ns, operation_of(options, "MEMORY.UPDATE", input),
                                options)  # fmt: skip

    def _update(
        self, entries: Sequence[MemoryUpdateEntry], ns: str, op: Operation | None,
        options: MemoryCallOptions | None,
    ) -> list[MemoryItem]:  # fmt: skip
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.UPDATE", options, op)
        if replay is not None:
            return [MemoryItem.model_validate(item) for item in replay.output]
        found = self._retrieve(ns, [e.id for e in entries], options, vectors=True)
        for i, entry in enumerate(entries):
            if entry.id not in found:
                raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{i}]: no memory with this id")
            held = entry.if_metadata  # under _mutating(): local mode's only writer is here
            stored = found[entry.id].payload.get("metadata")
            if held is not None and not metadata_holds(stored, held):
                raise condition_failed(i)
        plans = [self._plan(entry, found[entry.id]) for entry in entries]
        fresh = iter(self._dense_vectors([plan.content for plan in plans if plan.embed]))
        self._start_mutation(options)
        now = self._clock.take(len(entries))
        points: list[models.PointStruct] = []
        items: list[MemoryItem] = []
        for i, plan in enumerate(plans):
            if plan.embed:
                plan.set_dense(self._dense, next(fresh))
            old = plan.point.payload
            payload = memory_payload(ns, old["id"], old.get("key"), plan.content, plan.metadata,
                                     int(old[CREATED]), now + i,
                                     None if op is None else op.id)  # fmt: skip
            points.append(models.PointStruct(id=plan.point.id, vector=plan.vectors,
                                             payload=payload))  # fmt: skip
            items.append(item_of(payload))
        self._upsert(points, options)
        self._record(ns, eid, "MEMORY.UPDATE", [to_wire(i) for i in items], options, op=op)
        return items

    def _plan(self, entry: MemoryUpdateEntry, point: Point) -> UpdatePlan:
        """The new content, metadata and vectors of one updated point (before embedding):
        new content gets a new keyword vector and, under the embed policy, a new dense
        one; a metadata change keeps the dense vector unless the policy now differs."""
        old = point.payload
        content = entry.content if entry.has_content else old.get("content")
        metadata = entry.metadata if entry.has_metadata else old.get("metadata")
        vectors = dict(point.vector) if isinstance(point.vector, dict) else {}
        if entry.has_content:
            vectors.pop(SPARSE_VECTOR, None)
            sparse = document_vector(content, old.get("key"))
            if sparse is not None:
                vectors[SPARSE_VECTOR] = sparse
        wanted = self._embedded(metadata)
        has_dense = self._dense is not None and self._dense in vectors
        if not wanted and self._dense is not None:
            vectors.pop(self._dense, None)
        embed = wanted and (entry.has_content or not has_dense)
        return UpdatePlan(point, vectors, content, metadata, embed)

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete the existing ids; returns only the ids deleted now, in request order;
        the keys of deleted records are free again (MEM-PY-12)."""
        ns = self._begin(options)
        with self._mutating():
            return self._delete(input, ns, operation_of(options, "MEMORY.DELETE", input), options)

    def _delete(
        self, input: MemoryDeleteInput, ns: str, op: Operation | None,
        options: MemoryCallOptions | None,
    ) -> MemoryDeleteOutput:  # fmt: skip
        ids = list(dict.fromkeys(input.ids))
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.DELETE", options, op)
        if replay is not None and not replay.pending:
            return MemoryDeleteOutput.model_validate(replay.output)
        if replay is not None:  # a copy of a run that died after its pending record
            output = MemoryDeleteOutput.model_validate(replay.output)
        else:
            found = self._retrieve(ns, ids, options)
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            self._start_mutation(options)
            self._record(ns, eid, "MEMORY.DELETE", to_wire(output), options, pending=True, op=op)
        for chunk in chunks(output.deleted):
            selector = models.PointIdsList(points=list(chunk))
            self._conn.call(
                options, QdrantClient.delete, self.collection, selector, wait=True,
                check_cancel=False,
            )  # fmt: skip
        self._record(ns, eid, "MEMORY.DELETE", to_wire(output), options, op=op)
        return output

    # --- maintenance --------------------------------------------------------------------------

    def reindex_embeddings(
        self, source_collection: str | None = None, batch_size: int = 256
    ) -> int:
        """Give a vector to every record the embed policy wants embedded and lacks one;
        explicit, never implicit (MEM-SEARCH-6, MEM-RET-4).

        Args:
            source_collection: first copy every memory of this collection of the same
                server/folder (payloads and keyword vectors, not its dense vectors) —
                the way to move to another model: a new collection, then this.
            batch_size: records per embedding batch.

        Returns:
            The number of records embedded (0 without an embedder).

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` / ``EMBEDDING_UNAVAILABLE``,
                ``MEMORY_BACKEND_ERROR``.
        """
        self._begin(None, write=True)
        if source_collection is not None:
            self._copy_from(source_collection, batch_size)
        if self._embedder is None or self._dense is None:
            return 0
        dense = self._dense
        lacking = models.Filter(
            must=[models.FieldCondition(key="rec", match=models.MatchValue(value=MEMORY))],
            must_not=[models.HasVectorCondition(has_vector=dense)],
        )
        done = 0
        points = [
            p for p in self._scroll_all(lacking, None) if self._embedded(p.payload["metadata"])
        ]
        for chunk in chunks(points, batch_size):
            vectors = self._dense_vectors([p.payload.get("content") for p in chunk])
            updates = [models.PointVectors(id=p.id, vector={dense: v})
                       for p, v in zip(chunk, vectors, strict=True) if v is not None]  # fmt: skip
            if updates:
                self._conn.call(
                    None, QdrantClient.update_vectors, self.collection, updates, wait=True
                )
            done += len(updates)
        return done

    def _copy_from(self, source: str, batch_size: int) -> None:
        offset: Any = None
        memories = models.Filter(
            must=[models.FieldCondition(key="rec", match=models.MatchValue(value=MEMORY))]
        )
        while True:
            points, offset = self._conn.call(
                None, QdrantClient.scroll, source, scroll_filter=memories, limit=batch_size,
                offset=offset, with_payload=True, with_vectors=[SPARSE_VECTOR],
            )  # fmt: skip
            copies = [
                models.PointStruct(
                    id=p.id,
                    vector={
                        k: v
                        for k, v in (p.vector if isinstance(p.vector, dict) else {}).items()
                        if k == SPARSE_VECTOR
                    },
                    payload=p.payload,
                )
                for p in points
            ]
            if copies:
                self._upsert(copies, None)
            if offset is None:
                return
