"""Fair admission: in-flight slots, each identity's share of them, and its request rate.

One :class:`Admission` per app, used by :class:`~ditto_worker.gateway.guard.Guard` for
every request it admits (issue 37 item 1):

* a request's **rate** is checked first: each identity has a token bucket
  (``gateway.identityRatePerS`` refilled per second, ``gateway.identityBurst`` deep);
* while its body is read it holds a **reading** place, at most
  ``identityShare × maxInFlight`` per identity, so one identity's slow bodies never
  crowd out another's;
* once its body is read it takes an **in-flight slot**: at most ``maxInFlight`` in all and
  ``identityShare × maxInFlight`` per identity.

Each refusal is a :class:`~ditto_worker.gateway.errors.GatewayError` ``OVERLOADED`` (429)
with ``Retry-After`` in whole seconds. Requests without a verified identity share one
identity (``""``). The ``ditto_gateway_in_flight`` gauge follows the slots.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from typing import Any

from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.errors import GatewayError
from ditto_worker.gateway.settings import GatewaySettings

__all__ = ["Admission", "TokenBucket"]

_MAX_BUCKETS = 10_000
"""Buckets kept at most (the least recently used go first: a full bucket is the same as
none, so an identity forgotten loses nothing)."""


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; :meth:`take` spends one.

    Args:
        rate: tokens added per second (> 0).
        burst: the bucket's size; it starts full.
        now: the current time, seconds (``time.monotonic``).
    """

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = now

    def take(self, now: float) -> float:
        """Spend one token: 0.0 when there was one, else the seconds until there is."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class Admission:
    """The slots, shares and buckets of one app (event-loop state: one thread).

    Args:
        settings: ``maxInFlight``, ``identityShare``, ``identityRatePerS``,
            ``identityBurst``.
        gauge: the ``ditto_gateway_in_flight`` gauge (a ``prometheus_client`` Gauge), or
            ``None``.
    """

    def __init__(self, settings: GatewaySettings, gauge: Any = None) -> None:
        self.max_in_flight = settings.max_in_flight
        self.share = max(1, math.floor(settings.identity_share * settings.max_in_flight))
        self.rate = settings.identity_rate_per_s
        self.burst = settings.identity_burst
        self.in_flight = 0
        self._gauge = gauge
        self._running: dict[str, int] = {}
        self._reading: dict[str, int] = {}
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self.idle = asyncio.Event()
        self.idle.set()

    def check_rate(self, key: str) -> None:
        """Spend one of ``key``'s tokens.

        Raises:
            GatewayError: ``OVERLOADED`` (429) with ``Retry-After``: the bucket is empty.
        """
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, now)
            if len(self._buckets) > _MAX_BUCKETS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        wait_s = bucket.take(now)
        if wait_s > 0:
            raise _overloaded("this identity's request rate is used up", wait_s)

    def start_reading(self, key: str) -> None:
        """Take a reading place for ``key`` (release with :meth:`stop_reading`).

        Raises:
            GatewayError: ``OVERLOADED``: ``key`` already reads its share of bodies.
        """
        if self._reading.get(key, 0) >= self.share:
            raise _overloaded("this identity has too many requests being sent", 1.0)
        self._reading[key] = self._reading.get(key, 0) + 1

    def stop_reading(self, key: str) -> None:
        """Give back a reading place."""
        _decrement(self._reading, key)

    def enter(self, key: str) -> None:
        """Take an in-flight slot for ``key`` (release with :meth:`leave`).

        Raises:
            GatewayError: ``OVERLOADED``: every slot is taken, or ``key`` holds its share.
        """
        if self.in_flight >= self.max_in_flight:
            raise _overloaded("too many calls in flight; retry later", 1.0)
        if self._running.get(key, 0) >= self.share:
            raise _overloaded("this identity has too many calls in flight; retry later", 1.0)
        self._running[key] = self._running.get(key, 0) + 1
        self.in_flight += 1
        self.idle.clear()
        if self._gauge is not None:
            self._gauge.set(self.in_flight)

    def leave(self, key: str) -> None:
        """Give back an in-flight slot."""
        _decrement(self._running, key)
        self.in_flight -= 1
        if self._gauge is not None:
            self._gauge.set(self.in_flight)
        if self.in_flight == 0:
            self.idle.set()


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _overloaded(message: str, wait_s: float) -> GatewayError:
    retry = str(max(1, math.ceil(wait_s)))
    return GatewayError(ErrorCode.OVERLOADED, message, {"Retry-After": retry})
