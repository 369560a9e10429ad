"""Redis clients for the fleet's own connections, from a ``redis://`` or ``sentinel://`` URL.

The client's result listener and the workers' cancel watcher talk to the result backend's
Redis directly (:mod:`.results`, :mod:`.cancellation`). With Redis Sentinel the backend URL
names the sentinels, as Celery's: ``sentinel://[:password@]host:port[/db]`` — several
joined by ``;`` — and the master's name comes from ``fleet.sentinelMasterName``; the
clients here then ask the sentinels for the master and follow a failover (redis-py's
``Sentinel.master_for``). Other URLs go to ``redis.from_url``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

from ditto_worker.config.fleet import sentinel_parts
from ditto_worker.errors import ConfigError

__all__ = ["async_client", "is_redis_url", "sentinel_parts", "server_address", "sync_client"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "sentinel://")


def is_redis_url(url: str) -> bool:
    """True for a URL the fleet's own Redis clients can use (Redis or Redis Sentinel)."""
    return url.startswith(_REDIS_SCHEMES)


def server_address(url: str) -> str:
    """Where a broker or backend URL points, for messages: ``host:port`` (several joined by
    ``, ``), a socket path, or ``in-process`` — never the user, password or database.

    ``redis://:secret@10.0.0.5:6380/0`` -> ``10.0.0.5:6380``;
    ``sentinel://a:26379;sentinel://b:26379`` -> ``a:26379, b:26379``.
    """
    if url.startswith("memory://") or not url:
        return "in-process"
    places = []
    for part in url.split(";"):
        try:
            split = urlsplit(part.strip())
            if split.scheme == "unix":
                places.append(split.path or "a socket")
                continue
            host = split.hostname or "localhost"
            port = split.port
        except ValueError:  # a malformed port: say nothing more than the scheme
            places.append("an unparsable address")
            continue
        host = f"[{host}]" if ":" in host else host
        places.append(f"{host}:{port}" if port else host)
    return ", ".join(places)


def _master(url: str, master_name: str | None) -> str:
    if not master_name:
        raise ConfigError("a sentinel:// result backend needs fleet.sentinelMasterName")
    return master_name


def sync_client(
    url: str, master_name: str | None = None, sentinel_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> redis.Redis:  # fmt: skip
    """A redis-py client for ``url`` (``kwargs``: socket timeouts, health checks …)."""
    if not url.startswith("sentinel://"):
        return redis.Redis.from_url(url, **kwargs)
    hosts, master = sentinel_parts(url)
    options = {**kwargs, **master}
    sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs, **options)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinel.master_for(_master(url, master_name))  # type: ignore[no-untyped-call]
    return client


def async_client(
    url: str, master_name: str | None = None, sentinel_kwargs: dict[str, Any] | None = None,
    max_connections: int = 4,
) -> aioredis.Redis:  # fmt: skip
    """A ``redis.asyncio`` client for ``url``: a blocking pool of ``max_connections`` on
    Redis; Sentinel's own pool (it follows a failover) on Sentinel."""
    if not url.startswith("sentinel://"):
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=None
        )
        return aioredis.Redis(connection_pool=pool)
    hosts, master = sentinel_parts(url)
    sentinel = AsyncSentinel(hosts, sentinel_kwargs=sentinel_kwargs, **master)  # type: ignore[no-untyped-call]
    client: aioredis.Redis = sentinel.master_for(_master(url, master_name))
    return client
