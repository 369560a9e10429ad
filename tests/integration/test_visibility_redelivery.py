"""SIGKILL of the worker's MAIN process during a WRITE batch: the visibility-timeout path.

When the pool process dies, its main process requeues the message at once
(``reject_on_worker_lost``). When the whole worker dies (main process and pool, like a
machine crash), nobody requeues it: the message stays in the Redis transport's ``unacked``
set until ``fleet.visibilityTimeoutS`` has passed since its delivery, and a worker that
scans the set then puts it back on its queue. A worker scans when it starts; a running
worker scans only every ``unacked_restore_interval`` x ``unacked_restore_throttle``
seconds (kombu 5.7 defaults: 10 x 10 — measured here: a worker started right after the
kill, so before the timeout, redelivered the message 93 s later).

Here: a real worker with ``visibilityTimeoutS: 3`` (``ditto.yaml`` in its folder) is
killed, main process and pool at once (``killpg`` SIGKILL), during a WRITE batch; a fresh
worker is started once the message's visibility timeout has passed (read from the
broker's own ``unacked_index``). Each store is run with one kill point:

* SQLite — mid-batch (before COMMIT): the first run is rolled back; the redelivered
  copy applies the batch whole.
* PostgreSQL — right after COMMIT (before the ack): the redelivered copy claims the
  execution id, finds it committed and applies nothing.

What the caller sees: its ``invoke`` (timeout 90 s, longer than the visibility timeout
plus a worker restart) **succeeds** once the new worker has run the redelivered message,
with the records that exist — the same ids in the after-COMMIT case. (A caller whose
timeout ends first gets ``timeout``/``MEMORY_TIMEOUT``; the message's ``expires`` then
stops the redelivered copy from running, so the effect is whatever the first run
committed: all of the batch or none of it.) In both cases every memory is stored exactly
once and each record was inserted by exactly one committed transaction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_worker.config import FleetSettings
from ditto_worker.fleet import DittoClient
from tests.conftest import postgres_url, stop_worker
from tests.integration.test_crash_redelivery import (
    RECEIVED,
    PostgresTarget,
    SqliteTarget,
    Target,
    start_worker,
    wait_ready,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VISIBILITY_S = 3
BATCH = 3000
CALL = "vis-w-0"


CASES = [("sqlite", "mid-batch"), ("postgres", "after-commit")]


@pytest.fixture(params=CASES, ids=lambda p: "-".join(p))
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, str]]:
    name, when = request.param
    target: Target = SqliteTarget(tmp_path) if name == "sqlite" else PostgresTarget(postgres_url())
    target.prepare()
    (tmp_path / "ditto.yaml").write_text(f"fleet:\n  visibilityTimeoutS: {VISIBILITY_S}\n")
    yield target, when
    target.close()


def received(log: Path) -> int:
    return RECEIVED.findall(log.read_text()).count(("MEMORY.WRITE", CALL))


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def test_sigkill_of_the_main_process_redelivers_after_the_visibility_timeout(
    case: tuple[Target, str], redis_url: str, tmp_path: Path
) -> None:
    target, when = case
    log = tmp_path / "worker.log"
    broker = redis.Redis.from_url(redis_url)
    first = start_worker(target, redis_url, tmp_path, log, new_session=True)
    second: subprocess.Popen[str] | None = None
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    results: list[Any] = []
    try:
        wait_ready(log, first)
        drafts = [{"content": f"v-{i}", "metadata": {"i": i}} for i in range(BATCH)]
        caller = threading.Thread(
            target=lambda: results.append(
                client.invoke("MEMORY.WRITE", {"memories": drafts}, timeout=90, execution_id=CALL)
            )
        )
        caller.start()
        wait_for(lambda: received(log) == 1, 30, "the call to reach the worker")
        if when == "after-commit":
            wait_for(lambda: target.committed(CALL), 30, "the first run's COMMIT")
        else:
            time.sleep(0.1)  # into the batch (a 3000-record WRITE takes ~1 s on the fleet)
        os.killpg(first.pid, signal.SIGKILL)  # the main process and its pool at once
        first.wait(10)
        committed_first = target.committed(CALL)
        assert committed_first == (when == "after-commit")  # the kill point as intended
        assert caller.is_alive() and not results  # nothing answered the caller yet
        # The message waits in the transport's unacked set, not on its queue.
        ((tag, delivered_at),) = broker.zrange("unacked_index", 0, -1, withscores=True)
        assert broker.hexists("unacked", tag) and broker.llen("memory.write") == 0
        wait_for(lambda: time.time() > delivered_at + VISIBILITY_S + 0.5, 30, "the timeout")
        started = time.monotonic()
        second = start_worker(target, redis_url, tmp_path, log, new_session=True)
        caller.join(90)
        waited = time.monotonic() - started
        assert not caller.is_alive()
    finally:
        client.close()
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                stop_worker(worker)
        broker.close()
    (result,) = results
    assert result.status == "success", result.error
    assert received(log) == 2  # delivered to the first worker, then redelivered once
    stored = target.all_memories()
    assert Counter(m.content for m in stored) == Counter(f"v-{i}" for i in range(BATCH))
    ids = {m.id for m in stored}
    assert [m.id for m in result.output] == [
        m.id for m in sorted(stored, key=lambda m: m.metadata["i"])
    ]
    assert target.effects() == Counter({("INSERT", i): 1 for i in ids})  # one committed insert
    print(
        f"\n{target.name}: main process SIGKILLed {when}; redelivered after the "
        f"{VISIBILITY_S}s visibility timeout, answered {waited:.1f}s after the new worker "
        f"started; {len(stored)} memories, each once"
    )
