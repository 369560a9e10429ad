"""Re-embedding a Milvus collection under a new embedding identity (MEM-RET-4).

A Milvus collection fixes its ``dense`` field's dims, and Milvus Lite cannot add a field,
so ``ditto-worker reindex`` (through :meth:`MilvusReembed.reembed_embeddings`) builds the
new identity's collection beside the live one and points the store's collection name at
it, as the Qdrant store does (:mod:`ditto_plugin_qdrant.reembed`):

* **Target:** ``<collection>_r<12 hex digits of the new identity>``: the new dims, the
  same properties (cursor secret included, so cursors stay valid) with the new identity
  and ``reindexOf`` (the live collection). The operation ledger (``<collection>_ops``) is
  named after the collection name and is not copied.
* **Copy passes:** every row is copied with its fields (the keyword ``sparse`` vector is
  computed again by the collection's BM25 function); a row the embed policy wants
  embedded gets the new identity's vector. A row whose target copy has the same update
  instant (``upd``) is skipped, so a rerun after a crash embeds only what is missing or
  changed; rows deleted from the live collection are deleted from the target. Passes
  repeat until one changes nothing (at most :data:`PASSES`).
* **Switch:** when the collection name is an alias (every collection reindexed once),
  ``alter_alias`` moves it atomically, a last pass carries over rows old-model processes
  wrote just before (their deletions in that instant are not), and the old collection
  is dropped. When it is a collection (made before its first reindex), it is dropped and
  the alias created right after (a call in between finds no collection; a rerun finishes
  a switch cut between the two). With ``collection_per_scope`` every scope's collection
  is reindexed, one after the other.

Until the switch the live collection keeps serving the old identity. Milvus has no
transaction: a process checks that its collection name still stands for the collection it
opened (one ``describe_collection``) before each embedding write and vector search, and
fails with ``EMBEDDING_MISMATCH`` when a reindex moved it to another identity; a write
racing the switch itself (between that check and its upsert) can still land in the old
collection and be lost with it, or fail on the new dims. Milvus Lite is one process per
file: stop the worker, run the reindex, start the worker with the new provider.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any, Final

from pymilvus import MilvusClient

from ditto_plugin_milvus.collection import MilvusCollection, Row
from ditto_plugin_milvus.connection import Connection
from ditto_plugin_milvus.expressions import quote
from ditto_plugin_milvus.rows import chunks, index_params, schema
from ditto_worker.dockit import finish_cut_switch, keep_target, switch
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import reembed_provider, sync_until_settled

__all__ = ["PASSES", "MilvusReembed"]

PASSES: Final = 5
"""Copy passes at most before the switch."""
_PROPERTY: Final = "ditto"
_BATCH_IDS: Final = 1000
_SKIP: Final = frozenset({"sparse", "dense", "dv"})


def _quoted(values: Sequence[str]) -> str:
    return "[" + ", ".join(quote(v) for v in values) + "]"


class _Collections:
    """The collection requests of a re-embedding (:class:`ditto_worker.dockit.
    AliasedCollections`) on the store's connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def exists(self, name: str) -> bool:
        return bool(self._conn.call(None, MilvusClient.has_collection, name))

    def recorded(self, name: str) -> Any:
        described = self._conn.call(None, MilvusClient.describe_collection, name)
        try:
            return json.loads(dict(described.get("properties") or {}).get(_PROPERTY, "null"))
        except ValueError:
            return None

    def drop(self, name: str) -> None:
        self._conn.call(None, MilvusClient.drop_collection, name)

    def alias(self, target: str, name: str, move: bool) -> None:
        request = MilvusClient.alter_alias if move else MilvusClient.create_alias
        self._conn.call(None, request, target, name)


class MilvusReembed(MilvusCollection):
    """``reembed_embeddings`` (module doc) over the store's collections."""

    def _embedded(self, metadata: Any) -> bool:
        raise NotImplementedError

    def _dense(
        self, records: Sequence[tuple[Any, Any]], wanted: Sequence[bool]
    ) -> list[list[float] | None]:
        raise NotImplementedError

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record into new collections of this store's identity and point
        the collection names at them (module doc; MEM-RET-4); resumable.

        Returns:
            The number of records embedded (0 when every collection already has this
            identity).

        Raises:
            MemoryError: ``INVALID_INPUT`` for a store without a provider or a
                ``batch_size`` below 1; ``EMBEDDING_MISMATCH`` for a collection not made
                by this store; ``EMBEDDING_UNAVAILABLE``; ``MEMORY_BACKEND_ERROR``.
        """
        embedder = reembed_provider(self._embedder, batch_size)
        digest = uuid.uuid5(uuid.NAMESPACE_OID, embedder.identity.to_json()).hex[:12]
        done = sum(
            self._reembed_one(name, f"{name}_r{digest}", batch_size) for name in self._names()
        )
        self._opened = {}
        return done

    # --- collections --------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._conn.call(None, fn, *args, **kwargs)

    def _names(self) -> list[str]:
        """The collection names this store uses (every scope's with
        ``collection_per_scope``)."""
        if not self.collection_per_scope:
            return [self.collection]
        pattern = re.compile(re.escape(self.collection) + "_[0-9a-f]{16}")
        found = set(self._call(MilvusClient.list_collections))
        found |= set(self._call(MilvusClient.list_aliases).get("aliases", []))
        return sorted(n for n in found if pattern.fullmatch(n))

    def _reembed_one(self, name: str, target: str, batch_size: int) -> int:
        """One collection name: copy, switch; the records embedded."""
        collections = _Collections(self._conn)
        if finish_cut_switch(collections, name, target):
            return 0  # nothing written yet: created with this identity on first use
        self._call(MilvusClient.load_collection, name)
        described = self._call(MilvusClient.describe_collection, name)
        source = str(described.get("collection_name") or name)
        recorded = collections.recorded(source)
        if not isinstance(recorded, dict) or "cursorSecret" not in recorded:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH,
                "this Milvus collection was not made by the ditto_worker Milvus store",
            )
        assert self._embedder is not None
        if recorded.get("embedding") == self._embedder.identity.to_json():
            return 0
        self._create_target(target, source, recorded)
        done = sync_until_settled(lambda: self._sync(source, target, batch_size), PASSES)

        def last_pass() -> int:
            return self._sync(source, target, batch_size, final=True)[1]

        return done + switch(collections, name, source, target, last_pass)

    def _create_target(self, target: str, source: str, recorded: dict[str, Any]) -> None:
        """The target collection (kept when a killed run made it from ``source``)."""
        if keep_target(_Collections(self._conn), target, source):
            self._call(MilvusClient.load_collection, target)
            return
        assert self._embedder is not None
        properties = dict(json.loads(self._properties()[_PROPERTY]))
        properties |= {"cursorSecret": recorded["cursorSecret"], "reindexOf": source}
        self._call(MilvusClient.create_collection, target, schema=schema(self._dims),
                   consistency_level="Strong",
                   properties={_PROPERTY: json.dumps(properties, sort_keys=True)})  # fmt: skip
        self._call(MilvusClient.create_index, target,
                   index_params(self._dims, self._vector_index), sync=False)  # fmt: skip
        self._call(MilvusClient.load_collection, target)

    # --- copy ---------------------------------------------------------------------------

    def _instants(self, name: str) -> dict[str, int]:
        rows = self._call(MilvusClient.query, name, filter='id != ""', output_fields=["id", "upd"])
        return {str(row["id"]): int(row["upd"]) for row in rows}

    def _sync(
        self, source: str, target: str, batch_size: int, final: bool = False
    ) -> tuple[bool, int]:
        """One copy pass; ``(changed anything, records embedded)``. ``final``: only rows
        the target lacks or holds as updated before, no deletion."""
        now, held = self._instants(source), self._instants(target)
        if final:
            stale = [i for i, upd in now.items() if held.get(i, -1) < upd]
        else:
            stale = [i for i, upd in now.items() if held.get(i) != upd]
        embedded = 0
        step = max(1, min(batch_size, _BATCH_IDS))
        for start in range(0, len(stale), step):
            embedded += self._copy(source, target, stale[start : start + step])
        gone = [] if final else [i for i in held if i not in now]
        for start in range(0, len(gone), _BATCH_IDS):
            part = gone[start : start + _BATCH_IDS]
            self._call(MilvusClient.delete, target, filter=f"id in {_quoted(part)}")
        return bool(stale or gone), embedded

    def _copy(self, source: str, target: str, ids: Sequence[str]) -> int:
        """Copy rows ``ids`` of ``source`` into ``target`` with the new identity's vectors."""
        fields = [f for f in self._fields() if f not in _SKIP]
        rows: list[Row] = [dict(r) for r in self._call(
            MilvusClient.query, source, filter=f"id in {_quoted(list(ids))}",
            output_fields=fields)]  # fmt: skip
        records = [(_value(r.get("content")), _value(r.get("metadata"))) for r in rows]
        dense = self._dense(records, [self._embedded(meta) for _, meta in records])
        assert self._dims is not None
        for row, vector in zip(rows, dense, strict=True):
            row["dv"] = vector is not None
            row["dense"] = vector if vector is not None else [1.0] + [0.0] * (self._dims - 1)
        for chunk in chunks(rows, self.max_message_bytes):
            self._call(MilvusClient.upsert, target, chunk)
        return sum(v is not None for v in dense)

    def _fields(self) -> list[str]:
        return [f.name for f in schema(self._dims).fields]


def _value(wrapped: Any) -> Any:
    """The value of a ``{"v": …}`` JSON field as read back (:mod:`.rows`)."""
    if isinstance(wrapped, str):
        wrapped = json.loads(wrapped)
    return wrapped.get("v") if isinstance(wrapped, dict) else None
