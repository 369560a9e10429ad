"""Where cache-mode contexts live: the :class:`ContextCache` port and the in-process cache.

A cache stores, per key, the context's items as their wire JSON texts (in context order),
the version and an expiry. Two implementations keep the same semantics (SPEC.md
MEM-CTX-2):

* :class:`~ditto_worker.context.redis_cache.RedisContextCache` — one Redis key per
  context, updated by one Lua script (the fleet);
* :class:`InProcessContextCache` — a dict in this process, for the embedded runtime
  when no Redis is configured (``workers.context.redisUrl`` empty). It is per process:
  two worker processes do not share it.

``update`` applies already collapsed ingress (distinct ids, merge order; see
:mod:`ditto_worker.context.merge`): same-id items are replaced in place, new ids appended;
the version goes up by one (a missing or expired context starts at 0), the TTL restarts.
Limits over the merged context are checked before anything is written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ditto_worker.config.context import ContextLimits
from ditto_worker.context.merge import merged_over_limit
from ditto_worker.runtime.cancel import CancelToken

__all__ = ["CachedContext", "ContextCache", "InProcessContextCache"]


@dataclass(frozen=True)
class CachedContext:
    """One context as a cache holds it.

    Attributes:
        version: updates applied since the context was created (>= 1).
        items_json: the items as one JSON array (UTF-8), in context order.
    """

    version: int
    items_json: bytes


@runtime_checkable
class ContextCache(Protocol):
    """The store of cache-mode contexts (keys are built by the worker from the trusted
    scope; the cache never sees a scope or a request)."""

    def update(
        self,
        key: str,
        entries: Sequence[tuple[str, str]],
        *,
        ttl_s: float,
        limits: ContextLimits,
        timeout_s: float,
        cancel: CancelToken | None = None,
    ) -> CachedContext:
        """Merge ``entries`` (``(id, item_json)``, ids distinct) into ``key`` atomically.

        Args:
            key: the context's key.
            entries: collapsed ingress in merge order.
            ttl_s: seconds the context lives from now.
            limits: checked on the merged context before any write.
            timeout_s: longest wait for the backing store, seconds.
            cancel: the call's cancel token; a cancel ends a wait on the store at once.

        Returns:
            The context after the update.

        Raises:
            NodeError: ``INVALID_INPUT`` naming ``maxItems`` / ``maxContextBytes`` (nothing
                written); ``CONTEXT_UNAVAILABLE`` for a store failure; ``CONTEXT_CANCELLED``.
        """
        ...

    def load(
        self, key: str, *, timeout_s: float, cancel: CancelToken | None = None
    ) -> CachedContext | None:
        """The context at ``key``, or ``None`` when missing or expired (TTL unchanged).

        Raises:
            NodeError: ``CONTEXT_UNAVAILABLE`` for a store failure; ``CONTEXT_CANCELLED``.
        """
        ...

    def close(self) -> None:
        """Release connections (idempotent)."""
        ...


@dataclass
class _Entry:
    version: int = 0
    items: list[bytes] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    total: int = 0
    expires_at: float = 0.0


def _cached(entry: _Entry) -> CachedContext:
    return CachedContext(entry.version, b"[" + b",".join(entry.items) + b"]")


class InProcessContextCache:
    """:class:`ContextCache` in a dict of this process (thread-safe, one lock).

    Expiry uses ``clock`` (``time.monotonic`` seconds): an entry past its expiry is gone
    for ``load`` and starts over at version 0 for ``update``; expired entries are swept
    every ``sweep_every`` updates so memory follows the live contexts.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, sweep_every: int = 1024
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._sweep_every = sweep_every
        self._updates = 0

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires_at <= now:
            del self._entries[key]
            return None
        return entry

    def update(
        self,
        key: str,
        entries: Sequence[tuple[str, str]],
        *,
        ttl_s: float,
        limits: ContextLimits,
        timeout_s: float,
        cancel: CancelToken | None = None,
    ) -> CachedContext:
        """See :meth:`ContextCache.update` (``timeout_s`` and ``cancel`` are not needed:
        nothing here waits)."""
        with self._lock:
            now = self._clock()
            entry = self._live(key, now) or _Entry()
            count, total = len(entry.items), entry.total
            changes: list[tuple[str, bytes, int, int | None]] = []
            for item_id, text in entries:
                data = text.encode()
                size = len(data)
                at = entry.index.get(item_id)
                if at is None:
                    count += 1
                    total += size
                else:
                    total += size - entry.sizes[at]
                changes.append((item_id, data, size, at))
            if count > limits.max_items:
                raise merged_over_limit("maxItems", count, limits)
            if total > limits.max_context_bytes:
                raise merged_over_limit("maxContextBytes", total, limits)
            for item_id, data, size, at in changes:
                if at is None:
                    entry.index[item_id] = len(entry.items)
                    entry.items.append(data)
                    entry.sizes.append(size)
                else:
                    entry.items[at], entry.sizes[at] = data, size
            entry.total, entry.version = total, entry.version + 1
            entry.expires_at = now + ttl_s
            self._entries[key] = entry
            self._updates += 1
            if self._updates % self._sweep_every == 0:
                self._sweep(now)
            return _cached(entry)

    def load(
        self, key: str, *, timeout_s: float, cancel: CancelToken | None = None
    ) -> CachedContext | None:
        """See :meth:`ContextCache.load`."""
        with self._lock:
            entry = self._live(key, self._clock())
            return None if entry is None else _cached(entry)

    def _sweep(self, now: float) -> None:
        for key in [k for k, e in self._entries.items() if e.expires_at <= now]:
            del self._entries[key]

    def __len__(self) -> int:
        """Live and not yet swept contexts (for tests and status)."""
        return len(self._entries)

    def close(self) -> None:
        """Drop every context."""
        with self._lock:
            self._entries.clear()
