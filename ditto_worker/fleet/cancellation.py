"""Cooperative cancellation of running node calls (MEM-PY-2, MEM-RUN-2).

Celery's ``revoke(terminate=True)`` is never used: it signals the pool process, which may
by then run another task, and does nothing on the thread and solo pools. Instead:

* the worker keeps a :class:`CancelRegistry` of the calls it is running, each with its
  :class:`~ditto_worker.runtime.cancel.CancelToken` (handed to the plugin in
  ``MemoryCallOptions.cancel``, which interrupts the driver — e.g.
  ``sqlite3.Connection.interrupt``) and the caller's deadline;
* a caller cancels by execution id: on a Redis fleet the client sets the key
  ``ditto:cancel:<executionId>`` (expiring with the call's deadline) and publishes the id
  on the channel ``ditto:cancel``; each worker process runs one :class:`RedisCancelWatcher`
  thread subscribed to that channel. In-process (no broker), the client cancels the
  registry directly;
* a call whose id is already flagged when it starts is answered ``cancelled`` without
  running — so a cancelled call never runs, even if the worker missed the revoke;
* when a running call's deadline passes, the watcher cancels its token too: work whose
  caller has given up stops.

What a cancel means for a write: the plugin's transaction is rolled back if the cancel
arrives before COMMIT; a committed write is never undone (MEM-RUN-2, MEM-ERR-5). A batch
is committed whole or not at all (MEM-PY-11).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from ditto_worker.fleet.redis_urls import sync_client
from ditto_worker.runtime.cancel import CancelRegistry, local_registry

__all__ = [
    "CANCEL_CHANNEL",
    "CANCEL_KEY_PREFIX",
    "CancelRegistry",
    "RedisCancelWatcher",
    "cancel_key",
    "local_registry",
]

log = logging.getLogger(__name__)

CANCEL_CHANNEL = "ditto:cancel"
"""Pub/sub channel on which cancelled execution ids are announced."""
CANCEL_KEY_PREFIX = "ditto:cancel:"
"""Key prefix of the per-call cancel flag (value ``1``, expiring with the call)."""
_TICK_S = 0.1
_PING = "ditto-cancel-watch"
COVER_MARGIN_S = 5.0
"""How long after its subscription a watcher vouches for calls sent (clock skew margin)."""
PONG_WITHIN_S = 3.0
"""A watcher whose ping went unanswered this long vouches for nothing."""
PING_EVERY_S = 1.0


def cancel_key(execution_id: str) -> str:
    """The Redis key flagging ``execution_id`` as cancelled."""
    return CANCEL_KEY_PREFIX + execution_id


class RedisCancelWatcher:
    """One daemon thread per worker process: cancel announcements and deadlines.

    Args:
        url: the Redis URL of the fleet's result backend (cancel flags live there):
            ``redis://`` … or ``sentinel://`` (then ``sentinel_master`` names the master).
        registry: the registry to act on (default: this process's).
    """

    def __init__(
        self, url: str, registry: CancelRegistry | None = None, sentinel_master: str | None = None,
        sentinel_kwargs: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.registry = registry if registry is not None else local_registry()  # (len 0 is falsy)
        if url.startswith("sentinel://"):  # Sentinel's pools follow a failover
            self._client = sync_client(url, sentinel_master, sentinel_kwargs, socket_timeout=5)
            self._pubsub_client = sync_client(
                url, sentinel_master, sentinel_kwargs, socket_timeout=5, health_check_interval=30
            )
        else:
            # one connection for flag reads (a lock-free pool would grow with the pool size)
            pool = redis.BlockingConnectionPool.from_url(
                url, max_connections=1, timeout=5, socket_timeout=5, health_check_interval=30
            )
            self._client = redis.Redis(connection_pool=pool)
            self._pubsub_client = redis.Redis.from_url(url, socket_timeout=5,
                                                       health_check_interval=30)  # fmt: skip
        self._stop = threading.Event()
        self._failing = False
        self._since: float | None = None  # announcements complete from this time on
        self._last_pong = 0.0
        self._thread = threading.Thread(target=self._run, name="ditto-cancel-watch", daemon=True)
        self._thread.start()

    def covers(self, sent_at: float | None) -> bool:
        """True when every cancel of a call sent at ``sent_at`` (the client's clock) has
        reached this watcher: its subscription was confirmed more than
        :data:`COVER_MARGIN_S` before the send, and it answered a ping within the last
        :data:`PONG_WITHIN_S` seconds (a silently dead connection stops covering).

        Then the per-call flag read can be skipped for a call without effects: a cancel
        announced before it starts has already flagged it in the registry."""
        since = self._since
        return (
            sent_at is not None
            and since is not None
            and sent_at > since + COVER_MARGIN_S
            and time.time() - self._last_pong < PONG_WITHIN_S
        )

    def is_flagged(self, execution_id: str) -> bool:
        """True when ``execution_id`` was cancelled before this worker took it."""
        try:
            return bool(self._client.exists(cancel_key(execution_id)))
        except redis.RedisError:
            log.warning("cannot read the cancel flag of %s", execution_id, exc_info=True)
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except redis.RedisError as exc:
                if not self._failing:  # once per outage, not once per retry
                    log.warning("cancel watcher lost Redis (%s); retrying", type(exc).__name__)
                self._failing = True
                self._stop.wait(0.5)

    def _listen(self) -> None:
        pubsub = self._pubsub_client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(CANCEL_CHANNEL)
            self._failing = False
            pinged = 0.0
            while not self._stop.is_set():
                now = time.time()
                if self._since is None and pubsub.subscribed:
                    self._since = now
                if now - pinged >= PING_EVERY_S:
                    pubsub.ping(_PING)
                    pinged = now
                message = pubsub.get_message(timeout=_TICK_S)
                if message is not None:
                    self._handle(message)
                self.registry.expire_deadlines()
        finally:
            self._since = None
            pubsub.close()

    def _handle(self, message: dict[str, Any]) -> None:
        data = message.get("data")
        text = data.decode() if isinstance(data, bytes) else str(data)
        if message.get("type") == "pong" and text == _PING:
            self._last_pong = time.time()
        elif message.get("type") == "message":
            # the channel is server-wide; the flag key lives in this fleet's database:
            # another fleet's cancel of the same id is ignored
            if self.is_flagged(text):
                self.registry.cancel(text, ttl_s=60.0)

    def close(self) -> None:
        """Stop the thread and close the connection."""
        self._stop.set()
        self._thread.join(2)
        self._client.close()
        self._pubsub_client.close()
