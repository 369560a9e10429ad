"""Prometheus metrics of the fleet, served on Flower's ``/metrics`` (issue 14 item 3).

Flower counts Celery events per task name (``flower_events_total``) and times them
(``flower_task_runtime_seconds``), but cannot tell one node failure from another, and it
exports no queue length. ``ditto-worker flower`` adds, on the same authenticated
``/metrics``:

* ``ditto_node_calls_total{node, status, code}`` — calls that ended (each call of a batch
  message counts, under its node id: :func:`outcomes_of`), by node id, NodeResult
  status (``success`` | ``failed`` | ``cancelled`` | ``timeout``; ``revoked`` for a message
  that expired unrun, ``rejected`` for one refused) and error code (``""`` on success; a
  NodeResult code such as ``INVALID_INPUT``; the exception's class for a task that ended
  without a NodeResult, e.g. ``TimeLimitExceeded``, ``WorkerLostError``). Read from the
  task events workers send: the redacted result and exception reprs carry exactly node,
  status and code (:mod:`ditto_worker.fleet.redaction`, :mod:`ditto_worker.fleet.failures`);
* ``ditto_queue_messages{node, queue}`` — messages waiting in each node's queue, read from
  the broker when ``/metrics`` is scraped (as ``ditto-worker status`` reads them; no
  series when the broker is unreachable);
* ``ditto_broker_up`` — 1 when that read succeeded, else 0.

Like Flower's counters, ``ditto_node_calls_total`` counts the events this Flower received
since it started (a restart begins at 0; ``rate()`` / ``increase()`` handle that).
Dashboard and alert rules over these: ``docs/ops/``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ditto_worker.fleet.batch import BATCH_SUFFIX

__all__ = [
    "NODE_CALLS",
    "QueueCollector",
    "install_flower_metrics",
    "outcome_of",
    "outcomes_of",
]

log = logging.getLogger(__name__)

_STATUS = r"(success|failed|cancelled|timeout)"
_SUMMARY = re.compile(rf"<NodeResult \S+ {_STATUS}(?: ([A-Za-z0-9_.-]+))?>")
_FAILED = re.compile(rf"NodeFailed\(\S+ {_STATUS}(?: ([A-Za-z0-9_.-]+))?\)")
_WIRE_STATUS = re.compile(rf"'status': '{_STATUS}'")
_WIRE_CODE = re.compile(r"'code': '([A-Za-z0-9_.-]+)'")
_EXCEPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(")
_BATCH = re.compile(r"<NodeResults \S+ ([^>]*)>")
_BATCH_CALL = re.compile(rf"^{_STATUS}(?: ([A-Za-z0-9_.-]+))?$")

NODE_CALLS = Counter(
    "ditto_node_calls",
    "Node calls that ended, by node, NodeResult status and error code (from task events).",
    ["node", "status", "code"],
    registry=None,
)
"""The counter (registered by :func:`install_flower_metrics`)."""


def outcome_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(status, code)`` of a task event that ends a call, else ``None``.

    Args:
        event: a Celery task event (``type``, ``result`` / ``exception`` …).
    """
    kind = event.get("type")
    if kind == "task-succeeded":
        text = str(event.get("result") or "")
        match = _SUMMARY.search(text)
        if match:
            return match.group(1), match.group(2) or ""
        status = _WIRE_STATUS.search(text)  # fleet.logContent: the whole NodeResult
        if status:
            code = _WIRE_CODE.search(text)
            return status.group(1), code.group(1) if code and status.group(1) != "success" else ""
        return "success", ""
    if kind == "task-failed":
        text = str(event.get("exception") or "")
        match = _FAILED.search(text)
        if match:
            return match.group(1), match.group(2) or ""
        name = _EXCEPTION.match(text)
        return "failed", name.group(1) if name else "TaskFailed"
    if kind == "task-revoked":
        return "revoked", "EXPIRED" if event.get("expired") else "REVOKED"
    if kind == "task-rejected":
        return "rejected", "REJECTED"
    return None


def outcomes_of(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(status, code)`` of every call a task event ends: one per call of a batch task's
    ``task-succeeded`` (its result repr ``<NodeResults NODE success; failed CODE>``,
    :class:`~ditto_worker.fleet.batch.BatchReply`), else :func:`outcome_of`'s, if any."""
    if event.get("type") == "task-succeeded":
        batch = _BATCH.search(str(event.get("result") or ""))
        if batch is not None:
            calls = [_BATCH_CALL.match(part.strip()) for part in batch.group(1).split(";")]
            return [(m.group(1), m.group(2) or "") for m in calls if m is not None]
    outcome = outcome_of(event)
    return [] if outcome is None else [outcome]


class QueueCollector(Collector):
    """``ditto_queue_messages`` and ``ditto_broker_up``, read from the broker per scrape
    (at most once every ``min_interval_s``; a scrape in between gets the last reading).

    Args:
        app: a Celery app on the fleet's broker whose routes name every node's queue.
        min_interval_s: seconds between broker reads.
    """

    def __init__(self, app: Any, min_interval_s: float = 5.0) -> None:
        self.app = app
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._read_at = -1e9
        self._last: dict[str, int] | None = None

    def _read(self) -> dict[str, int] | None:
        from ditto_worker.fleet.status import app_nodes, queue_backlog

        with self._lock:
            if time.monotonic() - self._read_at < self.min_interval_s:
                return self._last
            self._read_at = time.monotonic()
            nodes = app_nodes(self.app)
            try:
                backlog = queue_backlog(self.app, list(nodes.values()))
                self._last = {node: backlog.get(queue, 0) for node, queue in nodes.items()}
            except Exception as exc:  # the broker is down: no queue series, broker_up 0
                log.warning("metrics: cannot read queue lengths (%s)", type(exc).__name__)
                self._last = None
            return self._last

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        up = GaugeMetricFamily("ditto_broker_up", "1 when the broker answered the last read.")
        queues = GaugeMetricFamily(
            "ditto_queue_messages",
            "Messages waiting in each node's queue on the broker (not prefetched or running).",
            labels=["node", "queue"],
        )
        return up, queues

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families, without reading the broker (the registry checks names with it)."""
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._read()
        up, queues = self._families()
        up.add_metric([], 0.0 if counts is None else 1.0)
        yield up
        routes = self.app.conf.task_routes or {}
        for node, count in sorted((counts or {}).items()):
            queues.add_metric([node, str(routes.get(node, {}).get("queue", ""))], float(count))
        yield queues


_installed = False


def install_flower_metrics(app: Any) -> None:
    """Register :data:`NODE_CALLS` and a :class:`QueueCollector` on ``app`` with the
    Prometheus registry Flower's ``/metrics`` serves, and count every call-ending event
    Flower's event state receives. Idempotent (once per process)."""
    global _installed
    if _installed:
        return
    from flower.events import EventsState

    REGISTRY.register(NODE_CALLS)
    REGISTRY.register(QueueCollector(app))
    original = EventsState.event

    def event(self: Any, event: dict[str, Any]) -> None:
        original(self, event)
        try:
            outcomes = outcomes_of(event)
            if not outcomes:
                return
            task = self.tasks.get(event.get("uuid"))
            node = str(getattr(task, "name", None) or event.get("name") or "unknown")
            node = node.removesuffix(BATCH_SUFFIX)  # a batch counts its calls, by node
            for outcome in outcomes:
                NODE_CALLS.labels(node, *outcome).inc()
        except Exception:  # a metric must never stop Flower's event loop
            log.warning("metrics: an event could not be counted", exc_info=True)

    EventsState.event = event
    _installed = True
