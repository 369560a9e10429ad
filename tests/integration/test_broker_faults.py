"""Broker faults: Redis restarts in the middle of a load (issue 7 item 3).

Every call ends within its timeout (success, or ``timeout``/``failed`` with a clear code),
none hangs, and the client and the worker recover without being restarted. The Redis
server here is the test's own (restarted on the same port), not the shared one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory_worker
from ditto_worker.config import FleetSettings
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet import DittoClient
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.testing.servers import RedisServer
from tests.conftest import EVENT_WAIT_S, fleet_config, missing_service, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALLOWED_FAILURES = {"MEMORY_TIMEOUT", "MEMORY_BACKEND_ERROR", "FLEET_UNAVAILABLE"}


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server this test may stop and start again on the same port."""
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as exc:  # scripts/test.sh installs redis-server
        server.close()
        missing_service(str(exc))
    yield server
    server.close()


def test_redis_restart_during_load(own_redis: RedisServer, tmp_path: Path) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    app = create_worker_app(
        fleet_config(own_redis.url + "/0"), [lambda: create_memory_worker(store)]
    )
    client = DittoClient.from_fleet(FleetSettings(broker_url=own_redis.url + "/0"))
    outcomes: list[tuple[str, str | None, float]] = []
    stop = threading.Event()
    timeout_s = 3.0

    def caller(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            started = time.monotonic()
            payload = {"memories": [{"content": f"{n}-{i}"}]}
            result = client.invoke("MEMORY.WRITE", payload, timeout=timeout_s)
            code = result.error.code if result.error else None
            outcomes.append((result.status, code, time.monotonic() - started))

    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, loglevel="ERROR",
        queues=list(NODE_QUEUES.values()), shutdown_timeout=30,
    ):  # fmt: skip
        threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: any(s == "success" for s, _, _ in outcomes), "a first call served")
        before = sum(1 for s, _, _ in outcomes if s == "success")
        own_redis.stop()  # the broker and result backend vanish mid-load
        time.sleep(1.0)
        own_redis.start()  # back, empty (no persistence)
        time.sleep(1.0)
        recovered_at = None
        deadline = time.monotonic() + EVENT_WAIT_S
        while time.monotonic() < deadline:
            probe = client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=2)
            if probe.status == "success":
                recovered_at = time.monotonic()
                break
        stop.set()
        for t in threads:
            t.join(timeout_s + 10)
            assert not t.is_alive(), "a caller hangs"
        assert recovered_at is not None, "the fleet did not recover after Redis came back"
        after = [client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=5) for _ in range(20)]
        assert all(r.status == "success" for r in after)
    client.close()
    app.close()
    assert before > 0
    for status, code, elapsed in outcomes:
        # ends within its timeout (plus what a loaded machine adds to a call's return)
        assert elapsed < timeout_s + 15.0, (status, code, elapsed)
        if status != "success":
            assert status in ("timeout", "failed") and code in ALLOWED_FAILURES, (status, code)
    print(f"\nRedis restart: {len(outcomes)} calls, "
          f"{sum(1 for s, _, _ in outcomes if s == 'success')} succeeded, "
          f"{sorted({c for _, c, _ in outcomes if c})} failure codes, "
          f"max call {max(e for _, _, e in outcomes):.2f} s")  # fmt: skip


@pytest.mark.parametrize("path", ["invoke", "ainvoke"])
def test_a_call_waiting_when_the_result_backend_is_lost_ends_fleet_unavailable(
    own_redis: RedisServer, path: str
) -> None:
    """A call already sent when Redis dies (the message queued, nobody serving it yet)
    is unanswered at its timeout: ``failed`` / ``FLEET_UNAVAILABLE`` naming the lost
    result backend, on the sync and the asyncio path. Redis back, a call that merely
    times out (no worker: nothing answers) is ``timeout`` / ``MEMORY_TIMEOUT`` again."""
    import asyncio

    import redis as redis_py

    client = DittoClient.from_fleet(FleetSettings(broker_url=own_redis.url + "/0"))
    queue = redis_py.Redis.from_url(own_redis.url + "/0")
    timeout_s = 6.0

    def call() -> Any:
        payload = {"memories": [{"content": "x"}]}
        if path == "invoke":
            return client.invoke("MEMORY.WRITE", payload, timeout=timeout_s)
        return asyncio.run(client.ainvoke("MEMORY.WRITE", payload, timeout=timeout_s))

    try:
        outcome: list[Any] = []
        caller = threading.Thread(target=lambda: outcome.append(call()), daemon=True)
        caller.start()
        wait_until(lambda: queue.llen("memory.write") > 0, "the call's message queued")
        queue.close()
        own_redis.stop()  # the broker and the result backend die under the waiting call
        caller.join(timeout_s + EVENT_WAIT_S)
        assert not caller.is_alive(), "the call hangs"
        [lost] = outcome
        own_redis.start()
        again = call()  # Redis back (empty): the client was not restarted
    finally:
        client.close()
    assert lost.status == "failed" and lost.error is not None, lost
    assert lost.error.code == "FLEET_UNAVAILABLE", lost.error
    assert "the result backend (127.0.0.1:" in lost.error.message
    assert "was lost while the call waited" in lost.error.message
    assert (again.status, again.error and again.error.code) == ("timeout", "MEMORY_TIMEOUT")
