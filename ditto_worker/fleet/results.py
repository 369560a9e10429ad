"""One result listener per client: Redis pub/sub on one event loop in one thread.

Celery's Redis result backend stores a task's result under ``celery-task-meta-<id>`` and
publishes it on a channel of the same name. Celery's own client subscribes one channel per
sent task and keeps it until ``get()`` is called (celery#5320), and its ``AsyncResult`` has
no awaitable form (celery#6603). :class:`ResultListener` replaces both:

* one ``redis.asyncio`` pub/sub connection and a small connection pool, driven by one event
  loop in one daemon thread, serve every ``invoke`` and ``ainvoke`` of the client;
* execution ids the client makes start with the listener's own prefix
  (:meth:`ResultListener.new_id`), and one pattern subscription
  (``PSUBSCRIBE celery-task-meta-<prefix>*``), once confirmed, receives all their results:
  such a call costs no Redis command of its own on the result side;
* a call with an execution id of the caller's choosing — and any call made before the
  pattern subscription is confirmed — subscribes its own channel before its message is
  sent, and the stored key is read when Redis confirms that subscription (a result stored
  before it, e.g. for a re-sent execution id, is not missed); it is unsubscribed in the
  background when the call ends;
* a waiting call is a thread-safe future: a sync ``invoke`` blocks on it in its own thread
  (its message is published from that thread too), an ``ainvoke`` awaits it on its loop;
* the pub/sub connection always holds one private channel of the listener's own, and one
  reader task reads it for the client's whole life;
* after a lost connection the listener reconnects, subscribes again, and reads the stored
  key of every waiting call once the subscriptions are confirmed; a call still unanswered
  at its deadline after such a loss learns of it (:meth:`ResultListener.lost_since`) and
  ends ``FLEET_UNAVAILABLE``, not as a slow node's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future as ThreadFuture
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ditto_worker.fleet.redis_urls import async_client

__all__ = ["RESULT_KEY_PREFIX", "ResultListener"]

log = logging.getLogger(__name__)

RESULT_KEY_PREFIX = "celery-task-meta-"
"""Celery's Redis result key (and channel) prefix."""

T = TypeVar("T")
Meta = dict[str, Any]

_ENTROPY_BYTES = 4096
"""Random bytes read at once for execution ids (16 per id)."""

_NOT_FINAL = frozenset({"PENDING", "RECEIVED", "STARTED", "RETRY"})
"""Celery states a call does not end on (``celery.states.UNREADY_STATES``): node tasks are
never retried (MEM-ERR-5), but Celery's cold shutdown stores RETRY for a running call that
its pool process then finishes (:mod:`ditto_worker.fleet.shutdown`)."""


class ResultListener:
    """Awaits Celery task results stored in Redis, for many concurrent calls.

    Args:
        url: the result backend's Redis URL (``redis://``, ``rediss://`` or ``sentinel://``).
        max_connections: size of the pool used for key reads and cancel flags (the
            pub/sub connection is one more); calls wait for a free connection (Redis;
            Sentinel's pool follows failovers and does not block).
        sentinel_master: ``fleet.sentinelMasterName`` for a ``sentinel://`` URL.
        sentinel_kwargs: connection options for the sentinels themselves.
    """

    def __init__(
        self, url: str, *, max_connections: int = 4, sentinel_master: str | None = None,
        sentinel_kwargs: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.url = url
        self._max_connections = max_connections
        self._sentinel = (sentinel_master, sentinel_kwargs)
        self.prefix = secrets.token_hex(4)  # the first group of every id this client makes
        self._pattern = f"{RESULT_KEY_PREFIX}{self.prefix}-*"
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ditto-results", daemon=True)
        self._waiting: dict[str, ThreadFuture[Meta]] = {}
        self._explicit: set[str] = set()  # channels subscribed one by one
        self._guard = threading.Lock()  # _waiting / _explicit, from any thread
        self._entropy_lock = threading.Lock()  # new_id's random bytes, from any thread
        self._entropy = b""
        self._entropy_at = 0
        self._pattern_ready = False  # the pattern subscription is confirmed (loop thread)
        self._background: set[asyncio.Task[None]] = set()
        self._client: aioredis.Redis | None = None
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._home = f"ditto:listener:{uuid.uuid4().hex}"
        self._down_since: float | None = None  # time.monotonic() when Redis was lost
        self._losses = 0  # outages seen so far (a waiting call compares it: lost_since)
        self._thread.start()
        self._started.wait()

    # --- thread / loop plumbing -----------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        master, sentinel_kwargs = self._sentinel
        self._client = async_client(self.url, master, sentinel_kwargs, self._max_connections)
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

    def new_id(self) -> str:
        """A fresh execution id (a uuid4 whose first group is this listener's prefix) whose
        result the pattern subscription receives.

        Its random part comes from ``os.urandom`` as a uuid4's does, read 4 KiB at a time
        (256 ids): each ``os.urandom`` call lets go of the GIL, and in a busy process
        (the HTTP gateway at 100 callers) getting it back cost about 1 ms per call."""
        with self._entropy_lock:
            if self._entropy_at + 16 > len(self._entropy):
                self._entropy, self._entropy_at = os.urandom(_ENTROPY_BYTES), 0
            block, at = self._entropy, self._entropy_at  # the block this slice belongs to
            self._entropy_at = at + 16
        rest = uuid.UUID(bytes=block[at : at + 16], version=4).hex
        return f"{self.prefix}-{rest[8:12]}-{rest[12:16]}-{rest[16:20]}-{rest[20:]}"

    # --- per call (any thread) ------------------------------------------------------------

    def expect(self, task_id: str) -> tuple[ThreadFuture[Meta], ThreadFuture[None] | None]:
        """Start waiting for ``task_id``'s result, before its message is sent.

        Returns:
            ``(result, setup)``: ``result`` resolves to the task's result meta (Celery's
            ``{"status", "result", …}``); ``setup`` is ``None`` when nothing has to be
            waited for (an id of this client's, once the pattern subscription is
            confirmed), else a future the caller waits on before sending: the call's own
            channel being subscribed (an id of the caller's choosing, or any id until the
            pattern subscription is confirmed — a call never waits for that). Call
            :meth:`forget` when the call ends.
        """
        channel = RESULT_KEY_PREFIX + task_id
        result: ThreadFuture[Meta] = ThreadFuture()
        ours = task_id.startswith(self.prefix + "-") and self._pattern_ready
        with self._guard:
            self._waiting[channel] = result
            if not ours:
                self._explicit.add(channel)
        if ours:
            return result, None
        return result, self.submit(self._setup(channel))

    def forget(self, task_id: str) -> None:
        """The call ended: stop waiting (its future, if still unresolved, is cancelled) and
        unsubscribe its own channel in the background."""
        channel = RESULT_KEY_PREFIX + task_id
        with self._guard:
            future = self._waiting.pop(channel, None)
            explicit = channel in self._explicit
            self._explicit.discard(channel)
        if future is not None:
            future.cancel()  # a no-op once resolved; tells a batch its call has ended
        if explicit:  # the coroutine is made on the loop: a closed loop makes none
            with contextlib.suppress(RuntimeError):  # closed: nothing left to unsubscribe
                self.loop.call_soon_threadsafe(lambda: self._spawn(self._unsubscribe(channel)))

    def waiting(self, task_id: str) -> ThreadFuture[Meta] | None:
        """The future of a call awaiting ``task_id``'s result, or ``None``."""
        with self._guard:
            return self._waiting.get(RESULT_KEY_PREFIX + task_id)

    def deliver(self, task_id: str, meta: Meta) -> None:
        """Resolve the call awaiting ``task_id`` with ``meta`` (a result that reached the
        client another way: one of a batch's, :mod:`ditto_worker.fleet.coalescing`)."""
        future = self.waiting(task_id)
        if future is not None and not future.done():
            with contextlib.suppress(Exception):  # resolved or cancelled concurrently
                future.set_result(meta)

    @property
    def losses(self) -> int:
        """How many times the listener has lost Redis so far (a mark for
        :meth:`lost_since`)."""
        return self._losses

    def lost_since(self, mark: int) -> bool:
        """True when Redis was lost after :attr:`losses` was ``mark``, or is lost now: a
        call that waited meanwhile may have missed its reply (the worker could not store
        it, or stored it in a server that has since lost it)."""
        return self._losses != mark or self._down_since is not None

    @property
    def ready(self) -> bool:
        """True once the pattern subscription is confirmed (ids of :meth:`new_id` need no
        subscription of their own)."""
        return self._pattern_ready

    # --- on the loop ----------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _setup(self, channel: str) -> None:
        """Subscribe ``channel`` (written, not confirmed: the confirmation reads the stored
        key) and, the first time, the listener's own channel and pattern."""
        assert self._lock is not None
        async with self._lock:
            if not self._pubsub.subscribed:
                await self._pubsub.subscribe(self._home)  # keeps the connection subscribed
                await self._pubsub.psubscribe(self._pattern)
            await self._pubsub.subscribe(channel)
        if self._reader is None or self._reader.done():
            self._reader = self.loop.create_task(self._read())

    async def _unsubscribe(self, channel: str) -> None:
        assert self._lock is not None
        try:
            async with self._lock:
                await self._pubsub.unsubscribe(channel)
        except RedisError:
            log.debug("could not unsubscribe a result channel")  # the call already ended

    async def read_stored(self, channel: str) -> None:
        """Resolve ``channel``'s waiting call from the stored key if the result is there."""
        raw = await self.client.get(channel)
        if raw is not None:
            self._resolve(channel, raw)

    async def _read_stored_quietly(self, channels: list[str]) -> None:
        try:
            for channel in channels:
                await self.read_stored(channel)
        except RedisError:  # the reader recovers and reads every waiting key again
            log.warning("could not read stored results")

    def _resolve(self, channel: str, raw: bytes | str) -> None:
        with self._guard:
            future = self._waiting.get(channel)
        if future is None or future.done():
            return
        try:
            meta = json.loads(raw)
        except (ValueError, TypeError):
            log.warning("undecodable result on a result channel")
            return
        if isinstance(meta, dict) and meta.get("status") in _NOT_FINAL:
            return  # e.g. RETRY, stored by a cold shutdown while the call still runs
        if isinstance(meta, dict) and not future.done():
            try:
                future.set_result(meta)
            except Exception:  # resolved concurrently by a stored-key read
                pass

    def _confirmed(self, kind: str, channel: str) -> None:
        """A subscription is active: read the stored keys it might have missed."""
        if kind == "psubscribe":
            self._pattern_ready = True
            with self._guard:
                missed = [c for c in self._waiting if c not in self._explicit]
        else:
            with self._guard:
                missed = [channel] if channel in self._waiting else []
        if missed:
            self._spawn(self._read_stored_quietly(missed))

    async def _read(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except RedisError:
                if self._down_since is None:  # one line per outage, one when it ends
                    self._down_since = time.monotonic()
                    self._losses += 1
                    log.warning("result listener lost Redis; reconnecting every 0.2 s")
                await asyncio.sleep(0.2)
                await self._recover()
                continue
            if self._down_since is not None and self._pattern_ready:
                log.warning("result listener reconnected to Redis after %.1f s",
                            time.monotonic() - self._down_since)  # fmt: skip
                self._down_since = None
            if message is None:
                continue
            kind = message.get("type")
            channel = message.get("channel")
            channel = channel.decode() if isinstance(channel, bytes) else str(channel)
            if kind in ("message", "pmessage"):
                self._resolve(channel, message["data"])
            elif kind in ("subscribe", "psubscribe"):
                self._confirmed(kind, channel)

    async def _recover(self) -> None:
        assert self._lock is not None
        self._pattern_ready = False
        try:
            async with self._lock:
                with self._guard:
                    channels = list(self._explicit)
                await self._pubsub.subscribe(self._home, *channels)
                await self._pubsub.psubscribe(self._pattern)
        except RedisError:
            pass  # _read tries again; the outage was logged once

    # --- shutdown -------------------------------------------------------------------------

    async def _aclose(self) -> None:
        with self._guard:
            waiting = list(self._waiting.values())
        for future in waiting:
            future.cancel()
        if self._background:  # let background unsubscribes finish (bounded)
            await asyncio.wait(list(self._background), timeout=2.0)
        # whatever still runs (the reader, a stored-key read on a busy machine) is cancelled
        # and awaited here: a task left pending on the closed loop would be destroyed later,
        # in whatever code the garbage collector happens to interrupt
        current = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await self._pubsub.aclose()
        await self.client.aclose(close_connection_pool=True)  # the pool is ours to close

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        if not self._thread.is_alive():
            return
        try:
            self.submit(self._aclose()).result(30)  # bounded; quick unless Redis hangs
        except Exception:  # closing a broken connection must not fail close()
            log.warning("result listener did not close cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    @property
    def pending(self) -> int:
        """Calls currently awaiting a result."""
        with self._guard:
            return len(self._waiting)
