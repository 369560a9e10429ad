"""Coalescing in the client (issue 36 item 1): concurrent calls of one node travel together.

A fleet call costs the fleet far more per message (publish, task events, result store and
publish, the worker's envelope) than a memory GET costs the store. With
``fleet.coalescing.enabled`` a :class:`~ditto_worker.fleet.client.DittoClient` on a Redis
fleet sends calls of one node through a :class:`Coalescer`, whose policy is adaptive, not
a fixed timer:

* a call goes out **at once**, as the node's ordinary one-call message, while fewer than
  ``K`` messages of its node are in flight from this client (``fleet.coalescing.inFlight``;
  default the concurrency of the worker group serving the node: the pool cannot run more
  at a time anyway). A lone call is therefore never delayed;
* otherwise it **gathers** with the node's other waiting calls, and they go as one batch
  message (:mod:`ditto_worker.fleet.batch`, on the node's own queue) as soon as one of the
  node's messages is answered, or when ``maxCalls`` calls have gathered, or ``maxWaitUs``
  after the first of them, whichever comes first.

Each call keeps its own execution id, deadline, trusted scope, operation id, trace and
cancel flag inside the batch; the batch's one result message (a list of NodeResults) is
dispatched to the waiting calls through the client's result listener
(:meth:`~ditto_worker.fleet.results.ResultListener.deliver`), so everything after the send
— waiting, cancelling, timing out, parsing — is the one-call path unchanged. A call whose
caller has already given up is left out of its batch. A batch that cannot be encoded (one
call's input is not JSON) is sent call by call, so only that call fails
(``INVALID_INPUT``); one the broker refuses fails each of its calls ``FLEET_UNAVAILABLE``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass, field
from typing import Any

from kombu.exceptions import EncodeError

from ditto_worker.config import RuntimeConfig
from ditto_worker.errors import ConfigError
from ditto_worker.runtime.calls import Call

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "UNSENT",
    "Coalescer",
    "Pending",
    "group_concurrency",
    "meta_of",
]

log = logging.getLogger("ditto_worker.fleet.client")

UNSENT = "DITTO_UNSENT"
"""Status of the result meta a call gets when its batch could not be published; its
``result`` is ``"encode"`` (the input is not JSON) or ``"broker"`` (the broker refused)."""

Meta = dict[str, Any]

DEFAULT_IN_FLIGHT = 4
"""``K`` of a node whose worker group is not known (the MEMORY worker's default pool)."""


def group_concurrency(config: RuntimeConfig, nodes: Mapping[str, Any]) -> dict[str, int]:
    """``node -> concurrency`` of the worker group serving each node of a node table (a
    group of ``workers.<kind>.groups`` naming it, else the kind's pool size)."""
    found: dict[str, int] = {}
    for node, (definition, _) in nodes.items():
        try:
            process = config.process_settings(str(definition.kind).lower())
        except ConfigError:
            continue
        groups = [g.concurrency for g in process.groups.values() if node in g.nodes]
        found[node] = groups[0] if groups else process.concurrency
    return found


@dataclass(frozen=True, slots=True)
class Pending:
    """A call waiting for its batch, and when it was handed to the coalescer."""

    call: Call
    sent: float


@dataclass
class _Node:
    in_flight: int = 0
    pending: list[Pending] = field(default_factory=list)
    armed: bool = False


def meta_of(wire: Any) -> Meta:
    """The result meta a one-call task would have stored for the NodeResult ``wire``."""
    if isinstance(wire, Mapping) and wire.get("status") == "success":
        return {"status": "SUCCESS", "result": wire}
    return {"status": "FAILURE", "result": {"exc_type": "NodeFailed", "exc_message": [wire]}}


class Coalescer:
    """Sends a client's calls one by one or in batches (module docstring).

    Args:
        listener: the client's :class:`~ditto_worker.fleet.results.ResultListener` (its
            ``new_id``, ``expect``, ``waiting``, ``deliver``, ``forget``, ``loop``).
        publish_one: publishes a call as its one-call message (raises as ``send_task``).
        publish_batch: ``(node, batch_id, pendings)``: publishes a batch message.
        executor: runs batch publishes started off the caller's thread.
        limit_of: ``node -> K``, the messages of that node kept in flight.
        max_calls: a batch goes out at this many calls.
        max_wait_s: a batch goes out this long after its first call at the latest.
        observe: called with each batch's size (a histogram), or ``None``.
    """

    def __init__(
        self, listener: Any, publish_one: Callable[[Call], None],
        publish_batch: Callable[[str, str, list[Pending]], None], executor: Executor,
        limit_of: Callable[[str], int], max_calls: int, max_wait_s: float,
        observe: Callable[[int], None] | None = None,
    ) -> None:  # fmt: skip
        self._listener = listener
        self._publish_one = publish_one
        self._publish_batch = publish_batch
        self._executor = executor
        self._limit_of = limit_of
        self._max_calls = max_calls
        self._max_wait_s = max_wait_s
        self._observe = observe
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}

    def in_flight(self, node: str) -> int:
        """Messages of ``node`` sent and not yet answered."""
        state = self._nodes.get(node)
        return 0 if state is None else state.in_flight

    def pending(self, node: str) -> int:
        """Calls of ``node`` gathering for its next batch."""
        state = self._nodes.get(node)
        return 0 if state is None else len(state.pending)

    def send(self, call: Call) -> None:
        """Send ``call`` now (one-call message, raising as ``send_task`` does) or gather
        it into the node's next batch (returns at once; its result arrives through the
        listener)."""
        node = call.node
        batch: list[Pending] | None = None
        with self._lock:
            state = self._nodes.get(node) or self._nodes.setdefault(node, _Node())
            if state.in_flight < self._limit_of(node) and not state.pending:
                state.in_flight += 1
            else:
                state.pending.append(Pending(call, time.time()))
                if len(state.pending) >= self._max_calls:
                    batch = self._take(state)
                elif not state.armed:
                    state.armed = True
                    self._arm(node)
                    return
                else:
                    return
        if batch is not None:
            self._go(node, batch)
            return
        future = self._listener.waiting(call.execution_id)
        try:
            self._publish_one(call)
        except BaseException:
            self._ended(node)
            raise
        self._watch_one(node, future)

    # --- policy (under the lock) -----------------------------------------------------------

    def _take(self, state: _Node) -> list[Pending]:
        batch, state.pending = state.pending, []
        state.in_flight += 1
        return batch

    def _ended(self, node: str) -> None:
        """A message of ``node`` was answered (or given up on): send the gathered calls."""
        with self._lock:
            state = self._nodes[node]
            state.in_flight -= 1
            if not state.pending or state.in_flight >= self._limit_of(node):
                return
            batch = self._take(state)
        self._later(node, batch)

    def _arm(self, node: str) -> None:
        loop = self._listener.loop
        try:
            loop.call_soon_threadsafe(loop.call_later, self._max_wait_s, self._due, node)
        except RuntimeError:  # the listener's loop is closed: the client is closing
            self._due(node)

    def _due(self, node: str) -> None:
        with self._lock:
            state = self._nodes[node]
            state.armed = False
            if not state.pending:
                return
            batch = self._take(state)
        self._later(node, batch)

    def _later(self, node: str, batch: list[Pending]) -> None:
        try:
            self._executor.submit(self._go, node, batch)
        except RuntimeError:  # the executor is shut down (closing): publish here
            self._go(node, batch)

    # --- sending ---------------------------------------------------------------------------

    def _watch_one(self, node: str, future: ThreadFuture[Meta] | None) -> None:
        if future is None:  # the call already ended
            self._ended(node)
        else:
            future.add_done_callback(lambda _: self._ended(node))

    def _go(self, node: str, batch: list[Pending]) -> None:
        """Publish ``batch`` (counted in flight already); never raises."""
        try:
            live = [p for p in batch if self._alive(p.call)]
            if len(live) <= 1:
                self._go_one(node, live)
            else:
                self._go_many(node, live)
        except Exception:  # a bug here must not leave calls waiting for nothing
            log.exception("coalesced send of %s failed", node)
            self._unsent(batch, "broker")
            self._ended(node)

    def _alive(self, call: Call) -> bool:
        future = self._listener.waiting(call.execution_id)
        return future is not None and not future.done()

    def _go_one(self, node: str, live: list[Pending]) -> None:
        if not live:
            self._ended(node)
            return
        call = live[0].call
        future = self._listener.waiting(call.execution_id)
        try:
            self._publish_one(call)
        except EncodeError:
            self._unsent(live, "encode")
            self._ended(node)
            return
        except Exception:
            self._unsent(live, "broker")
            self._ended(node)
            return
        if self._observe is not None:
            self._observe(1)
        self._watch_one(node, future)

    def _go_many(self, node: str, live: list[Pending]) -> None:
        listener = self._listener
        batch_id = listener.new_id()
        answer, setup = listener.expect(batch_id)
        try:
            if setup is not None:  # before the pattern subscription is confirmed
                setup.result(timeout=max(0.0, max(p.call.deadline for p in live) - time.time()))
            self._publish_batch(node, batch_id, live)
        except EncodeError:  # one call's input is not JSON: each call goes alone
            listener.forget(batch_id)
            self._one_by_one(node, live)
            return
        except Exception:
            listener.forget(batch_id)
            self._unsent(live, "broker")
            self._ended(node)
            return
        if self._observe is not None:
            self._observe(len(live))
        self._watch_many(node, batch_id, answer, live)

    def _one_by_one(self, node: str, live: list[Pending]) -> None:
        with self._lock:
            self._nodes[node].in_flight += len(live) - 1  # the batch's count is the first's
        for pending in live:
            self._go_one(node, [pending])

    def _watch_many(
        self, node: str, batch_id: str, answer: ThreadFuture[Meta], live: list[Pending]
    ) -> None:
        listener = self._listener
        remaining = [len(live)]
        guard = threading.Lock()

        def member_ended(_: Any = None) -> None:
            with guard:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:  # every caller has its answer or gave up: stop awaiting the batch
                listener.forget(batch_id)

        def answered(future: ThreadFuture[Meta]) -> None:
            if not future.cancelled():
                self._dispatch(future.result(), live)
            self._ended(node)

        answer.add_done_callback(answered)
        for pending in live:
            waiting = listener.waiting(pending.call.execution_id)
            if waiting is None:
                member_ended()
            else:
                waiting.add_done_callback(member_ended)

    def _dispatch(self, meta: Meta, live: list[Pending]) -> None:
        """Hand each call its own result from the batch's result meta."""
        deliver = self._listener.deliver
        results = meta.get("result") if meta.get("status") == "SUCCESS" else None
        if not isinstance(results, list):  # the batch itself failed: each call says so
            for pending in live:
                deliver(pending.call.execution_id, meta)
            return
        by_id = {w.get("executionId"): w for w in results if isinstance(w, Mapping)}
        for pending in live:
            wire = by_id.get(pending.call.execution_id)
            found = meta_of(wire) if wire is not None else {"status": "FAILURE", "result": None}
            deliver(pending.call.execution_id, found)

    def _unsent(self, live: list[Pending], why: str) -> None:
        for pending in live:
            self._listener.deliver(pending.call.execution_id, {"status": UNSENT, "result": why})
