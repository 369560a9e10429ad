"""Nothing lost, nothing doubled: SIGKILL the worker's pool process during WRITE batches.

A real ``ditto-worker worker --nodes writes`` (prefork, one pool process) on a real Redis
and a real SQLite file. Mutation tasks ack late and are requeued when their process dies;
the store claims each execution id in the mutation's transaction. After the kills every
call has succeeded, every memory exists exactly once, and each call's reply lists records
that exist (issue 7 items 1-2; seed: "crash after a mutation and retry").
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import DittoClient, create_memory
from ditto_worker.config import FleetSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLS = 12
BATCH = 2500  # a few hundred ms of work per batch, so a kill usually lands inside one
KILLS = 12


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def wait_ready(log: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while "ready." not in log.read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    assert "ready." in log.read_text(), log.read_text()


def test_sigkill_during_write_batches_loses_and_doubles_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "crash.sqlite"
    log = tmp_path / "worker.log"
    env = {**os.environ, "DITTO_BROKER_URL": redis_url, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db)}
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "writes",
             "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    results: list[Any] = []
    kills = 0
    try:
        wait_ready(log, worker)

        def caller() -> None:
            for n in range(CALLS):
                drafts = [{"content": f"c-{n}-{i}"} for i in range(BATCH)]
                results.append(
                    client.invoke("MEMORY.WRITE", {"memories": drafts}, timeout=90,
                                  execution_id=f"crash-{n}")
                )  # fmt: skip

        thread = threading.Thread(target=caller)
        thread.start()
        rng = random.Random(7)
        time.sleep(0.5)

        def landed() -> int:  # kills that hit a live pool process
            return log.read_text().count("exited with 'signal 9")

        while thread.is_alive() and landed() < 3 and kills < KILLS:
            pool = children(worker.pid)
            if pool:  # the pool process: mostly mid-batch, sometimes between batches
                os.kill(pool[0], signal.SIGKILL)
                kills += 1
            time.sleep(rng.uniform(0.4, 0.9))
        thread.join(300)
        assert not thread.is_alive()
    finally:
        client.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
    killed = log.read_text().count("exited with 'signal 9")
    assert killed >= 1, "the pool process was never killed: nothing was tested"
    assert [r.status for r in results] == ["success"] * CALLS, [
        (r.status, r.error) for r in results if r.status != "success"
    ]
    memory = create_memory(SqliteMemoryStore(db))
    stored: list[Any] = []
    page = memory.query({"limit": 10000}).output
    stored.extend(page.items)
    while page.next_cursor:  # MEM-QUERY-4 paging over all of it
        page = memory.query({"limit": 10000, "cursor": page.next_cursor}).output
        stored.extend(page.items)
    counts = Counter(m.content for m in stored)
    assert len(stored) == CALLS * BATCH  # nothing lost, nothing doubled
    assert max(counts.values()) == 1
    replied = {m.id for r in results for m in r.output}
    assert replied == {m.id for m in stored}  # every reply names the records that exist
    redelivered = log.read_text().count("] received") - CALLS
    assert redelivered >= 1  # at least one batch really was killed and delivered again
    print(
        f"\n{killed} SIGKILLs of the pool process ({kills} sent) during {CALLS} WRITE "
        f"batches of {BATCH}: {redelivered} redeliveries, {len(stored)} memories, each once"
    )
