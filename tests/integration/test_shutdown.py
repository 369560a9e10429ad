"""Stopping a worker loses no call, whoever sends the signal (issue 14 item 1).

A real ``ditto-worker worker --nodes memory`` (prefork, two pool processes) on a real Redis
serves a SQLite store slowed by the ``slowsqlite`` fixture plugin (tests/fixtures/ops_kit):
every GET and every WRITE batch takes 2 s. While a GET and a 200-memory WRITE batch run,
the test stops the worker the way a supervisor does:

* SIGTERM to the worker's whole process group (honcho, ``kill -- -PGID``): the pool
  processes ignore it and finish their calls; the main process's warm shutdown waits;
* SIGQUIT to the main process (Celery's cold shutdown): Celery marks the running read
  RETRY and terminates the pool; the pool processes still finish, and the client waits
  for the final result instead of taking RETRY as the answer.

Both callers get ``success``; the batch is in the store exactly once; nothing is left in
the queue or in kombu's unacked hash to be redelivered; the worker exits by itself.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory
from ditto_worker.config import FleetSettings
from ditto_worker.fleet.client import DittoClient
from tests.conftest import EVENT_WAIT_S
from tests.integration._procs import WorkerProc, children

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KIT = Path(__file__).resolve().parents[1] / "fixtures" / "ops_kit"
BATCH = 200


def start_worker(folder: Path, redis_url: str) -> WorkerProc:
    env = {
        "DITTO_BROKER_URL": redis_url,
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite"),
        "PYTHONPATH": os.pathsep.join([str(KIT), os.environ.get("PYTHONPATH", "")]),
        "DITTO_TEST_SLOW_GET_S": "2",
        "DITTO_TEST_SLOW_WRITE_S": "2",
    }
    args = ["--nodes", "memory", "--store", "slowsqlite", "--pool", "prefork",
            "--concurrency", "2", "--loglevel", "INFO"]  # fmt: skip
    return WorkerProc(folder, args, env)


@pytest.mark.parametrize("stop", ["SIGTERM to the process group", "SIGQUIT to the main process"])
def test_stopping_the_worker_during_a_get_and_a_write_batch_loses_nothing(
    stop: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    direct = create_memory(SqliteMemoryStore(tmp_path / "memory.sqlite"))
    assert direct.execute("MEMORY.WRITE", {"memories": [{"key": "pref", "content": "tea"}]}
                          ).status == "success"  # fmt: skip
    worker = start_worker(tmp_path, redis_url)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    results: dict[str, Any] = {}
    batch = [{"content": f"memory {i}", "metadata": {"n": i}} for i in range(BATCH)]
    write_id = str(uuid.uuid4())
    calls = {
        "get": lambda: client.invoke("MEMORY.GET", {"keys": ["pref"]}, timeout=30),
        "write": lambda: client.invoke("MEMORY.WRITE", {"memories": batch}, timeout=30,
                                       execution_id=write_id),
    }  # fmt: skip
    threads = [threading.Thread(target=lambda n=n, f=f: results.update({n: f()}))
               for n, f in calls.items()]  # fmt: skip
    try:
        worker.wait_ready()
        pool = children(worker.pid)
        assert len(pool) == 2, pool
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + EVENT_WAIT_S
        while worker.log().count("] received") < 2:
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.02)
        time.sleep(0.3)  # both calls are inside their 2 s store calls
        if stop.startswith("SIGTERM"):
            worker.signal_group(signal.SIGTERM)
        else:
            os.kill(worker.pid, signal.SIGQUIT)
        for thread in threads:
            thread.join(40)
        code = worker.wait_exit(30)
    finally:
        client.close()
        worker.stop()
    log = worker.log()
    assert results["get"].status == "success", (results["get"].error, log[-3000:])
    assert [m.content for m in results["get"].output] == ["tea"]
    assert results["write"].status == "success", (results["write"].error, log[-3000:])
    assert len(results["write"].output) == BATCH
    assert "WorkerLostError" not in log and "exited prematurely" not in log, log[-3000:]
    if stop.startswith("SIGTERM"):
        assert code == 0 and "Warm shutdown" in log
    # nothing waits to be redelivered, and the batch is in the store once
    assert redis_client.llen("memory.write") == 0 and redis_client.hlen("unacked") == 0
    page = direct.execute("MEMORY.QUERY", {"limit": 1000}).output
    assert len(page.items) == BATCH + 1
    assert sorted(m.metadata["n"] for m in page.items if m.metadata) == list(range(BATCH))
