"""One message carrying several calls of one node (issue 36 items 1-2): its wire form and
the worker's batch task.

The client coalesces concurrent calls of a node (:mod:`ditto_worker.fleet.coalescing`)
into one Celery task named :func:`batch_task` (``MEMORY.GET:batch``) on **that node's own
queue** (Flower shows it there, beside the node's one-call tasks). Its only argument is
``calls``: one item per call, each a JSON object holding the call's execution id
(:data:`ID`), its input (:data:`INPUT`) and, under the message header names, its own
deadline, trusted scope, operation id, send time and trace ids — everything a one-call
message carries in its headers. The message itself carries the latest deadline of its
calls (``expires`` and ``ditto_deadline``: a prefork worker's hard time limit covers the
whole batch).

The worker runs the calls **at the same time**, each exactly as a one-call task runs
(:meth:`~ditto_worker.fleet.fleet_runtime.FleetRuntime.run_call`), the first on the task's
own thread and the others on this process's batch threads (:data:`BATCH_THREADS` at most,
idle ones reused, made on demand): a call that waits (for a sub-call, a model, another
call of the same batch — a Graph fan-out whose nodes meet) never holds back the others.
Each has its own cancel token registered under its own execution id (a cancel flag stops
that call only), its own deadline, its own transaction and ledger entry (a mutation's
execution id is claimed in its own transaction: a batch redelivered after its worker died
re-runs each call, and a call that had committed answers from the ledger, applying
nothing twice). A node whose spec is ``serial`` (a single-writer store's mutations, which
could only queue on its write lock) runs its batch's calls one after another instead.
Before they run, a node's ``prefetch`` (``NodeSpec.prefetch``) does their shared work once
(MEMORY.GET: one store read per trusted scope, :mod:`ditto_worker.memory.batch_get`).
One call's failure, timeout or invalid input is that call's NodeResult; the task returns
the list of NodeResults, in order, as one result message (:class:`BatchReply`), and always
succeeds — unless the worker itself fails (a lost pool process, a hard time limit), which
every call of the batch then reports as it would for a one-call task.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from kombu.utils.json import register_type

from ditto_worker.contracts import NodeResult, to_wire
from ditto_worker.errors import ErrorCode
from ditto_worker.runtime.process import PerProcess

__all__ = [
    "BATCH_SUFFIX", "BATCH_THREADS", "ID", "INPUT", "BatchReply", "batch_task", "run_batch",
]  # fmt: skip

log = logging.getLogger("ditto_worker.fleet.tasks")

BATCH_SUFFIX = ":batch"
"""A batch task's name is its node id plus this suffix."""
ID = "id"
"""Key of a call item: the call's execution id."""
INPUT = "input"
"""Key of a call item: the call's node input (JSON data)."""


BATCH_THREADS: Final = 256
"""Threads a worker process runs batch calls on, at most (beyond the task's own thread):
made when a call finds none idle, kept for the next batches (a store's per-thread
connection stays open with its thread). Beyond them a call waits for a thread."""


def _make_threads() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="ditto-batch")


_THREADS: Final = PerProcess(_make_threads)


def batch_task(node: str) -> str:
    """The name of ``node``'s batch task (``MEMORY.GET`` -> ``MEMORY.GET:batch``)."""
    return node + BATCH_SUFFIX


class BatchReply:
    """A batch task's return value: its calls' NodeResults, shown as a summary.

    Celery logs and sends ``repr`` (``<NodeResults MEMORY.GET success; failed
    INVALID_INPUT>``: node, status and code of each call, never content, unless ``show``);
    the result backend stores the list of NodeResult wire JSON
    (:mod:`ditto_worker.fleet.replies` writes it in one pass).
    """

    __slots__ = ("node", "results", "show")

    def __init__(self, node: str, results: Sequence[NodeResult[Any]], show: bool = False):
        self.node = node
        self.results = list(results)
        self.show = show

    @property
    def wire(self) -> list[dict[str, Any]]:
        """The NodeResults' wire JSON, in call order."""
        return [to_wire(result) for result in self.results]

    def __repr__(self) -> str:
        if self.show:
            return repr(self.wire)
        shown = "; ".join(
            f"{r.status} {r.error.code}" if r.error is not None else r.status for r in self.results
        )
        return f"<NodeResults {self.node} {shown}>"


register_type(BatchReply, None, lambda reply: reply.wire)


def _refused(node: str, item: Any, code: str, message: str) -> NodeResult[Any] | None:
    eid = item.get(ID) if isinstance(item, Mapping) else None
    if not isinstance(eid, str) or not eid:
        log.error("a %s batch item without an execution id was skipped", node)
        return None
    return NodeResult.failure(eid, node, code, message)


def run_batch(
    runtime: Any, node: str, calls: Any, body_bytes: int | None, failed_code: str
) -> list[NodeResult[Any]]:
    """Run every call of a batch through ``runtime.run_call``, at the same time (one after
    another for a ``serial`` node); one NodeResult per call, in order.

    Args:
        runtime: the :class:`~ditto_worker.fleet.fleet_runtime.FleetRuntime`.
        node: the node id.
        calls: the message's ``calls`` (a list of call items).
        body_bytes: bytes of the whole message body, or ``None``: when it is within
            ``fleet.maxInputBytes`` no call's input is measured again.
        failed_code: the node kind's failure code (a call whose envelope itself raised).
    """
    if not isinstance(calls, list):
        log.error("a %s batch without a list of calls was dropped", node)
        return []
    cap = runtime.config.fleet.max_input_bytes
    size = body_bytes if body_bytes is not None and body_bytes <= cap else None
    runs = [_runner(runtime, node, item, size, failed_code) for item in calls]
    valid = [i for i in calls if isinstance(i, Mapping) and isinstance(i.get(ID), str) and i[ID]]
    release = runtime.prefetch(node, [(i[ID], i.get(INPUT), i.get) for i in valid])
    try:
        if len(runs) <= 1 or runtime.table[node][1].serial:
            found = [run() for run in runs]
        else:
            pool = _THREADS.get()
            # each call on its own thread with a copy of this thread's context (contextvars)
            others = [pool.submit(contextvars.copy_context().run, run) for run in runs[1:]]
            found = [runs[0](), *(future.result() for future in others)]
    finally:
        release()
    return [result for result in found if result is not None]


def _runner(
    runtime: Any, node: str, item: Any, size: int | None, failed_code: str
) -> Callable[[], NodeResult[Any] | None]:
    """Runs one call item: its NodeResult, or ``None`` for an item without an id."""

    def run() -> NodeResult[Any] | None:
        if not isinstance(item, Mapping) or not isinstance(item.get(ID), str) or not item[ID]:
            return _refused(node, item, ErrorCode.INVALID_INPUT, "malformed batch item")
        try:
            result: NodeResult[Any] = runtime.run_call(node, item[ID], item.get(INPUT),
                                                       item.get, size)  # fmt: skip
        except Exception as exc:  # one call's envelope failing never fails another
            log.error("a %s call of a batch failed (%s)", node, type(exc).__name__)
            result = NodeResult.failure(item[ID], node, failed_code, "the call failed")
        return result

    return run
