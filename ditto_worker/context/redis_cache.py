"""The Redis context cache: one key per context, one Lua script per update (MEM-CTX-2).

Key: ``<tenant>:<user>:context:<name>``, in a task space
``<tenant>:<user>:task:<taskId>:context:<name>`` (built by the worker, :meth:`Scope.key`). The
key is a Redis hash::

    v        version (HINCRBY per update)
    n        number of items
    b        bytes of all items (UTF-8 bytes of their JSON texts)
    i:<id>   position of the item with that id (0-based)
    p:<pos>  the JSON text of the item at that position

so an update costs O(ingress) reads and writes whatever the context's size (plus the
O(items) reply: the items' texts joined with ``,`` into one string, which Python parses
as one JSON array), and no JSON is decoded in Lua (Redis' cjson would turn ``[]`` into
``{}`` and round numbers to 14 digits).

Why a Lua script, not WATCH/MULTI: the script is one round trip and cannot lose a race,
so 8 writers on one key make 8 round trips, not 8 rounds of optimistic retries of 3
round trips each (``bench/context.py`` measures both). The script reads everything and
checks the limits before its first write, so a limit refusal writes nothing; it carries
the ``#!lua`` shebang (Redis >= 7), so a Redis out of memory refuses it before it starts
instead of failing between two writes.

Deadlines: each call takes its own connection from a small idle list and sets that
connection's connect and read/write socket timeouts to the call's ``timeout_s`` (the
time left before the call's deadline, capped by ``workers.context.timeoutS``); redis-py's
retries are off (a retry could outlive the deadline). A Redis that is down fails at once
(``CONTEXT_UNAVAILABLE``), one that does not answer fails after ``timeout_s``. Never a
fallback store (MEM-CTX-3). Creating the cache connects to nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Final

import redis
from redis.exceptions import NoScriptError
from redis.sentinel import Sentinel, SentinelConnectionPool

from ditto_worker.config.context import ContextLimits
from ditto_worker.config.fleet import sentinel_parts
from ditto_worker.context.cache import CachedContext
from ditto_worker.context.merge import merged_over_limit
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.runtime.cancel import CancelToken

__all__ = ["LOAD_SCRIPT", "SENTINEL_TIMEOUT_S", "UPDATE_SCRIPT", "RedisContextCache"]

SENTINEL_TIMEOUT_S: Final = 2.0
"""Connect and read timeout of each sentinel asked for the master's address, s."""

logger = logging.getLogger(__name__)

_JOINED = """
-- The texts of items 0..n-1 joined with ',' (HMGET in chunks: one call per 512 items).
local function joined(key, n)
  local out = {}
  for first = 0, n - 1, 512 do
    local fields = {}
    for k = first, math.min(first + 511, n - 1) do fields[#fields + 1] = 'p:' .. k end
    local texts = redis.call('HMGET', key, unpack(fields))
    for j = 1, #texts do out[first + j] = texts[j] end
  end
  return table.concat(out, ',')
end
"""

UPDATE_SCRIPT = (
    """#!lua
-- KEYS[1] the context; ARGV: ttl_ms, max_items, max_bytes, then id, json pairs
-- (ids distinct). Reads and checks first, then writes: a refusal writes nothing.
"""
    + _JOINED
    + """
local key = KEYS[1]
local n = tonumber(redis.call('HGET', key, 'n') or '0')
local bytes = tonumber(redis.call('HGET', key, 'b') or '0')
local count = n
local found = {}
for i = 4, #ARGV, 2 do
  local at = redis.call('HGET', key, 'i:' .. ARGV[i])
  if at then
    bytes = bytes - redis.call('HSTRLEN', key, 'p:' .. at) + #ARGV[i + 1]
    found[i] = at
  else
    bytes = bytes + #ARGV[i + 1]
    count = count + 1
  end
end
if count > tonumber(ARGV[2]) then return {0, 'maxItems', count} end
if bytes > tonumber(ARGV[3]) then return {0, 'maxContextBytes', bytes} end
for i = 4, #ARGV, 2 do
  local at = found[i]
  if not at then
    at = n
    n = n + 1
    redis.call('HSET', key, 'i:' .. ARGV[i], at)
  end
  redis.call('HSET', key, 'p:' .. at, ARGV[i + 1])
end
local version = redis.call('HINCRBY', key, 'v', 1)
redis.call('HSET', key, 'n', n, 'b', bytes)
redis.call('PEXPIRE', key, ARGV[1])
return {1, version, joined(key, n)}
"""
)
"""Merge collapsed ingress into one context; returns ``{1, version, "json,json,…"}`` or
``{0, limit, value}`` when the merged context would break ``limit``."""

LOAD_SCRIPT = (
    """#!lua flags=no-writes
-- KEYS[1] the context; returns {0} when missing, else {1, version, "json,json,..."}
"""
    + _JOINED
    + """
local n = redis.call('HGET', KEYS[1], 'n')
if not n then return {0} end
return {1, tonumber(redis.call('HGET', KEYS[1], 'v')), joined(KEYS[1], tonumber(n))}
"""
)
"""Read one context in order, atomically; leaves its TTL alone."""

_SHA = {
    script: hashlib.sha1(script.encode()).hexdigest() for script in (UPDATE_SCRIPT, LOAD_SCRIPT)
}


def _unavailable(message: str) -> NodeError:
    return NodeError(ErrorCode.CONTEXT_UNAVAILABLE, f"The context cache {message}")


class RedisContextCache:
    """:class:`~ditto_worker.context.cache.ContextCache` on one Redis database.

    Args:
        url: ``redis://[user:password@]host:port/db``, ``rediss://…``, ``unix://…``, or
            Redis Sentinel ``sentinel://[:password@]host:port[/db]`` (several joined by
            ``;``; the password and db are the master's) with ``master_name``
            (``workers.context.redisUrl`` / env ``DITTO_WORKER_CONTEXT_REDIS_URL``). It
            never appears in an error message or a log line.
        max_idle: connections kept open between calls (the worker's concurrency).
        master_name: the monitored master's name (``workers.context.sentinelMasterName``),
            required with a ``sentinel://`` URL. Every new connection asks the sentinels
            where the master is (redis-py's ``SentinelConnectionPool``, as kombu's Sentinel
            transport uses it), so after a failover the next call reaches the new master;
            a call in flight on the old one ends ``CONTEXT_UNAVAILABLE`` (its connection is
            dropped, as is one answered ``READONLY`` by a demoted master).

    Raises:
        ValueError: ``url`` is not a Redis URL (raised by redis-py when parsing), or a
            ``sentinel://`` URL without ``master_name``.
        ConfigError: a ``sentinel://`` URL with a part that is not ``sentinel://host:port``.
    """

    def __init__(self, url: str, *, max_idle: int = 8, master_name: str | None = None) -> None:
        if url.startswith("sentinel://"):
            parsed: Any = _sentinel_pool(url, master_name)
        else:
            parsed = redis.ConnectionPool.from_url(url)  # parses the URL; connects to nothing
        self._pool = parsed  # a Sentinel pool answers the master's address to its connections
        self._connection_class: Any = parsed.connection_class
        self._kwargs = dict(parsed.connection_kwargs)
        self._max_idle = max_idle
        self._idle: deque[Any] = deque()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # --- connections ------------------------------------------------------------------

    def _checkout(self) -> Any:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's sockets are not ours
                self._idle.clear()
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connection_class(**self._kwargs)

    def _checkin(self, conn: Any) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle and self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.disconnect()

    def _run(
        self,
        script: str,
        key: str,
        args: Sequence[Any],
        timeout_s: float,
        cancel: CancelToken | None,
    ) -> Any:
        """EVALSHA ``script`` (EVAL when Redis does not know it yet) within ``timeout_s``.

        A cancel while waiting shuts the connection down, which ends the wait at once.

        Raises:
            NodeError: ``CONTEXT_CANCELLED`` when ``cancel`` fired; ``CONTEXT_UNAVAILABLE``
                when Redis is unreachable, does not answer within ``timeout_s``, or
                answers an error.
        """
        conn = self._checkout()
        guard = threading.Lock()
        live = [True]

        def cut() -> None:  # runs in the cancelling thread
            with guard:
                if live[0]:
                    conn.disconnect()

        unregister = cancel.on_cancel(cut) if cancel is not None else None
        try:
            if cancel is not None and cancel.cancelled:  # before connect() opens a socket
                raise NodeError(ErrorCode.CONTEXT_CANCELLED, "the context call was cancelled")
            reply = _round_trip(conn, script, key, args, timeout_s)
        except BaseException as exc:
            error = self._failure(exc, conn, timeout_s, cancel)
            if error is None:
                raise
            raise error from None
        finally:
            with guard:
                live[0] = False
            if unregister is not None:
                unregister()
        self._checkin(conn)
        return reply

    def _failure(
        self, exc: BaseException, conn: Any, timeout_s: float, cancel: CancelToken | None
    ) -> NodeError | None:
        """The NodeError for a failed round trip (``None``: re-raise ``exc`` as is)."""
        if isinstance(exc, NodeError):
            self._checkin(conn)  # refused before any I/O
            return exc
        if isinstance(exc, redis.ResponseError):
            self._checkin(conn)  # an error reply: the connection itself is fine
            logger.warning("context cache: Redis answered %s", str(exc).split(" ", 1)[0][:32])
            return _unavailable("(Redis) refused the call")
        conn.disconnect()
        if not isinstance(exc, Exception):
            return None  # KeyboardInterrupt, SystemExit …
        if cancel is not None and cancel.cancelled:
            return NodeError(ErrorCode.CONTEXT_CANCELLED, "the context call was cancelled")
        if isinstance(exc, redis.TimeoutError):
            logger.warning("context cache: no answer from Redis within %.3f s", timeout_s)
            return _unavailable(f"(Redis) did not answer within {timeout_s:.3f} s")
        if isinstance(exc, redis.RedisError | OSError):
            logger.warning("context cache: Redis unreachable (%s)", type(exc).__name__)
            return _unavailable("(Redis) is unreachable")
        return None

    # --- ContextCache -----------------------------------------------------------------

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
        """See :meth:`~ditto_worker.context.cache.ContextCache.update` (one EVALSHA).

        Raises:
            NodeError: ``INVALID_INPUT`` naming ``maxItems`` / ``maxContextBytes``
                (nothing written); ``CONTEXT_UNAVAILABLE`` / ``CONTEXT_CANCELLED`` (see
                :meth:`_run`), or ``CONTEXT_UNAVAILABLE`` for a reply
                that is not the script's).
        """
        args: list[Any] = [
            max(1, round(ttl_s * 1000)),
            limits.max_items,
            limits.max_context_bytes,
        ]
        for item_id, text in entries:
            args += (item_id, text)
        reply = self._run(UPDATE_SCRIPT, key, args, timeout_s, cancel)
        if isinstance(reply, list) and reply[:1] == [0] and len(reply) == 3:
            raise merged_over_limit(reply[1].decode(), reply[2], limits)
        return _context(reply)

    def load(
        self, key: str, *, timeout_s: float, cancel: CancelToken | None = None
    ) -> CachedContext | None:
        """See :meth:`~ditto_worker.context.cache.ContextCache.load` (one EVALSHA).

        Raises:
            NodeError: ``CONTEXT_UNAVAILABLE`` / ``CONTEXT_CANCELLED`` (see :meth:`_run`).
        """
        reply = self._run(LOAD_SCRIPT, key, (), timeout_s, cancel)
        if reply == [0]:
            return None
        return _context(reply)

    def open(self, timeout_s: float) -> None:
        """Connect now and load both scripts into Redis (``SCRIPT LOAD``), so a wrong URL
        or a Redis that is down shows when a worker starts, and its first calls run
        ``EVALSHA`` at once. The connection stays in the idle list for the first call.

        Args:
            timeout_s: longest wait for the connection and each reply, seconds.

        Raises:
            NodeError: ``CONTEXT_UNAVAILABLE`` (unreachable, no answer within
                ``timeout_s``, or an error reply); the message never holds the URL.
        """
        conn = self._checkout()
        try:
            conn.socket_connect_timeout = timeout_s
            conn.socket_timeout = timeout_s
            conn.connect()
            conn.update_current_socket_timeout(timeout_s)
            for script in (UPDATE_SCRIPT, LOAD_SCRIPT):
                conn.send_command("SCRIPT", "LOAD", script)
                if conn.read_response() != _SHA[script].encode():
                    raise _unavailable("(Redis) did not load the context scripts")
        except BaseException as exc:
            error = self._failure(exc, conn, timeout_s, None)
            if error is None:
                raise
            raise error from None
        self._checkin(conn)

    def close(self) -> None:
        """Close the idle connections; later calls open new ones."""
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        for conn in idle:
            conn.disconnect()


def _sentinel_pool(url: str, master_name: str | None) -> Any:
    """redis-py's pool of the master ``master_name`` behind the sentinels of ``url``
    (connects to nothing; each connection asks the sentinels on ``connect``). The
    sentinels' own sockets time out after :data:`SENTINEL_TIMEOUT_S`, so a dead sentinel
    costs a bounded wait before the next one is asked."""
    if not master_name:
        raise ValueError("a sentinel:// context cache URL needs workers.context.sentinelMasterName")
    hosts, master_kwargs = sentinel_parts(url)
    timeouts = {"socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S}
    sentinels = Sentinel(hosts, sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]
    return SentinelConnectionPool(master_name, sentinels, **master_kwargs)  # type: ignore[no-untyped-call]


def _round_trip(conn: Any, script: str, key: str, args: Sequence[Any], timeout_s: float) -> Any:
    """One EVALSHA on ``conn`` with every socket wait bounded by ``timeout_s``."""
    conn.socket_connect_timeout = timeout_s
    conn.socket_timeout = timeout_s
    conn.connect()  # no-op when already connected
    conn.update_current_socket_timeout(timeout_s)
    try:
        conn.send_command("EVALSHA", _SHA[script], 1, key, *args)
        return conn.read_response()
    except NoScriptError:
        conn.send_command("EVAL", script, 1, key, *args)
        return conn.read_response()


def _context(reply: Any) -> CachedContext:
    """``{1, version, "json,json,…"}`` -> :class:`CachedContext`.

    Raises:
        NodeError: ``CONTEXT_UNAVAILABLE`` for anything else (a damaged entry).
    """
    if (
        not isinstance(reply, list)
        or len(reply) != 3
        or reply[0] != 1
        or not isinstance(reply[1], int)
        or not isinstance(reply[2], bytes)
    ):
        raise _unavailable("(Redis) holds a damaged context entry")
    return CachedContext(reply[1], b"[" + reply[2] + b"]")
