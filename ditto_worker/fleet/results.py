"""One result listener per client: Redis pub/sub on one event loop in one thread.

Celery's Redis result backend stores a task's result under ``celery-task-meta-<id>`` and
publishes it on a channel of the same name. Celery's own client subscribes one channel per
sent task and keeps it until ``get()`` is called (celery#5320), and its ``AsyncResult`` has
no awaitable form (celery#6603). :class:`ResultListener` replaces both:

* one ``redis.asyncio`` pub/sub connection and a small connection pool, driven by one event
  loop in one daemon thread, serve every ``invoke`` and ``ainvoke`` of the client;
* a call subscribes its channel *before* its message is sent (waiting for Redis to confirm),
  then reads the stored key once (a result stored before the subscription, e.g. for a
  re-sent execution id, is not missed), and unsubscribes when it ends — result, timeout or
  cancel — so no channel outlives its call;
* the pub/sub connection always holds one private channel of the listener's own, and one
  reader task reads it for the client's whole life: the connection is never idle-unsubscribed,
  so no command ever reads from it concurrently with the reader;
* after a lost connection the listener reconnects, re-subscribes the pending channels and
  re-reads their keys.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future as ThreadFuture
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["RESULT_KEY_PREFIX", "ResultListener"]

log = logging.getLogger(__name__)

RESULT_KEY_PREFIX = "celery-task-meta-"
"""Celery's Redis result key (and channel) prefix."""

T = TypeVar("T")


class ResultListener:
    """Awaits Celery task results stored in Redis, for many concurrent calls.

    Args:
        url: the result backend's Redis URL (``redis://`` or ``rediss://``).
        max_connections: size of the pool used for key reads and cancel flags (the
            pub/sub connection is one more); calls wait for a free connection.
    """

    def __init__(self, url: str, *, max_connections: int = 4) -> None:
        self.url = url
        self._max_connections = max_connections
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ditto-results", daemon=True)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._releases: set[asyncio.Task[None]] = set()  # background unsubscribes / reads
        self._client: aioredis.Redis | None = None
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._home = f"ditto:listener:{uuid.uuid4().hex}"
        self._thread.start()
        self._started.wait()

    # --- thread / loop plumbing -----------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url, max_connections=self._max_connections, timeout=None
        )
        self._client = aioredis.Redis(connection_pool=pool)
        self._pubsub = self._client.pubsub()
        self._lock = asyncio.Lock()
        self._started.set()
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> ThreadFuture[T]:
        """Run ``coro`` on the listener's loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    @property
    def client(self) -> aioredis.Redis:
        """The listener's Redis client (use only from the listener's loop)."""
        assert self._client is not None
        return self._client

    # --- per call (on the listener loop) --------------------------------------------------

    async def subscribe(self, task_id: str) -> asyncio.Future[dict[str, Any]]:
        """Subscribe ``task_id``'s result channel; returns the future of its result meta.

        Returns once the SUBSCRIBE is written, without waiting for Redis to confirm it (a
        busy loop confirms late, and a call must not wait on that). No result can be
        missed: when the confirmation arrives the stored result key is read too, and
        Celery stores the key before (atomically with) publishing it.
        """
        channel = RESULT_KEY_PREFIX + task_id
        result: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._pending[channel] = result
        assert self._lock is not None
        async with self._lock:
            if not self._pubsub.subscribed:
                await self._pubsub.subscribe(self._home)  # keeps the connection subscribed
            await self._pubsub.subscribe(channel)
        if self._reader is None or self._reader.done():
            self._reader = self.loop.create_task(self._read())
        return result

    async def read_stored(self, task_id: str) -> None:
        """Resolve the call's future from the stored key if the result is already there."""
        channel = RESULT_KEY_PREFIX + task_id
        raw = await self.client.get(channel)
        if raw is not None:
            self._resolve(channel, raw)

    def release_soon(self, task_id: str) -> None:
        """Forget the call now and unsubscribe its channel in the background (on the
        listener's loop; the caller does not wait for Redis)."""
        self._pending.pop(RESULT_KEY_PREFIX + task_id, None)
        task = self.loop.create_task(self.release(task_id))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _read_stored_quietly(self, channel: str) -> None:
        try:
            await self.read_stored(channel.removeprefix(RESULT_KEY_PREFIX))
        except RedisError:  # the reader recovers and reads every pending key again
            log.warning("could not read the stored result of %s", channel)

    async def release(self, task_id: str) -> None:
        """Forget the call and unsubscribe its channel."""
        channel = RESULT_KEY_PREFIX + task_id
        self._pending.pop(channel, None)
        assert self._lock is not None
        try:
            async with self._lock:
                await self._pubsub.unsubscribe(channel)
        except RedisError:
            log.warning("could not unsubscribe %s", channel, exc_info=True)

    # --- the reader -----------------------------------------------------------------------

    def _resolve(self, channel: str, raw: bytes | str) -> None:
        future = self._pending.get(channel)
        if future is None or future.done():
            return
        try:
            meta = json.loads(raw)
        except (ValueError, TypeError):
            log.warning("undecodable result on %s", channel)
            return
        if isinstance(meta, dict):
            future.set_result(meta)

    def _confirm(self, channel: str) -> None:
        """The subscription is active: read the key, in case the result came before it."""
        future = self._pending.get(channel)
        if future is not None and not future.done():
            task = self.loop.create_task(self._read_stored_quietly(channel))
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _read(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except RedisError:
                log.warning("result listener lost Redis; reconnecting", exc_info=True)
                await asyncio.sleep(0.2)
                await self._recover()
                continue
            if message is None:
                continue
            channel = message.get("channel")
            channel = channel.decode() if isinstance(channel, bytes) else str(channel)
            if message.get("type") == "subscribe":
                self._confirm(channel)
            elif message.get("type") == "message":
                self._resolve(channel, message["data"])

    async def _recover(self) -> None:
        try:
            assert self._lock is not None
            async with self._lock:
                channels = list(self._pending)
                await self._pubsub.subscribe(self._home, *channels)
            for channel in channels:
                await self.read_stored(channel.removeprefix(RESULT_KEY_PREFIX))
        except RedisError:
            log.warning("result listener still cannot reach Redis", exc_info=True)

    # --- shutdown -------------------------------------------------------------------------

    async def _aclose(self) -> None:
        for future in list(self._pending.values()):
            future.cancel()
        if self._releases:  # let background unsubscribes finish (bounded)
            await asyncio.wait(list(self._releases), timeout=2.0)
        if self._reader is not None:
            self._reader.cancel()
        await self._pubsub.aclose()
        await self.client.aclose(close_connection_pool=True)  # the pool is ours to close

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        if not self._thread.is_alive():
            return
        try:
            self.submit(self._aclose()).result(5)
        except Exception:  # closing a broken connection must not fail close()
            log.warning("result listener did not close cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    @property
    def pending(self) -> int:
        """Calls currently awaiting a result."""
        return len(self._pending)
