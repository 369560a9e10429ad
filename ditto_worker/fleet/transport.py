"""kombu's Redis transport, with one guard for reconnecting after a Redis restart.

When Redis goes away while a worker holds delivered-but-unacknowledged messages, kombu's
consumer acknowledges or restores them through a client built from a connection that is
already closed. kombu 5.x then raises ``AttributeError`` (``'NoneType' object has no
attribute 'hostname'`` / ``'client'``; the class of celery/kombu#970, #582 and
celery/celery#10205), which Celery treats as an unrecoverable error: the worker stops
instead of reconnecting (seen here in ``tests/integration/test_broker_faults.py``).

:class:`Transport` is kombu's own Redis transport whose channel raises a Redis
``ConnectionError`` in that case instead — a connection error, which kombu and Celery
already handle: the ack or restore is logged as failed, the messages stay in kombu's
``unacked`` hash (restored after the visibility timeout), and the consumer reconnects.
Selected through ``broker_transport`` by :func:`ditto_worker.fleet.celery_app.create_celery_app`
for ``redis://`` and ``rediss://`` brokers, and :class:`SentinelTransport` (kombu's Sentinel
transport with the same guard) for ``sentinel://`` ones: a failover to a replica raised the
same ``AttributeError`` while the channel restored its unacked messages (in about one
failover of three in ``tests/integration/test_fleet_failover.py``), and the worker stopped
for good. Everything else is kombu's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["Channel", "SentinelChannel", "SentinelTransport", "Transport"]


class _Guarded:
    """What :class:`Channel` and :class:`SentinelChannel` add to kombu's channels: building
    a client on a closed connection is a connection error, and one synchronous client
    serves the channel's calls."""

    connection: Any
    pool: Any

    _sync_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu's, but with one synchronous ``redis.Redis`` per channel (per connection
        pool) instead of a new one for every ack, unacked-index update, publish and task
        event: building a client copies redis-py's ~250 response callbacks, about 0.1 ms of
        the worker's main thread each, three or four times per task. A redis-py client is
        thread-safe (each command takes a connection from the pool); a new pool (after a
        fork or a reconnect) gets a new client."""
        if client:
            yield client
            return
        pool = self.pool
        cached = self._sync_client
        if cached is None or cached.connection_pool is not pool:
            cached = self._sync_client = self._create_client()  # type: ignore[attr-defined]
        yield cached

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class Channel(_Guarded, kombu_redis.Channel):
    """kombu's Redis channel, guarded (:class:`_Guarded`)."""


class SentinelChannel(_Guarded, kombu_redis.SentinelChannel):
    """kombu's Redis Sentinel channel, guarded the same way (its pool asks the sentinels
    for the master, so the reconnect after a failover reaches the new one)."""


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with the guarded :class:`Channel`."""

    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Redis Sentinel transport with the guarded :class:`SentinelChannel`."""

    Channel = SentinelChannel
