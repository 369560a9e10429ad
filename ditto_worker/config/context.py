"""``workers.context`` settings: where the cache lives, TTLs and limits (SPEC.md MEM-CTX-2).

``redisUrl`` comes from ``ditto.yaml`` (normally ``${DITTO_WORKER_CONTEXT_REDIS_URL:-}``)
or the environment variable ``DITTO_WORKER_CONTEXT_REDIS_URL``, which overrides it; empty
means no Redis: the embedded in-process cache, same semantics (MEM-CTX-2). The defaults
below are the ones ``ditto.yaml`` and the README document.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["REDIS_URL_ENV", "SENTINEL_MASTER_ENV", "ContextLimits", "ContextWorkerSettings"]

REDIS_URL_ENV: Final = "DITTO_WORKER_CONTEXT_REDIS_URL"
"""Environment variable of the context cache's Redis URL (the seed's name)."""

SENTINEL_MASTER_ENV: Final = "DITTO_WORKER_CONTEXT_SENTINEL_MASTER_NAME"
"""Environment variable of the monitored master's name for a ``sentinel://`` cache URL."""


@dataclass(frozen=True)
class ContextLimits:
    """The size limits every context obeys, cached or pure (bytes are UTF-8 bytes of an
    item's compact wire JSON; see :class:`~ditto_worker.context.contracts.ContextItem`).

    Attributes:
        max_items: most items in one context.
        max_item_bytes: largest item, bytes.
        max_context_bytes: most bytes of all items of one context together.
    """

    max_items: int
    max_item_bytes: int
    max_context_bytes: int


class ContextWorkerSettings(BaseModel):
    """``workers.context:`` — the CONTEXT worker (``CONTEXT.UPDATE``, ``CONTEXT.LOAD``)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,  # built when a config is first loaded, not at import
    )

    redis_url: str = Field(
        default="",
        description="Redis of the context cache (redis://, rediss://, or Redis Sentinel: "
        "sentinel://[:password@]host:port[/db], several joined by ';', with "
        "sentinelMasterName; may carry a password, so set it through the env "
        "DITTO_WORKER_CONTEXT_REDIS_URL). Empty: the in-process cache of the embedded runtime.",
    )
    sentinel_master_name: str = Field(
        default="",
        description="Redis Sentinel: the monitored master's name, required with a "
        "sentinel:// redisUrl (env DITTO_WORKER_CONTEXT_SENTINEL_MASTER_NAME). The cache asks "
        "the sentinels for the master on every new connection, so it follows a failover "
        "(redis-py's Sentinel support, as Celery's broker and result backend use it).",
    )
    ttl_s: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds a cached context lives after its last update (an update "
        "without ttlS).",
    )
    max_ttl_s: float = Field(
        default=86400.0, gt=0, description="Largest ttlS a call may ask for, seconds."
    )
    max_items: int = Field(default=1000, ge=1, description="Most items in one context.")
    max_item_bytes: int = Field(
        default=65536, ge=64, description="Largest item, bytes of its compact JSON."
    )
    max_context_bytes: int = Field(
        default=1048576, ge=64, description="Most bytes of one context's items together."
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest wait for Redis (connect, and each reply) of a call without a "
        "deadline; a call with a deadline waits at most until its deadline.",
    )
    concurrency: int = Field(
        default=8, ge=1, description="Concurrent CONTEXT calls one worker process serves."
    )
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="threads",
        description="Celery pool of `ditto-worker worker --nodes context`: threads (calls "
        "wait on Redis; one process, one connection list, one in-process cache).",
    )

    @property
    def limits(self) -> ContextLimits:
        """The size limits as one value."""
        return ContextLimits(self.max_items, self.max_item_bytes, self.max_context_bytes)

    def model_post_init(self, __context: object) -> None:
        if self.ttl_s > self.max_ttl_s:
            raise ValueError("workers.context.ttlS must not exceed maxTtlS")
        if self.max_item_bytes > self.max_context_bytes:
            raise ValueError("workers.context.maxItemBytes must not exceed maxContextBytes")
        if self.redis_url.startswith("sentinel://") and not self.sentinel_master_name:
            raise ValueError(
                "workers.context.redisUrl is a sentinel:// URL: set "
                "workers.context.sentinelMasterName (env DITTO_WORKER_CONTEXT_SENTINEL_MASTER_NAME)"
            )

    @classmethod
    def from_env(
        cls, data: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None
    ) -> ContextWorkerSettings:
        """The settings of a ``workers.context`` mapping (``None``: all defaults) with
        ``DITTO_WORKER_CONTEXT_REDIS_URL`` and ``DITTO_WORKER_CONTEXT_SENTINEL_MASTER_NAME``
        (from ``env``, default ``os.environ``) over ``redisUrl`` / ``sentinelMasterName``
        when set and non-empty.

        Raises:
            pydantic.ValidationError: an unknown key or a bad value.
        """
        env = os.environ if env is None else env
        raw = dict(data or {})
        if env.get(REDIS_URL_ENV):
            raw["redisUrl"] = env[REDIS_URL_ENV]
        if env.get(SENTINEL_MASTER_ENV):
            raw["sentinelMasterName"] = env[SENTINEL_MASTER_ENV]
        return cls.model_validate(raw)
