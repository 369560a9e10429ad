"""How many calls each fleet message carried (issue 36 item 5), for ``/metrics``.

A client with ``fleet.coalescing`` on (:mod:`ditto_worker.fleet.coalescing`) records the
calls of every message it sends in :data:`BATCH_SIZES`, a histogram of this process with
no dependency (the base install has no Prometheus client); the gateway's ``/metrics``
exports it as ``ditto_client_batch_calls`` (:mod:`ditto_worker.gateway.metrics`).
"""

from __future__ import annotations

import bisect
import threading

__all__ = ["BATCH_SIZES", "BUCKETS", "SizeHistogram"]

BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
"""Upper bounds (calls per message) of the histogram's buckets; one more is +Inf."""


class SizeHistogram:
    """A thread-safe histogram of message sizes (calls per message)."""

    def __init__(self, buckets: tuple[int, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0
        self._lock = threading.Lock()

    def observe(self, calls: int) -> None:
        """Record one message of ``calls`` calls."""
        at = bisect.bisect_left(self.buckets, calls)
        with self._lock:
            self._counts[at] += 1
            self._sum += calls

    def snapshot(self) -> tuple[list[tuple[str, int]], int]:
        """``([(upper bound, cumulative messages) …, ("+Inf", all)], calls in all)``:
        Prometheus' histogram shape."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        bounds = [str(float(b)) for b in self.buckets] + ["+Inf"]
        running, cumulative = 0, []
        for bound, count in zip(bounds, counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


BATCH_SIZES = SizeHistogram()
"""Calls per message of every coalescing fleet client of this process."""
