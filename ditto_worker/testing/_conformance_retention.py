"""Conformance: the operation ledger's retention (issue 37 item 4;
:mod:`ditto_worker.memory.retention`).

A store that declares ``capabilities.operation_ids`` and is a
:class:`~ditto_worker.memory.retention.PrunableStore` keeps each operation id for its
window: a replay inside it applies nothing and answers the first output; a replay after
it fails ``OPERATION_EXPIRED`` with nothing applied (until the row is forgotten, after
twice the window); ``prune_ledgers`` deletes forgotten rows and only those, after which
the id is new. Such a store also keeps an execution ledger: a call redelivered with its
execution id (and no operation id) applies nothing, until ``executionRetentionS``. Time
moves by the store's injectable clock
(:attr:`~ditto_worker.memory.retention.LedgerRetention.clock`), never by sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ditto_worker.errors import ErrorCode
from ditto_worker.memory.retention import LedgerRetention, PrunableStore
from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "test_execution_replay_applies_nothing",
    "test_operation_replay_after_the_window_is_expired",
    "test_operation_replay_inside_the_window_applies_nothing",
    "test_prune_forgets_only_old_operations",
]

DAY = 86400.0


class _Clock:
    """A clock that starts at the real time and moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@contextmanager
def _moved(h: Harness) -> Iterator[tuple[_Clock, LedgerRetention]]:
    """The store's retention with an injected clock (restored after the test)."""
    if not h.caps.operation_ids:
        pytest.skip("operation_ids not declared")
    if not isinstance(h.store, PrunableStore):
        pytest.skip("the store does not expire its ledger (no PrunableStore)")
    retention = h.store.retention
    clock, before = _Clock(), retention.clock
    retention.clock = clock
    try:
        yield clock, retention
    finally:
        retention.clock = before


def test_operation_replay_inside_the_window_applies_nothing(conformance: Harness) -> None:
    with _moved(conformance) as (clock, retention):
        drafts = {"memories": [{"key": "kept", "content": "inside the window"}]}
        first = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-window")
        clock.now += retention.operation_s * 0.9  # a resume late in the window
        again = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-window")
        assert again == first, "a replay inside the window must answer the first output"
        assert [i.id for i in conformance.items()] == [first[0].id], "applied twice"
        report = conformance.store.prune_ledgers()
        assert report.operations == 0, "pruned an operation inside its window"
        assert conformance.ok("MEMORY.WRITE", drafts, operation_id="op-window") == first


def test_operation_replay_after_the_window_is_expired(conformance: Harness) -> None:
    with _moved(conformance) as (clock, retention):
        drafts = {"memories": [{"key": "late", "content": "resumed too late"}]}
        first = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-late")
        (record,) = first
        update = {"memories": [{"id": record.id, "metadata": {"n": 1}}]}
        conformance.ok("MEMORY.UPDATE", update, operation_id="op-late-update")
        delete = {"ids": [record.id]}
        clock.now += retention.operation_s + DAY  # after the window, not yet forgotten
        for node, body, op in (
            ("MEMORY.WRITE", drafts, "op-late"),
            ("MEMORY.UPDATE", update, "op-late-update"),
        ):
            code = conformance.code(node, body, operation_id=op)
            assert code == ErrorCode.OPERATION_EXPIRED, f"{node}: {code}"
        items = conformance.items()
        assert [(i.id, i.metadata) for i in items] == [(record.id, {"n": 1})], "applied"
        assert conformance.store.prune_ledgers().operations == 0, "forgot too early"
        assert conformance.code("MEMORY.WRITE", drafts, operation_id="op-late") == (
            ErrorCode.OPERATION_EXPIRED
        )
        # a fresh id is unaffected by the expired ones
        conformance.ok("MEMORY.DELETE", delete, operation_id="op-late-delete")
        assert conformance.items() == []


def test_prune_forgets_only_old_operations(conformance: Harness) -> None:
    with _moved(conformance) as (clock, retention):
        for suffix in ("", "-2", "-3", "-4", "-5", "-6"):
            old = {"memories": [{"key": f"old{suffix}", "content": "long ago"}]}
            conformance.ok("MEMORY.WRITE", old, operation_id=f"op-old{suffix}")
        clock.now += retention.operation_s * 1.5
        young = {"memories": [{"key": "young", "content": "recent"}]}
        kept = conformance.ok("MEMORY.WRITE", young, operation_id="op-young")
        clock.now += retention.operation_s * 0.6  # op-old: 2.1 windows; op-young: 0.6
        report = conformance.store.prune_ledgers(batch=1)
        assert report.operations == 6, report
        # batch=1: six operation transactions and an empty one; a store deleting all six
        # at once takes two, and at most two more for the executions
        assert report.batches >= 7, f"batch=1 must take one transaction per row: {report}"
        # the young id still answers its replay; the old one is new again: applied (a
        # store that derives record ids from the operation id writes over "old")
        assert conformance.ok("MEMORY.WRITE", young, operation_id="op-young") == kept
        renamed = {"memories": [{"key": "old-again", "content": "long ago"}]}
        (again,) = conformance.ok("MEMORY.WRITE", renamed, operation_id="op-old")
        assert again.key == "old-again"
        keys = {i.key for i in conformance.items()}
        assert (
            {"old-again", "young"}
            <= keys
            <= {"old", "old-again", "young"} | {f"old-{n}" for n in range(2, 7)}
        ), keys


def test_execution_replay_applies_nothing(conformance: Harness) -> None:
    with _moved(conformance) as (clock, retention):
        h = conformance

        def twice(node: str, body: object, execution_id: str) -> Any:
            runs = [h.memory.execute(node, body, scope=h.scope, execution_id=execution_id)
                    for _ in range(2)]  # fmt: skip
            for run in runs:
                assert run.status == "success", (node, run.error)
            assert runs[1].output == runs[0].output, f"{node}: a redelivery answered anew"
            return runs[0].output

        written = twice("MEMORY.WRITE", {"memories": [{"key": "once", "content": "x"}]}, "e-w")
        (record,) = written
        assert [i.id for i in h.items()] == [record.id], "a redelivered WRITE wrote twice"
        update = {"memories": [{"id": record.id, "metadata": {"n": 1}}]}
        twice("MEMORY.UPDATE", update, "e-u")
        deleted = twice("MEMORY.DELETE", {"ids": [record.id]}, "e-d")
        assert deleted.deleted == [record.id]
        assert h.items() == []
        clock.now += retention.execution_s + 60
        assert h.store.prune_ledgers().executions >= 3, "expired execution ids kept"
