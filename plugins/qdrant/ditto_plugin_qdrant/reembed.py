"""Re-embedding a Qdrant collection under a new embedding identity (MEM-RET-4).

A Qdrant collection fixes its named dense vectors when it is created, so ``ditto-worker
reindex`` (through :meth:`QdrantReembed.reembed_embeddings`) builds the new identity's
collection beside the live one and then points the store's collection name at it:

* **Target:** ``<collection>-<12 hex digits of the new identity>``, created with the new
  identity's dense vector, the same keyword vector, embed policy and cursor secret (so
  cursors stay valid), and ``reindexOf`` (the live collection) in its metadata.
* **Copy passes:** every point of the live collection (memories and the exactly-once
  records of executions and operations) is copied with its payload and keyword vector; a
  memory the embed policy wants embedded gets the new identity's vector. A point is
  skipped when the target already holds it as it is now (same payload): a rerun after a
  crash embeds only what is missing or changed since, and points deleted from the live
  collection are deleted from the target. Passes repeat until one changes nothing (at
  most :data:`PASSES`), so writes of old-model processes meanwhile are carried over.
* **Switch:** the store's collection name becomes an alias of the target. When it is an
  alias already (every collection reindexed once), Qdrant swaps it atomically
  (``update_collection_aliases``), a last pass carries over what old-model processes
  wrote just before, and the old collection is deleted. When it is a collection (made
  before its first reindex), that collection is deleted and the alias created right
  after (two requests: a call in between finds no collection; a rerun finishes a switch
  cut between them).

Until the switch, the live collection is untouched and keeps serving the old identity.
After it, an old-model process fails its vector searches and embedding writes (its
dense vector name does not exist in the target: ``MEMORY_BACKEND_ERROR``); a new-model
process that opened the collection before the switch reads the identity again at each
call while it mismatches, so it recovers by itself. Local mode is one process per
folder: stop the worker, run the reindex, start it with the new provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant.keywords import SPARSE_VECTOR
from ditto_plugin_qdrant.payload import MEMORY, UPDATED
from ditto_plugin_qdrant.points import Point, chunks, dense_name
from ditto_plugin_qdrant.writes import QdrantWrites
from ditto_worker.dockit import finish_cut_switch, keep_target, switch
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import reembed_provider, sync_until_settled

__all__ = ["PASSES", "QdrantReembed"]

PASSES: Final = 5
"""Copy passes at most before the switch (each after the first carries the changes
old-model processes made during the previous one)."""


class QdrantReembed(QdrantWrites):
    """``reembed_embeddings`` (module doc) over the store's collection."""

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record into a new collection of this store's identity and
        point the collection name at it (module doc; MEM-RET-4); resumable.

        Returns:
            The number of records embedded (0 when the collection already has this
            identity: then records lacking a vector are filled, as
            :meth:`reindex_embeddings` does).

        Raises:
            MemoryError: ``INVALID_INPUT`` for a store without a provider or a
                ``batch_size`` below 1; ``EMBEDDING_MISMATCH`` for a collection not made
                by this store; ``EMBEDDING_UNAVAILABLE``; ``MEMORY_BACKEND_ERROR``.
        """
        embedder = reembed_provider(self._embedder, batch_size)
        target = f"{self.collection}-{dense_name(embedder.identity).removeprefix('dense-')}"
        finish_cut_switch(_Collections(self), self.collection, target)
        self._ready = False
        self._open(None)
        if self._mismatch is None:
            return self.reindex_embeddings(batch_size=batch_size)
        source = self._physical()
        recorded = self._recorded(source)
        if not isinstance(recorded, dict) or "cursorSecret" not in recorded:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        self._create_target(target, source, str(recorded["cursorSecret"]))
        done = sync_until_settled(lambda: self._sync(source, target, batch_size), PASSES)

        def last_pass() -> int:
            return self._sync(source, target, batch_size, final=True)[1]

        done += switch(_Collections(self), self.collection, source, target, last_pass)
        self._ready = False
        self._open(None)
        return done

    # --- collections --------------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        found = self._conn.call(None, QdrantClient.get_aliases)
        return {a.alias_name: a.collection_name for a in found.aliases}

    def _physical(self) -> str:
        """The collection the store's name stands for (itself, or its alias's)."""
        return self._aliases().get(self.collection, self.collection)

    def _recorded(self, name: str) -> Any:
        return _Collections(self).recorded(name)

    def _create_target(self, target: str, source: str, secret: str) -> None:
        """The target collection (kept when a killed run made it for this identity)."""
        if keep_target(_Collections(self), target, source):
            return
        metadata = self._metadata()
        metadata["ditto"] |= {"cursorSecret": secret, "reindexOf": source}
        assert self._embedder is not None and self._dense is not None
        vectors = {
            self._dense: models.VectorParams(
                size=self._embedder.identity.dims, distance=models.Distance.COSINE
            )
        }
        sparse = {SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)}
        self._conn.call(None, QdrantClient.create_collection, target, vectors_config=vectors,
                        sparse_vectors_config=sparse, metadata=metadata)  # fmt: skip
        if not self.local:
            saved, self.collection = self.collection, target
            try:  # the payload indexes of the store's collection, on the target
                self._conn.call(None, lambda client: self._create_indexes(client))
            finally:
                self.collection = saved

    def _alias(self, target: str, delete: bool) -> None:
        """Make the collection name an alias of ``target`` (``delete``: moved from the
        collection it stands for, atomically)."""
        ops: list[Any] = []
        if delete:
            ops.append(models.DeleteAliasOperation(
                delete_alias=models.DeleteAlias(alias_name=self.collection)))  # fmt: skip
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=target, alias_name=self.collection)))  # fmt: skip
        self._conn.call(None, QdrantClient.update_collection_aliases, ops)

    # --- copy and switch ----------------------------------------------------------------

    def _sync(
        self, source: str, target: str, batch_size: int, final: bool = False
    ) -> tuple[bool, int]:
        """One copy pass; ``(changed anything, records embedded)``. ``final`` (after
        the switch, when new-model processes may write the target): only points the
        target lacks or holds in an older state, and no deletion."""
        offset: Any = None
        seen: set[str] = set()
        changed, embedded = False, 0
        while True:
            points, offset = self._conn.call(
                None, QdrantClient.scroll, source, limit=batch_size, offset=offset,
                with_payload=True, with_vectors=[SPARSE_VECTOR],
            )  # fmt: skip
            seen.update(str(p.id) for p in points)
            stale = self._stale(target, points, final)
            if stale:
                changed, embedded = True, embedded + self._copy(target, stale)
            if offset is None:
                break
        gone = [] if final else [pid for pid in self._ids(target) if pid not in seen]
        for chunk in chunks(gone):
            selector = models.PointIdsList(points=list(chunk))
            self._conn.call(None, QdrantClient.delete, target, selector, wait=True)
        return changed or bool(gone), embedded

    def _stale(self, target: str, points: Sequence[Point], final: bool) -> list[Point]:
        """The points of ``points`` the target does not hold as they are (``final``: that
        it lacks, or holds as updated before)."""
        if not points:
            return []
        held = self._conn.call(None, QdrantClient.retrieve, target, [p.id for p in points],
                               with_payload=True)  # fmt: skip
        copies: dict[str, Any] = {str(p.id): p.payload for p in held}
        if not final:
            return [p for p in points if copies.get(str(p.id)) != p.payload]
        return [p for p in points if _older(copies.get(str(p.id)), p.payload)]

    def _copy(self, target: str, points: Sequence[Point]) -> int:
        """Upsert ``points`` into the target, memories embedded by the policy."""
        wanted = [
            i for i, p in enumerate(points)
            if p.payload.get("rec") == MEMORY and self._embedded(p.payload.get("metadata"))
        ]  # fmt: skip
        dense = self._dense_vectors([points[i].payload.get("content") for i in wanted])
        fresh = dict(zip(wanted, dense, strict=True))
        copies = []
        for i, p in enumerate(points):
            vector = {k: v for k, v in (p.vector or {}).items() if k == SPARSE_VECTOR}
            if fresh.get(i) is not None and self._dense is not None:
                vector[self._dense] = fresh[i]
            copies.append(models.PointStruct(id=p.id, vector=vector, payload=p.payload))
        for chunk in chunks(copies):
            self._conn.call(None, QdrantClient.upsert, target, list(chunk), wait=True)
        return sum(v is not None for v in dense)

    def _ids(self, name: str) -> list[str]:
        out: list[str] = []
        offset: Any = None
        while True:
            points, offset = self._conn.call(
                None, QdrantClient.scroll, name, limit=1024, offset=offset,
                with_payload=False, with_vectors=False,
            )  # fmt: skip
            out += [str(p.id) for p in points]
            if offset is None:
                return out


class _Collections:
    """The collection requests of a re-embedding (:class:`ditto_worker.dockit.
    AliasedCollections`) on the store's connection."""

    def __init__(self, store: QdrantReembed) -> None:
        self._store = store
        self._conn = store._conn

    def exists(self, name: str) -> bool:
        return bool(self._conn.call(None, QdrantClient.collection_exists, name))

    def recorded(self, name: str) -> Any:
        info = self._conn.call(None, QdrantClient.get_collection, name)
        return dict(info.config.metadata or {}).get("ditto")

    def drop(self, name: str) -> None:
        self._conn.call(None, QdrantClient.delete_collection, name)

    def alias(self, target: str, name: str, move: bool) -> None:
        assert name == self._store.collection
        self._store._alias(target, delete=move)


def _older(held: Any, payload: Any) -> bool:
    """Whether the target's copy (``None``: none) was updated before ``payload``."""
    return held is None or int(held.get(UPDATED, 0)) < int(payload.get(UPDATED, 0))
