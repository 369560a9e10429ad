"""How long a store keeps its operation ledger, and how it prunes it (issue 37 item 4).

A store that declares ``capabilities.operation_ids`` keeps one ledger row per
``(namespace, operation id)`` (:mod:`ditto_worker.memory.operations`). The rows do not
grow forever: each carries the time it was claimed (:attr:`LedgerRetention.clock`,
epoch seconds) and

* **inside the window** (younger than ``operationRetentionS``, 30 days by default, the
  longest task resume supported): a replay applies nothing and answers the committed
  output;
* **after the window, before it is forgotten** (younger than twice the retention): a
  replay fails ``OPERATION_EXPIRED`` (:func:`operation_expired`), nothing applied: the
  store can no longer vouch for the output, and applying it again could apply it twice.
  The caller reads the records (GET shows ``operationId``) to see what happened;
* **forgotten** (older than twice the retention): pruned, by the store in the background
  (a bounded batch at most every :data:`PRUNE_INTERVAL_S`, inside a mutation) or by
  ``ditto-worker prune`` (batches of :data:`PRUNE_BATCH` rows, each its own short
  transaction). An id replayed after that is treated as new, like an execution id after
  ``executionRetentionS``.

A store that prunes is a :class:`PrunableStore`: the conformance kit and the command line
find its :class:`LedgerRetention` (one object, shared with the store's ledger: a test
replaces :attr:`~LedgerRetention.clock` to move time) and its ``prune_ledgers``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "DEFAULT_OPERATION_RETENTION_S",
    "PRUNE_BATCH",
    "PRUNE_INTERVAL_S",
    "LedgerRetention",
    "PruneReport",
    "PrunableStore",
    "operation_expired",
]

DEFAULT_OPERATION_RETENTION_S: Final = 30 * 86400.0
"""How long an operation id answers its replay, seconds (``operationRetentionS``): 30
days, longer than any task resume the memory tasks support (a resume has no time limit
of its own; its checkpoints' operation ids are claimed when each stage commits)."""
PRUNE_BATCH: Final = 1000
"""Rows one pruning transaction deletes at most (``ditto-worker prune --batch``)."""
PRUNE_INTERVAL_S: Final = 60.0
"""Least time between two background prunes of one store object, seconds."""
BACKGROUND_BATCH: Final = 200
"""Rows a background prune (inside a mutation's transaction) deletes at most."""


def operation_expired(retention_s: float) -> MemoryError:
    """The ``OPERATION_EXPIRED`` error of a replay found after the window."""
    days = retention_s / 86400.0
    return MemoryError(
        ErrorCode.OPERATION_EXPIRED,
        f"this operation id's ledger entry is older than the operation retention "
        f"({days:g} days): the store cannot tell its output any more; nothing was applied "
        "(read the records: GET shows operationId)",
    )


@dataclass
class LedgerRetention:
    """The ledger retention of one store object (shared with its ledger).

    Attributes:
        operation_s: the window of an operation id, seconds (``operationRetentionS``).
        execution_s: how long an execution id is kept, seconds (``executionRetentionS``).
        clock: the time of ledger rows, epoch seconds (``time.time``; tests inject one).
        interval_s: least time between two background prunes (monotonic), seconds.
    """

    operation_s: float = DEFAULT_OPERATION_RETENTION_S
    execution_s: float = 86400.0
    clock: Callable[[], float] = time.time
    interval_s: float = PRUNE_INTERVAL_S
    _last: float = field(default=float("-inf"), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def expired(self, claimed_at: float | None) -> bool:
        """True when a row claimed at ``claimed_at`` (epoch s; ``None``: unknown, an old
        row) is past the window."""
        return claimed_at is not None and self.clock() - claimed_at > self.operation_s

    def forget_before(self) -> float:
        """Operation rows claimed before this time (epoch s) are pruned."""
        return self.clock() - 2 * self.operation_s

    def executions_before(self) -> float:
        """Execution rows made before this time (epoch s) are pruned."""
        return self.clock() - self.execution_s

    def due(self) -> bool:
        """True (once per :attr:`interval_s`, across threads) when a background prune
        should run now."""
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                return False
            self._last = now
            return True


@dataclass(frozen=True)
class PruneReport:
    """What one prune did: rows deleted from each ledger, transactions, and the longest
    transaction (seconds: how long a writer could have waited on it)."""

    operations: int = 0
    executions: int = 0
    batches: int = 0
    longest_batch_s: float = 0.0


@runtime_checkable
class PrunableStore(Protocol):
    """A store whose ledgers expire (every bundled store)."""

    retention: LedgerRetention

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete every forgotten operation row and expired execution row, ``batch``
        rows per transaction; safe beside running writers."""
        ...
