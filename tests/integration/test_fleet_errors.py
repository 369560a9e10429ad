"""Errors that say what happened on a fleet (issue 13 item 5).

* A call to a queue no worker consumes times out with when a worker for that queue was
  last seen (the per-queue heartbeat a real worker refreshes, read by the client only on
  timeout) — from the Python client, sync and async, and from ``ditto-worker invoke``.
* A stopped broker or result backend is ``FLEET_UNAVAILABLE`` (not a storage fault),
  naming ``host:port`` and never the password, logged on one line per outage, with no
  traceback — from the client and from ``ditto-worker invoke``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory_worker
from ditto_worker.config import FleetSettings
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet import DittoClient
from ditto_worker.fleet.heartbeat import heartbeat_key
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition
from ditto_worker.runtime.registry import node_table
from ditto_worker.testing.servers import free_port
from tests.conftest import EVENT_WAIT_S

pytestmark = pytest.mark.integration

SECRET = "s3cret-pw"


def _slow(input: Any, ctx: Any) -> Any:
    ctx.cancel.wait(float(input.get("seconds", 0)))
    return {"slept": True}


SLOW = WorkerDefinition.of("SLOW", [NodeSpec("SLOW.WAIT", _slow)])


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DITTO_")} | env
    return subprocess.run(
        [sys.executable, "-m", "ditto_worker", *args], env=full, capture_output=True,
        text=True, timeout=60, cwd=os.path.dirname(__file__),
    )  # fmt: skip


def test_a_queue_without_workers_times_out_saying_none_was_seen(
    start_fleet_worker: Any, redis_url: str, tmp_path: Path
) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    table = node_table([create_memory_worker(store), SLOW])
    client = DittoClient.from_fleet(
        FleetSettings(broker_url=redis_url, result_backend=redis_url), nodes=table
    )
    try:
        never = client.invoke("SLOW.WAIT", {}, timeout=1)
        assert never.status == "timeout" and never.error is not None
        assert never.error.code == "SLOW_TIMEOUT"  # the kind's own timeout code
        assert never.error.message == (
            "the call timed out: no worker has consumed the queue 'slow.wait' in the last 7 days"
        )
        with start_fleet_worker(lambda: SLOW, queues=["slow.wait"]):
            deadline = time.monotonic() + EVENT_WAIT_S
            keys = redis.Redis.from_url(redis_url)
            while keys.get(heartbeat_key("slow.wait")) is None:
                assert time.monotonic() < deadline, "the worker wrote no heartbeat"
                time.sleep(0.05)
            assert keys.get(heartbeat_key("memory.get")) is None  # only the queues it reads
            assert 0 < int(keys.ttl(heartbeat_key("slow.wait"))) <= 7 * 86400
            keys.close()
            busy = client.invoke("SLOW.WAIT", {"seconds": 5}, timeout=1)
            assert busy.status == "timeout" and busy.error is not None
            assert "a worker for the queue 'slow.wait' was last seen" in busy.error.message
            assert "it is running but did not answer in time" in busy.error.message
            abusy = asyncio.run(client.ainvoke("SLOW.WAIT", {"seconds": 5}, timeout=1))
            assert abusy.error is not None and "it is running" in abusy.error.message
            fine = client.invoke("SLOW.WAIT", {"seconds": 0}, timeout=10)
            assert fine.status == "success"
        # the worker stopped: the key stays and says when it was last seen
        gone = client.invoke("SLOW.WAIT", {}, timeout=1)
        assert gone.error is not None
        assert "a worker for the queue 'slow.wait' was last seen" in gone.error.message
        missing = asyncio.run(client.ainvoke("MEMORY.GET", {"id": "x"}, timeout=1))
        assert missing.error is not None
        assert "no worker has consumed the queue 'memory.get'" in missing.error.message
    finally:
        client.close()


def test_ditto_worker_invoke_prints_when_a_worker_was_last_seen(redis_url: str) -> None:
    keys = redis.Redis.from_url(redis_url)
    keys.set(heartbeat_key("memory.get"), json.dumps({"at": time.time() - 7200, "hostname": "h"}))
    keys.close()
    done = _cli("invoke", "MEMORY.GET", '{"id": "x"}', "--timeout", "1",
                env={"DITTO_BROKER_URL": redis_url})  # fmt: skip
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "MEMORY_TIMEOUT"
    assert "the queue 'memory.get' was last seen" in error["message"]
    assert "(2 h ago, h); none is running now" in error["message"]


def _down_url(db: int) -> tuple[str, str]:
    port = free_port()  # nothing listens there
    return f"redis://:{SECRET}@127.0.0.1:{port}/{db}", f"127.0.0.1:{port}"


@pytest.mark.parametrize("down", ["broker", "result backend"])
def test_an_unreachable_fleet_server_is_fleet_unavailable_on_one_log_line(
    down: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead, address = _down_url(0)
    broker, backend = (dead, redis_url) if down == "broker" else (redis_url, dead)
    client = DittoClient.from_fleet(FleetSettings(broker_url=broker, result_backend=backend))
    caplog.set_level(logging.DEBUG)
    try:
        results = [client.invoke("MEMORY.GET", {"id": "x"}, timeout=5) for _ in range(4)]
        results.append(asyncio.run(client.ainvoke("MEMORY.GET", {"id": "x"}, timeout=5)))
    finally:
        client.close()
    for result in results:
        assert result.status == "failed" and result.error is not None
        assert result.error.code == "FLEET_UNAVAILABLE"
        assert result.error.message == f"the {down} ({address}) is unreachable"
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # once per outage
    assert errors[0].exc_info is None and address in errors[0].getMessage()
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_ditto_worker_invoke_with_redis_stopped_says_so_in_one_line() -> None:
    dead, address = _down_url(0)
    done = _cli("invoke", "MEMORY.GET", '{"id": "x"}', "--timeout", "5",
                env={"DITTO_BROKER_URL": dead})  # fmt: skip
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "FLEET_UNAVAILABLE" and address in error["message"]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_heartbeat_keys_are_only_for_the_queues_a_worker_consumes(
    start_fleet_worker: Any, redis_url: str, tmp_path: Path
) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    with start_fleet_worker(lambda: create_memory_worker(store), queues=["memory.get"]):
        keys = redis.Redis.from_url(redis_url)
        deadline = time.monotonic() + EVENT_WAIT_S
        while keys.get(heartbeat_key("memory.get")) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        others = [q for q in NODE_QUEUES.values() if q != "memory.get"]
        assert all(keys.get(heartbeat_key(q)) is None for q in others)
        value = json.loads(keys.get(heartbeat_key("memory.get")) or b"{}")
        assert set(value) == {"at", "hostname"}  # a time and a node name: no call data
        keys.close()
