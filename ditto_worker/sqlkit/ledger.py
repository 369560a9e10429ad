"""The operation and execution ledgers of a SQL store: exactly-once mutations.

A mutation (WRITE, UPDATE, DELETE) claims its operation id (SPEC.md MEM-RUN-7,
:mod:`ditto_worker.memory.operations`) and then its execution id
(``MemoryCallOptions.execution_id``, issue 7) as its transaction's first statements
(:func:`claim_call`), applies its effect, and stores its output under both claims before
COMMIT (:func:`record_call`): effect and record commit together or not at all.

* First run: both claims are this transaction's; the output is returned and remembered.
* A replay whose first run committed: nothing is applied, the committed output is
  returned unchanged (an execution replay also answers a new operation id, which is
  recorded with it).
* A copy running while the first is in flight waits on the database's lock of the
  uncommitted claim (PostgreSQL, MySQL) or on the write lock (SQLite) until the first
  ends: its output if it committed, a fresh claim if it rolled back.
* An operation id used by another node or input, or an execution id used by another
  node: ``CONFLICT``, nothing applied.

The database's side is a :class:`LedgerDialect`: how to claim, read and store a row of
each ledger (tables, keys, JSON text, pruning of expired rows).

Retention (:mod:`ditto_worker.memory.retention`): an operation row older than the
dialect's :attr:`LedgerDialect.retention` window answers ``OPERATION_EXPIRED``;
:func:`record_call` prunes a bounded batch of forgotten rows at most once a minute, and
:func:`prune_ledgers` prunes them all in short transactions (``ditto-worker prune``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, check_replay, operation_of
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.retention import (
    BACKGROUND_BATCH,
    PRUNE_BATCH,
    LedgerRetention,
    PruneReport,
    operation_expired,
)
from ditto_worker.memory.scope import namespace_of

__all__ = [
    "DEFAULT_RETENTION_S",
    "LedgerDialect",
    "LedgerRow",
    "Mutation",
    "claim_call",
    "claim_execution",
    "claim_operation",
    "mutation",
    "prune_ledgers",
    "record_call",
]

DEFAULT_RETENTION_S: Final = 24 * 3600.0
"""How long a committed execution id is remembered, seconds
(``plugins.<store>.executionRetentionS``)."""

_CLAIM_ATTEMPTS: Final = 3


@dataclass(frozen=True)
class LedgerRow:
    """A ledger row as read: the node that claimed it, the input digest (operations
    only, else ``None``), the committed output as JSON data (``None`` only while
    the claiming transaction is uncommitted) and when it was claimed (epoch seconds;
    ``None`` when unknown)."""

    node: str
    digest: str | None
    output: Any | None
    claimed_at: float | None = None


class LedgerDialect(ABC):
    """One database's ledger statements; every method runs in the caller's transaction
    on ``conn`` (the driver's connection) and may raise the driver's errors (the
    caller's transaction maps them)."""

    store: str = "the SQL memory store"
    """The store's name in error messages (``the PostgreSQL memory store``)."""

    def __init__(self, retention: LedgerRetention | None = None) -> None:
        self.retention = retention or LedgerRetention()

    @property
    def retention(self) -> LedgerRetention:
        """The store's retention; its ``clock`` stamps operation rows (the defaults for
        a dialect made without one)."""
        found: LedgerRetention | None = self.__dict__.get("_retention")
        if found is None:
            found = self.__dict__.setdefault("_retention", LedgerRetention())
        return found

    @retention.setter
    def retention(self, value: LedgerRetention) -> None:
        self.__dict__["_retention"] = value

    @abstractmethod
    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:
        """Delete at most ``limit`` committed rows of ``table`` (``operations`` |
        ``executions``) made before ``before`` (epoch s), oldest first; the count."""

    @abstractmethod
    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:
        """Insert ``op``'s claim (id, node, digest) unless a row exists; True when this
        transaction now holds it."""

    @abstractmethod
    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:
        """The operation row, or ``None`` when there is none."""

    @abstractmethod
    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:
        """Store ``output`` (JSON data) in this transaction's claim of ``op``."""

    @abstractmethod
    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:
        """Insert the execution id's claim unless a row exists; True when held."""

    @abstractmethod
    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:
        """The execution row (``digest`` ``None``), or ``None`` when there is none."""

    @abstractmethod
    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip
        """Store ``output`` in this transaction's claim and prune rows older than
        ``retention_s`` seconds (a bounded batch)."""


def _cannot_claim(ledger: LedgerDialect, what: str) -> MemoryError:
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        f"{ledger.store} could not claim the {what}; nothing was applied",
    )


def claim_operation(
    ledger: LedgerDialect, conn: Any, op: Operation | None, namespace: str
) -> Any | None:
    """Claim ``op`` in the current transaction, or find it done.

    Returns:
        ``None`` when there is no operation id or this transaction now holds the claim;
        otherwise the committed output (JSON data) of the earlier run: apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node or input;
            ``MEMORY_BACKEND_ERROR`` when no claim could be made (nothing applied).
    """
    if op is None:
        return None
    for _ in range(_CLAIM_ATTEMPTS):
        if ledger.claim_operation(conn, op, namespace):
            return None
        row = ledger.find_operation(conn, op.id, namespace)
        if row is None:  # deleted in between: claim again
            continue
        if ledger.retention.expired(row.claimed_at):
            raise operation_expired(ledger.retention.operation_s)
        check_replay(op, row.node, str(row.digest))
        if row.output is not None:
            return row.output
        break
    raise _cannot_claim(ledger, "operation id")


def claim_execution(
    ledger: LedgerDialect, conn: Any, execution_id: str | None, node: str, namespace: str
) -> Any | None:
    """Claim ``execution_id`` for ``node`` in the current transaction, or find it done.

    Returns:
        ``None`` when there is no id or this transaction now holds the claim; otherwise
        the committed output (JSON data) of the earlier run: apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node;
            ``MEMORY_BACKEND_ERROR`` when no claim could be made (nothing applied).
    """
    if not execution_id:
        return None
    for _ in range(_CLAIM_ATTEMPTS):
        if ledger.claim_execution(conn, execution_id, node, namespace):
            return None
        row = ledger.find_execution(conn, execution_id, namespace)
        if row is None:  # pruned in between: claim again
            continue
        if row.node != node:
            raise MemoryError(
                ErrorCode.CONFLICT,
                f"this execution id was already used by {row.node}; nothing was applied",
            )
        if row.output is not None:
            return row.output
        break
    raise _cannot_claim(ledger, "execution id")


def claim_call(
    ledger: LedgerDialect,
    conn: Any,
    node: str,
    op: Operation | None,
    execution_id: str | None,
    namespace: str,
) -> Any | None:
    """Claim the call's operation id, then its execution id (first statements of the
    mutation's transaction).

    Returns:
        The committed output of an earlier run of either id, or ``None`` when this
        transaction holds both claims (apply, then :func:`record_call`).

    Raises:
        MemoryError: as :func:`claim_operation` and :func:`claim_execution`.
    """
    replay = claim_operation(ledger, conn, op, namespace)
    if replay is not None:
        return replay
    replay = claim_execution(ledger, conn, execution_id, node, namespace)
    if replay is not None and op is not None:  # the same attempt ran: it answers op too
        ledger.store_operation(conn, op, namespace, replay)
    return replay


def record_call(
    ledger: LedgerDialect,
    conn: Any,
    node: str,
    op: Operation | None,
    execution_id: str | None,
    output: Any,
    retention_s: float,
    namespace: str,
) -> None:
    """Store the mutation's ``output`` (JSON data) under both claims of
    :func:`claim_call`; expired execution ids are pruned (``retention_s`` seconds)."""
    if execution_id:
        ledger.store_execution(conn, execution_id, node, namespace, output, retention_s)
    if op is not None:
        ledger.store_operation(conn, op, namespace, output)
    if ledger.retention.due():  # the background prune: one bounded batch
        ledger.prune(conn, "operations", ledger.retention.forget_before(), BACKGROUND_BATCH)


@dataclass(frozen=True)
class Mutation:
    """One mutation call as its store's ledgers see it (made by :func:`mutation`): the
    node, the scope's namespace, the operation (``None`` without an operation id) and the
    execution id."""

    ledger: LedgerDialect
    node: str
    namespace: str
    op: Operation | None
    execution_id: str | None

    @property
    def operation_id(self) -> str | None:
        """The operation id the call's records are stamped with (``None``: none)."""
        return None if self.op is None else self.op.id

    def claim(self, conn: Any) -> Any | None:
        """:func:`claim_call`, the transaction's first statements: the committed output
        of an earlier run (apply nothing), or ``None`` (apply, then :meth:`record`)."""
        return claim_call(self.ledger, conn, self.node, self.op, self.execution_id, self.namespace)

    def record(self, conn: Any, output: Any, retention_s: float) -> None:
        """:func:`record_call`: store ``output`` (JSON data) under the claims before COMMIT;
        execution ids older than ``retention_s`` seconds are pruned."""
        record_call(
            self.ledger, conn, self.node, self.op, self.execution_id, output, retention_s,
            self.namespace,
        )  # fmt: skip


def mutation(
    ledger: LedgerDialect, node: str, input: BaseModel, options: MemoryCallOptions | None
) -> Mutation:
    """The :class:`Mutation` of a call of ``node`` (``MEMORY.WRITE`` …) with ``input``."""
    execution_id = None if options is None else options.execution_id
    return Mutation(
        ledger, node, namespace_of(options), operation_of(options, node, input), execution_id
    )


def prune_ledgers(
    ledger: LedgerDialect,
    transaction: Callable[[], AbstractContextManager[Any]],
    batch: int = PRUNE_BATCH,
) -> PruneReport:
    """Delete every forgotten operation row and expired execution row, at most ``batch``
    rows per ``transaction()`` (a context manager yielding a connection in a write
    transaction), so a writer waits on one batch at most.

    Returns:
        The rows deleted from each ledger, the transactions and the longest one (s).
    """
    counts = {"operations": 0, "executions": 0}
    batches, longest = 0, 0.0
    for table, before in (
        ("operations", ledger.retention.forget_before()),
        ("executions", ledger.retention.executions_before()),
    ):
        while True:
            started = time.perf_counter()
            with transaction() as conn:
                deleted = ledger.prune(conn, table, before, batch)
            batches, longest = batches + 1, max(longest, time.perf_counter() - started)
            counts[table] += deleted
            if deleted < batch:
                break
    return PruneReport(counts["operations"], counts["executions"], batches, longest)
