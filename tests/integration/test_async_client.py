"""The invoke client at service scale, and cooperative cancellation (issue 3).

A real Celery worker on a real Redis, a real SQLite store. Cancellation of a running call
is observed on the worker side: the stored NodeResult of the interrupted call, and a
worker with one pool slot that goes on serving.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_plugin_sqlite.db import transaction
from ditto_worker import CancelToken, create_memory, create_memory_worker, to_wire
from ditto_worker.config import FleetSettings
from ditto_worker.fleet.batch import BATCH_THREADS
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.failures import node_result_of
from ditto_worker.fleet.results import RESULT_KEY_PREFIX
from ditto_worker.memory.worker import MemoryWorker
from tests.conftest import EVENT_WAIT_S

pytestmark = pytest.mark.integration

SLOW_SQL = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


class SlowSearchStore(SqliteMemoryStore):
    """A real SQLite store whose SEARCH runs a statement that never ends by itself."""

    def search(self, input: Any, options: Any = None) -> Any:
        with transaction(self._conn(), options, write=False) as conn:
            conn.execute(SLOW_SQL).fetchone()
        return []


def stored_result(redis_client: redis.Redis, eid: str, wait_s: float) -> dict[str, Any] | None:
    """The NodeResult the worker stored for ``eid``, waiting up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        raw = redis_client.get(RESULT_KEY_PREFIX + eid)
        if raw is not None:
            meta = json.loads(raw)
            if meta["status"] == "FAILURE":  # a NodeResult that is not success (NodeFailed)
                return node_result_of(meta["result"]) or meta
            return meta["result"] if meta["status"] == "SUCCESS" else meta
        time.sleep(0.02)
    return None


def clients(redis_client: redis.Redis) -> int:
    """Connections to this test's database (other users of the server are not counted)."""
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    return sum(1 for c in redis_client.client_list() if c["db"] == db)


def client_ids(redis_client: redis.Redis) -> set[str]:
    """The ids of the connections :func:`clients` counts."""
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    return {c["id"] for c in redis_client.client_list() if c["db"] == db}


def settled_ids(redis_client: redis.Redis, within_s: float = 15.0) -> set[str]:
    """:func:`client_ids` once it has not changed for 1 s (or after ``within_s``)."""
    deadline = time.monotonic() + within_s
    ids = client_ids(redis_client)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = client_ids(redis_client)
        if now == ids:
            break
        ids = now
    return ids


def result_channels(redis_client: redis.Redis) -> list[bytes]:
    return list(redis_client.pubsub_channels(RESULT_KEY_PREFIX + "*"))


def client_threads() -> int:
    """Threads of this process but the worker's batch threads (the worker runs in a thread
    here; a batch's calls run on threads of its own, at most BATCH_THREADS, made on
    demand: ditto_worker.fleet.batch)."""
    return sum(not t.name.startswith("ditto-batch") for t in threading.enumerate())


def test_thousand_concurrent_ainvoke_bounded_threads_and_connections(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    record = create_memory(store).write({"memories": [{"key": "k", "content": "v"}]}).output[0]

    async def burst(n: int) -> list[Any]:
        # a timeout no busy machine reaches (1,000 calls on one pool thread at load 37
        # outlasted 60 s): this test counts threads and connections, not speed
        calls = [client.ainvoke("MEMORY.GET", {"ids": [record.id]}, timeout=600) for _ in range(n)]
        return await asyncio.gather(*calls)

    async def load() -> tuple[list[Any], int, int]:
        peak_threads = peak_clients = 0
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak_threads, peak_clients
            while not done.is_set():
                peak_threads = max(peak_threads, client_threads())
                peak_clients = max(peak_clients, clients(redis_client))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        results = await burst(1000)
        done.set()
        await sampler
        return results, peak_threads, peak_clients

    # one pool thread: the worker's own connections (result store, cancel flags) stay
    # constant, so any growth after the load would be the client's
    with start_fleet_worker(lambda: create_memory_worker(store), pool="threads", concurrency=1):
        asyncio.run(burst(200))  # warm: listener pool, sender threads, producer connections
        base_threads, base_clients = client_threads(), clients(redis_client)
        base_list = {c["id"]: c for c in redis_client.client_list()}
        started = time.monotonic()
        results, peak_threads, peak_clients = asyncio.run(load())
        elapsed = time.monotonic() - started
        assert all(r.status == "success" and r.output[0].id == record.id for r in results)
        assert len({r.execution_id for r in results}) == 1000
        time.sleep(0.3)
        after_clients = clients(redis_client)
        new = [(c["cmd"], c["db"]) for c in redis_client.client_list() if c["id"] not in base_list]
        assert result_channels(redis_client) == []  # no channel outlives its call
    print(
        f"\n1000 concurrent ainvoke: {1000 / elapsed:.0f} calls/s; threads {base_threads} -> "
        f"peak {peak_threads}; Redis clients {base_clients} -> peak {peak_clients} -> "
        f"after {after_clients}"
    )
    assert peak_threads <= base_threads + 2
    assert sum(t.name.startswith("ditto-batch") for t in threading.enumerate()) <= BATCH_THREADS
    assert peak_clients <= base_clients + 8
    # the listener's pool may keep one more idle connection when, on a busy machine, a
    # stored-key read overlapped another command (seen at load 20); a leak per call would
    # leave hundreds
    assert after_clients <= base_clients + 2, new


def test_sync_and_async_paths_return_identical_results(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path
) -> None:  # MEM-NODE-3
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    with start_fleet_worker(lambda: create_memory_worker(store)):
        client.invoke("MEMORY.WRITE", {"memories": [{"key": "a", "content": None}]}, timeout=10)
        for node, payload in [
            ("MEMORY.GET", {"keys": ["a"]}),
            ("MEMORY.QUERY", {"limit": 5}),
            ("MEMORY.QUERY", {"limit": 0}),
            ("MEMORY.SEARCH", {"query": "x", "strategy": "nope"}),
        ]:
            sync = to_wire(client.invoke(node, payload, timeout=10))
            asyn = to_wire(asyncio.run(client.ainvoke(node, payload, timeout=10)))
            assert sync.pop("executionId") != asyn.pop("executionId")
            assert sync == asyn


def test_cancelling_the_awaiting_task_before_start_means_it_never_runs(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path
) -> None:  # MEM-PY-2: a call not yet started never runs (no worker was up to get the revoke)
    path = tmp_path / "m.sqlite"

    async def cancel_soon() -> None:
        task = asyncio.create_task(
            client.ainvoke("MEMORY.WRITE", {"memories": [{"content": "x"}]}, timeout=30,
                           execution_id="never-runs")
        )  # fmt: skip
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    time.sleep(0.2)
    assert redis_client.llen("memory.write") == 1  # still queued
    with start_fleet_worker(lambda: create_memory_worker(SqliteMemoryStore(path))):
        reply = stored_result(redis_client, "never-runs", wait_s=10)
        assert reply is not None and reply["status"] == "cancelled"
        assert reply["error"]["code"] == "MEMORY_CANCELLED"
    assert create_memory(SqliteMemoryStore(path)).query({}).output.items == []


def test_cancel_stops_a_running_search_and_the_worker_keeps_serving(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path
) -> None:  # MEM-PY-2, MEM-RUN-2: the cancel reaches the driver (sqlite3 interrupt)
    def factory() -> MemoryWorker:
        return create_memory_worker(SlowSearchStore(tmp_path / "m.sqlite"))

    with start_fleet_worker(factory, pool="threads", concurrency=1):
        token = CancelToken()
        timer = threading.Timer(0.5, token.cancel)
        timer.start()
        result = client.invoke("MEMORY.SEARCH", {"query": "x"}, timeout=30, cancel=token,
                               execution_id="sync-cancel")  # fmt: skip
        assert result.status == "cancelled" and result.error.code == "MEMORY_CANCELLED"
        cancelled_at = time.monotonic()
        reply = stored_result(redis_client, "sync-cancel", wait_s=5)
        stop_latency_s = time.monotonic() - cancelled_at
        assert reply is not None and reply["status"] == "cancelled", reply
        assert stop_latency_s < 1.0

        async def cancel_task() -> float:
            task = asyncio.create_task(
                client.ainvoke("MEMORY.SEARCH", {"query": "x"}, timeout=30,
                               execution_id="async-cancel")
            )  # fmt: skip
            await asyncio.sleep(0.5)
            task.cancel()
            at = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await task
            return at

        at = asyncio.run(cancel_task())
        reply = stored_result(redis_client, "async-cancel", wait_s=5)
        assert reply is not None and reply["status"] == "cancelled"
        async_latency_s = time.monotonic() - at
        assert async_latency_s < 1.0
        # one pool slot: it is free again
        assert client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=5).status == "success"
    print(f"\nrunning SEARCH stopped after cancel: sync {stop_latency_s * 1000:.0f} ms, "
          f"async {async_latency_s * 1000:.0f} ms")  # fmt: skip


def test_timeout_stops_running_work(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path
) -> None:  # issue 3 item 3: the worker stops work whose caller has given up
    def factory() -> MemoryWorker:
        return create_memory_worker(SlowSearchStore(tmp_path / "m.sqlite"))

    with start_fleet_worker(factory, pool="threads", concurrency=1):
        started = time.monotonic()
        result = client.invoke("MEMORY.SEARCH", {"query": "x"}, timeout=0.5, execution_id="late")
        assert result.status == "timeout" and result.error.code == "MEMORY_TIMEOUT"
        assert time.monotonic() - started < 1.5
        reply = stored_result(redis_client, "late", wait_s=5)
        assert reply is not None and reply["status"] in ("cancelled", "timeout")
        assert time.monotonic() - started < 2.0
        assert client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=5).status == "success"


def test_close_drains_calls_in_flight(
    start_fleet_worker: Any, redis_url: str, tmp_path: Path
) -> None:  # MEM-RUN-3: close drains accepted calls; the plugin stays open
    from ditto_worker.config import FleetSettings

    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    results: list[Any] = []
    with start_fleet_worker(lambda: create_memory_worker(store)):
        calls = [
            threading.Thread(
                target=lambda: results.append(
                    client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=10)
                )
            )
            for _ in range(5)
        ]
        for t in calls:
            t.start()
        deadline = time.monotonic() + EVENT_WAIT_S
        while client.in_flight < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert client.in_flight == 5
        client.close()
        for t in calls:
            t.join(10)
        late = client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=1)
    assert len(results) == 5 and all(r.status == "success" for r in results)
    assert late.status == "failed" and late.error.code == "MEMORY_BACKEND_ERROR"
    assert create_memory(store).query({}).status == "success"  # not closed by the client


def test_every_call_ends_within_its_timeout_under_overload(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Issue 7 item 3: 500 calls at once against one busy pool slot all time out, each
    # within its own timeout (+ slack): the revokes of timed-out calls never hold a send.
    # The revoke broadcasts are held back until every call has ended (an event, whatever
    # the load): a call that waited on a revoke could not end before the hold's bound,
    # EVENT_WAIT_S. How close to its timeout each call ends is a figure (printed below;
    # ~1.2 s on a quiet machine, the old client 7d6c8a5^ 2.6 s), not a bound: the machine
    # is shared.
    store = SlowSearchStore(tmp_path / "m.sqlite")
    timeout_s = 1.0
    revoking, released = threading.Event(), threading.Event()
    broadcast = client._revoke

    def held_revoke(eid: str) -> None:  # on the client's revoke thread
        revoking.set()
        released.wait(EVENT_WAIT_S)
        broadcast(eid)

    async def one() -> tuple[Any, float]:
        started = time.monotonic()
        result = await client.ainvoke("MEMORY.SEARCH", {"query": "x"}, timeout=timeout_s)
        return result, time.monotonic() - started

    async def burst() -> list[tuple[Any, float]]:
        return await asyncio.gather(*(one() for _ in range(500)))

    monkeypatch.setattr(client, "_revoke", held_revoke)
    with start_fleet_worker(lambda: create_memory_worker(store), pool="threads", concurrency=1):
        try:
            ended = asyncio.run(burst())
            assert revoking.is_set()  # the revokes were asked for, and every call ended
        finally:  # while they were held
            released.set()
        worst = max(elapsed for _, elapsed in ended)
        assert len(ended) == 500
        assert {r.error.code for r, _ in ended if r.error} == {"MEMORY_TIMEOUT"}
        assert worst < EVENT_WAIT_S, worst  # no call waited on a held revoke
        # and the fleet serves normally right after
        after = client.invoke("MEMORY.GET", {"ids": ["none"]}, timeout=10)
        assert after.status == "success"
    print(f"\n500 calls timing out at once: slowest ended after {worst:.2f} s (timeout 1.0 s,"
          f" load {os.getloadavg()[0]:.1f})")  # fmt: skip


def test_close_releases_every_connection(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, redis_url: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    store = SqliteMemoryStore(tmp_path / "m.sqlite")

    def calls(c: DittoClient) -> None:
        for _ in range(20):
            assert c.invoke("MEMORY.GET", {"ids": ["x"]}, timeout=10).status == "success"
        asyncio.run(c.ainvoke("MEMORY.GET", {"ids": ["x"]}, timeout=10))
        assert c.invoke("MEMORY.GET", {"ids": ["x"]}, timeout=0.001).status == "timeout"

    with start_fleet_worker(lambda: create_memory_worker(store), pool="threads", concurrency=1):
        calls(client)  # the worker's own connections are open from here on
        # connections by id: an earlier test's connections closing meanwhile (a worker
        # process still exiting) made a count drop below its base
        base = settled_ids(redis_client)  # e.g. the revoke of the timed-out call
        fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
        other = DittoClient.from_fleet(fleet)
        calls(other)
        assert client_ids(redis_client) - base  # the other client's connections
        other.close()
        assert not settled_ids(redis_client) - base


def test_a_cancel_announced_for_another_database_is_ignored(redis_server_url: str) -> None:
    # the cancel channel is server-wide; two fleets on databases 3 and 4 of one Redis
    # server with the same execution id never cancel each other's call
    from ditto_worker.fleet.cancellation import (
        CANCEL_CHANNEL,
        CancelRegistry,
        RedisCancelWatcher,
        cancel_key,
    )

    registry = CancelRegistry()
    other = redis.Redis.from_url(f"{redis_server_url}/4")
    mine = redis.Redis.from_url(f"{redis_server_url}/3")
    listeners = int(mine.pubsub_numsub(CANCEL_CHANNEL)[0][1])
    watcher = RedisCancelWatcher(f"{redis_server_url}/3", registry)
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while int(mine.pubsub_numsub(CANCEL_CHANNEL)[0][1]) <= listeners:  # subscribed
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with registry.running("same-id", None) as token:
            other.set(cancel_key("same-id"), b"1", ex=60)
            for _ in range(5):
                other.publish(CANCEL_CHANNEL, "same-id")
                assert not token.wait(0.1)
            mine.set(cancel_key("same-id"), b"1", ex=60)
            mine.publish(CANCEL_CHANNEL, "same-id")
            assert token.wait(5)
    finally:
        other.delete(cancel_key("same-id"))
        mine.delete(cancel_key("same-id"))
        other.close()
        mine.close()
        watcher.close()
