"""Prometheus metrics of one gateway process, served on its ``/metrics``.

* ``ditto_gateway_calls_total{node, status, code}`` — calls answered, by node id,
  NodeResult status and error code (``""`` on success); refusals before a node was
  reached count with status ``refused`` and their code (``UNAUTHENTICATED`` …).
* ``ditto_gateway_disconnects_total{node}`` — calls whose client went away (cancelled).
* ``ditto_gateway_in_flight`` — calls running now.
* ``ditto_client_batch_calls`` — calls per message the process's fleet clients sent with
  ``fleet.coalescing`` on (a histogram; :mod:`ditto_worker.runtime.batch_sizes`).

Labels carry ids and codes only, never tokens, bodies or content. Each app has its own
registry, so several apps in one process (tests) never share series.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from ditto_worker.runtime.batch_sizes import BATCH_SIZES

__all__ = ["GatewayMetrics"]


class _BatchSizes(Collector):
    """``ditto_client_batch_calls``: :data:`~ditto_worker.runtime.batch_sizes.BATCH_SIZES`."""

    def collect(self) -> Iterator[HistogramMetricFamily]:
        buckets, total = BATCH_SIZES.snapshot()
        family = HistogramMetricFamily(
            "ditto_client_batch_calls",
            "Calls per message this process's fleet clients sent with coalescing on.",
        )
        family.add_metric([], buckets, float(total))
        yield family


class GatewayMetrics:
    """The counters of one app (its own :class:`~prometheus_client.CollectorRegistry`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._calls = Counter(
            "ditto_gateway_calls_total",
            "Calls answered by the HTTP gateway, by node, status and error code.",
            ["node", "status", "code"],
            registry=self.registry,
        )
        self._disconnects = Counter(
            "ditto_gateway_disconnects_total",
            "Calls cancelled because the client closed the connection.",
            ["node"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "ditto_gateway_in_flight", "Calls running now.", registry=self.registry
        )
        self.registry.register(_BatchSizes())  # the fleet client's calls per message

    def answered(self, node: str, status: str, code: str | None) -> None:
        """Count one call that reached its node."""
        self._calls.labels(node, status, code or "").inc()

    def refused(self, node: str, code: str) -> None:
        """Count one request refused before its node was reached."""
        self._calls.labels(node, "refused", code).inc()

    def disconnected(self, node: str) -> None:
        """Count one call whose client went away."""
        self._disconnects.labels(node).inc()

    async def endpoint(self) -> Response:
        """``GET /metrics`` in Prometheus' text format."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
