"""When a worker for a queue was last seen: per-queue heartbeat keys on the fleet's Redis.

A call sent to a queue that no worker consumes waits its whole timeout; "the call timed
out" alone does not say why. So each worker's main process refreshes, every
:data:`HEARTBEAT_EVERY_S` seconds, one key per queue it consumes on the result backend's
Redis (where the cancel flags live, :mod:`.cancellation`)::

    ditto:heartbeat:<queue>  ->  {"at": <epoch seconds>, "hostname": "celery@host"}

with a TTL of :data:`HEARTBEAT_TTL_S` (a week: the key says when a worker was *last*
seen, long after it stopped). The client reads the key only when a call times out and
adds what it says to the timeout's message (:func:`describe_last_seen`); no call pays for
it otherwise. The value holds a time and Celery's node name, never call data.

Started on Celery's ``worker_ready`` signal (the main process, once the consumer is
ready), for the queues the consumer reads at each refresh (``celery control
add_consumer`` included); stopped on ``worker_shutdown``. A Redis outage is logged once
per outage; the heartbeat resumes when Redis is back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import redis

__all__ = [
    "HEARTBEAT_EVERY_S",
    "HEARTBEAT_KEY_PREFIX",
    "HEARTBEAT_TTL_S",
    "QueueHeartbeat",
    "consumed_queues",
    "describe_last_seen",
    "heartbeat_key",
]

log = logging.getLogger(__name__)

HEARTBEAT_KEY_PREFIX = "ditto:heartbeat:"
"""Key prefix of a queue's heartbeat (the queue name follows)."""
HEARTBEAT_EVERY_S = 5.0
"""How often a worker refreshes its queues' keys (seconds)."""
HEARTBEAT_TTL_S = 7 * 24 * 3600
"""How long a key outlives its worker's last refresh (seconds): a week."""
ALIVE_WITHIN_S = 3 * HEARTBEAT_EVERY_S
"""A key refreshed this recently means a worker consumes the queue now."""


def heartbeat_key(queue: str) -> str:
    """The Redis key holding when a worker for ``queue`` was last seen."""
    return HEARTBEAT_KEY_PREFIX + queue


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def describe_last_seen(queue: str, raw: bytes | str | None, now: float | None = None) -> str:
    """One sentence for a timeout's message: when a worker for ``queue`` was last seen.

    Args:
        queue: the queue the call was sent to (``memory.get``).
        raw: the heartbeat key's value (``None``: no key).
        now: the current time (epoch seconds); default ``time.time()``.

    Returns:
        e.g. ``no worker has consumed the queue 'memory.get' in the last 7 days``, ``a
        worker for the queue 'memory.get' was last seen 3 s ago (celery@a): it is running
        but did not answer in time``, or ``… was last seen 2026-12-01T02:10:00Z (2 h ago)``.
    """
    now = time.time() if now is None else now
    if raw is None:
        days = HEARTBEAT_TTL_S // 86400
        return f"no worker has consumed the queue '{queue}' in the last {days} days"
    try:
        value = json.loads(raw)
        at = float(value["at"])
        host = str(value.get("hostname") or "")[:200]
    except (ValueError, TypeError, KeyError):
        return f"the queue '{queue}' has an unreadable heartbeat"
    who = f" ({host})" if host else ""
    later = f", {host}" if host else ""
    if now - at <= ALIVE_WITHIN_S:
        return (
            f"a worker for the queue '{queue}' was last seen {_ago(now - at)}{who}: "
            "it is running but did not answer in time"
        )
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"a worker for the queue '{queue}' was last seen {stamp} ({_ago(now - at)}{later}); "
        "none is running now"
    )


class QueueHeartbeat:
    """One daemon thread in a worker's main process refreshing its queues' heartbeats.

    Args:
        client: a redis-py client on the result backend's Redis.
        queues: returns the names of the queues the worker consumes now.
        hostname: Celery's node name (``celery@host``), stored with the time.
        every_s: seconds between refreshes.
    """

    def __init__(
        self, client: redis.Redis, queues: Callable[[], Iterable[str]], hostname: str = "",
        every_s: float = HEARTBEAT_EVERY_S,
    ) -> None:  # fmt: skip
        self._client = client
        self._queues = queues
        self._hostname = hostname
        self._every_s = every_s
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="ditto-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """Refresh every consumed queue's key once (one pipelined round trip).

        Raises:
            redis.RedisError: Redis is unreachable.
        """
        value = json.dumps({"at": time.time(), "hostname": self._hostname})
        pipe = self._client.pipeline(transaction=False)
        for queue in sorted(set(self._queues())):
            pipe.set(heartbeat_key(queue), value, ex=HEARTBEAT_TTL_S)
        pipe.execute()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
                if self._failing:
                    log.info("heartbeat: Redis is back")
                self._failing = False
            except redis.RedisError as exc:
                if not self._failing:  # once per outage, not once per refresh
                    log.warning("heartbeat: Redis unreachable (%s); retrying", type(exc).__name__)
                self._failing = True
            except Exception as exc:  # never let the thread die silently
                log.warning("heartbeat failed (%s)", type(exc).__name__)
            self._stop.wait(self._every_s)

    def close(self) -> None:
        """Stop the thread and close the connection."""
        self._stop.set()
        self._thread.join(2)
        self._client.close()


def consumed_queues(consumer: Any) -> list[str]:
    """The queue names a Celery consumer reads now (none before it is connected)."""
    task_consumer = getattr(consumer, "task_consumer", None)
    return [str(q.name) for q in getattr(task_consumer, "queues", None) or []]
