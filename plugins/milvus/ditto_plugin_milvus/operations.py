"""Operation ids on Milvus (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`), as
safe as a store without transactions allows.

**The ledger.** Beside each memory collection, a collection ``<name>_ops`` (created on the
first call with an operation id) keeps one entry per ``(namespace, operation id)``: the
node, the digest of the input, a state (``pending`` | ``done``) and the output as JSON
text in parts of at most :data:`PART_CHARS` characters (a VARCHAR holds 65,535 bytes).
Part ``i`` is the row ``uuid5(namespace, operation id, i)``; part 0 holds the state and
the number of parts and is written last, so an entry is read whole or as it was. Milvus
needs a vector field in every collection: each row carries a constant 2-dimensional
``v``. Each row carries ``at``, the retention's clock when it was written (epoch s): a
replay of an entry older than ``operationRetentionS`` is ``OPERATION_EXPIRED``, entries
older than twice that are pruned (:mod:`ditto_worker.memory.retention`,
:mod:`ditto_plugin_milvus.retention`). A ledger made before ``at`` existed keeps its
entries without expiry.

**The execution ledger.** A mutation without an operation id is keyed by its execution
id (:class:`Execution`: the Celery task id on the fleet) the same way, in
``<name>_exec``: a redelivered call finds its entry and applies nothing (a ``pending``
one is completed: a WRITE's records take their ids from the execution id,
:func:`record_id`), and entries are pruned after ``executionRetentionS``. Its records
carry no operation id, so a completed UPDATE re-applies its values (the same values).

**A mutation with an operation id** (:class:`MilvusOperations`):

1. reads the entry: ``done`` with the same node and input digest — applies nothing and
   returns the output; another node or digest — ``CONFLICT``, nothing applied;
2. checks its input as any call does (a ``CONFLICT`` or ``NOT_FOUND`` found now leaves
   no entry: the id may be used again);
3. writes the entry ``pending`` (a DELETE with the ids it is about to delete), then
   applies its rows, each carrying the id (``rows.row_operation``), then writes the entry
   ``done`` with the output.

A WRITE's records take their ids from the operation (:func:`memory_id`), so applying it
again writes the same records, never new ones; a replay that finds the entry ``pending``
(a run killed part-way) completes it: a WRITE writes the records that are missing, an
UPDATE the entries whose record does not carry the id yet, a DELETE deletes the ids its
entry lists. The entry is ``done`` only after every row of the batch was applied.

**What Milvus cannot give** (no transaction, no conditional write), documented in
docs/stores-milvus.md: two attempts of one operation that read the ledger before either
wrote its ``pending`` entry both apply (a WRITE writes the same records twice, by the same
ids; an UPDATE writes the same values twice; a DELETE may answer a shorter list); two
different inputs under one id at that moment may both succeed (the later rows and entry
win) instead of one ``CONFLICT``; a run killed after its ``pending`` entry and replayed
after another writer touched its records re-applies what that writer changed back
(an UPDATE entry whose record no longer carries the id) or re-creates a record deleted
meanwhile (a WRITE).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pymilvus import DataType, MilvusClient

from ditto_plugin_milvus.collection import IDS_PER_REQUEST, MilvusCollection, Row
from ditto_plugin_milvus.expressions import quote
from ditto_plugin_milvus.rows import MAX_KEY_BYTES, chunks
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, check_replay
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.retention import LedgerRetention, operation_expired

__all__ = [
    "EXECUTION_SUFFIX",
    "Execution",
    "LEDGER_SUFFIX",
    "PART_CHARS",
    "Entry",
    "MilvusOperations",
    "entry_of",
    "ledger_name",
    "execution_of",
    "ledger_rows",
    "memory_id",
    "part_id",
    "record_id",
]

LEDGER_SUFFIX: Final = "_ops"
"""The ledger of collection ``c`` is ``c + LEDGER_SUFFIX``."""
EXECUTION_SUFFIX: Final = "_exec"
"""The execution ledger of collection ``c`` is ``c + EXECUTION_SUFFIX``."""
PART_CHARS: Final = 60_000
"""Most characters of output JSON (ASCII) in one ledger row."""
_ID_NAMESPACE: Final = uuid.UUID("5b0f3c9e-7d1a-5e2b-8c4f-2a6d9e1b7c30")
_FIELDS: Final = ["id", "node", "digest", "state", "part", "parts", "out"]
_VECTOR: Final = [1.0, 0.0]


@dataclass(frozen=True)
class Execution(Operation):
    """The ledger key of a mutation without an operation id: its execution id (``id``),
    its node; ``digest`` is empty (a redelivered call is the same call)."""


def execution_of(options: MemoryCallOptions | None, node: str) -> Execution | None:
    """The :class:`Execution` of a call's execution id, or ``None`` without one."""
    eid = getattr(options, "execution_id", None)
    return Execution(str(eid), node, "") if eid else None


def ledger_name(collection: str, key: Operation | None = None) -> str:
    """The ledger collection of memory collection ``collection`` for ``key``'s kind."""
    return collection + (EXECUTION_SUFFIX if isinstance(key, Execution) else LEDGER_SUFFIX)


def memory_id(namespace: str, operation_id: str, index: int) -> str:
    """The id of the ``index``-th record written by operation ``operation_id``."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"memory\x00{namespace}\x00{operation_id}\x00{index}"))


def record_id(namespace: str, key: Operation, index: int) -> str:
    """The id of the ``index``-th record written under ``key`` (an operation's:
    :func:`memory_id`; an execution's: its own, never one of an operation)."""
    if isinstance(key, Execution):
        name = f"execution-memory\x00{namespace}\x00{key.id}\x00{index}"
        return str(uuid.uuid5(_ID_NAMESPACE, name))
    return memory_id(namespace, key.id, index)


def part_id(namespace: str, operation_id: str, part: int) -> str:
    """The ledger row of part ``part`` of ``operation_id``'s entry in ``namespace``."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"ledger\x00{namespace}\x00{operation_id}\x00{part}"))


@dataclass(frozen=True)
class Entry:
    """A ledger entry: the operation's node and input digest, whether it is still
    ``pending`` (a run that did not finish), and its output (JSON data; ``None`` for a
    pending WRITE or UPDATE)."""

    node: str
    digest: str
    pending: bool
    output: Any


def ledger_rows(
    namespace: str, op: Operation, output: Any, pending: bool, at: float | None = None
) -> list[Row]:
    """The rows of ``op``'s entry, part 0 (state and count) last; each with ``at``
    (epoch s) unless ``None`` (a ledger without the field)."""
    text = json.dumps(output, separators=(",", ":"), ensure_ascii=True)
    pieces = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)] or [""]
    rows = [
        {
            "id": part_id(namespace, op.id, part),
            "ns": namespace,
            "op": op.id,
            "node": op.node,
            "digest": op.digest,
            "state": "pending" if pending else "done",
            "part": part,
            "parts": len(pieces),
            "out": piece,
            "v": _VECTOR,
            **({} if at is None else {"at": at}),
        }
        for part, piece in enumerate(pieces)
    ]
    return [*rows[1:], rows[0]]


def entry_of(first: Row, rest: Sequence[Row]) -> Entry:
    """The entry of part 0 ``first`` and the other parts ``rest`` (any order)."""
    pieces = {int(row["part"]): str(row["out"]) for row in rest}
    pieces[0] = str(first["out"])
    text = "".join(pieces[i] for i in range(int(first["parts"])))
    return Entry(
        node=str(first["node"]),
        digest=str(first["digest"]),
        pending=first["state"] == "pending",
        output=json.loads(text),
    )


def _schema() -> Any:
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", DataType.VARCHAR, max_length=64, is_primary=True)
    s.add_field("ns", DataType.VARCHAR, max_length=MAX_KEY_BYTES)
    s.add_field("op", DataType.VARCHAR, max_length=1024)
    s.add_field("node", DataType.VARCHAR, max_length=32)
    s.add_field("digest", DataType.VARCHAR, max_length=64)
    s.add_field("state", DataType.VARCHAR, max_length=16)
    s.add_field("part", DataType.INT64)
    s.add_field("parts", DataType.INT64)
    s.add_field("out", DataType.VARCHAR, max_length=MAX_KEY_BYTES)
    s.add_field("v", DataType.FLOAT_VECTOR, dim=len(_VECTOR))
    s.add_field("at", DataType.DOUBLE)
    return s


def _setup(client: MilvusClient, name: str, timeout: float) -> bool:
    """Create (if missing) and load ledger ``name``; True when its rows carry ``at``."""
    if not client.has_collection(name, timeout=timeout):
        try:
            client.create_collection(
                name, schema=_schema(), consistency_level="Strong", timeout=timeout
            )
            params = MilvusClient.prepare_index_params()
            params.add_index("v", index_type="FLAT", metric_type="L2")
            client.create_index(name, params, timeout=timeout, sync=False)
        except Exception:  # another process created it first: use it
            if not client.has_collection(name, timeout=timeout):
                raise
    client.load_collection(name, timeout=timeout)
    fields = client.describe_collection(name, timeout=timeout).get("fields", [])
    return any(field.get("name") == "at" for field in fields)


class MilvusOperations(MilvusCollection):
    """The ledger side of :class:`~ditto_plugin_milvus.store.MilvusMemoryStore` (module
    docstring)."""

    @property
    def retention(self) -> LedgerRetention:
        """The ledgers' retention (:mod:`ditto_worker.memory.retention`; set by
        ``create_store`` from ``operationRetentionS`` and ``executionRetentionS``)."""
        found: LedgerRetention | None = self.__dict__.get("_retention")
        if found is None:
            found = self.__dict__.setdefault("_retention", LedgerRetention())
        return found

    @retention.setter
    def retention(self, value: LedgerRetention) -> None:
        self.__dict__["_retention"] = value

    def _ledger(
        self, ns: str, options: MemoryCallOptions | None, key: Operation | None = None
    ) -> tuple[str, bool]:
        """The ledger of namespace ``ns``'s collection for ``key``'s kind and whether it
        keeps ``at``, created and loaded once per connection generation."""
        name = ledger_name(self.name_of(ns), key)
        known = self._ledgers.get(name)
        if known is not None and known[0] == self._conn.generation:
            return name, known[1]
        with self._ready_lock:
            generation = self._conn.generation
            known = self._ledgers.get(name)
            if known is None or known[0] != generation:
                timed = self._conn.call(
                    options, lambda client, timeout: _setup(client, name, timeout)
                )
                known = self._ledgers[name] = (generation, bool(timed))
        return name, known[1]

    def _ledger_query(
        self, name: str, ids: Sequence[str], options: MemoryCallOptions | None,
        timed: bool = False,
    ) -> list[Row]:  # fmt: skip
        out: list[Row] = []
        fields = [*_FIELDS, "at"] if timed else _FIELDS
        for start in range(0, len(ids), IDS_PER_REQUEST):
            part = ", ".join(quote(i) for i in ids[start : start + IDS_PER_REQUEST])
            rows = self._conn.call(
                options, MilvusClient.query, name, filter=f"id in [{part}]", output_fields=fields
            )
            out += [dict(row) for row in rows]
        return out

    def _operation_entry(
        self, ns: str, op: Operation | None, options: MemoryCallOptions | None
    ) -> Entry | None:
        """``op``'s entry in its ledger, or ``None`` (no key, or not run yet).

        Raises:
            MemoryError: ``CONFLICT`` when the id was used by another node or input;
                ``OPERATION_EXPIRED`` when an operation's entry is past the window.
        """
        if op is None:
            return None
        name, timed = self._ledger(ns, options, op)
        found = self._ledger_query(name, [part_id(ns, op.id, 0)], options, timed)
        if not found:
            return None
        first = found[0]
        if isinstance(op, Execution):
            if first["node"] != op.node:
                raise MemoryError(
                    ErrorCode.CONFLICT,
                    f"this execution id was already used by {first['node']}; nothing was applied",
                )
        elif self.retention.expired(first.get("at")):
            raise operation_expired(self.retention.operation_s)
        check_replay(op, str(first["node"]), str(first["digest"]))
        others = [part_id(ns, op.id, p) for p in range(1, int(first["parts"]))]
        return entry_of(first, self._ledger_query(name, others, options) if others else [])

    def _record_operation(
        self,
        ns: str,
        op: Operation | None,
        output: Any,
        options: MemoryCallOptions | None,
        pending: bool = False,
    ) -> None:
        """Write ``op``'s entry (parts first, part 0 last; a no-op without ``op``)."""
        if op is None:
            return
        name, timed = self._ledger(ns, options, op)
        rows = ledger_rows(ns, op, output, pending, self.retention.clock() if timed else None)
        for chunk in chunks(rows[:-1], self.max_message_bytes):
            self._conn.call(options, MilvusClient.upsert, name, chunk, check_cancel=False)
        self._conn.call(options, MilvusClient.upsert, name, rows[-1:], check_cancel=False)

    def _forget_operation(
        self, ns: str, op: Operation | None, options: MemoryCallOptions | None
    ) -> None:
        """Remove ``op``'s pending entry after a failure that applied nothing (the id may
        be used again)."""
        if op is None:
            return
        name, _ = self._ledger(ns, options, op)
        expression = f"id in [{quote(part_id(ns, op.id, 0))}]"
        self._conn.call(options, MilvusClient.delete, name, filter=expression, check_cancel=False)
