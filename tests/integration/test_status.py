"""``ditto-worker status`` on real Redis with a real worker: backlog and workers per node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.celery_app import create_celery_app, fleet_nodes
from ditto_worker.fleet.status import collect_status
from ditto_worker.memory.worker import create_memory_worker
from ditto_worker.testing import create_store

pytestmark = pytest.mark.integration

BACKLOG = 5


def memory_worker() -> Any:
    return create_memory_worker(create_store())


def test_status_counts_backlog_and_workers_per_node(
    start_fleet_worker: Any, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    sender = create_celery_app(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    # MEMORY.SEARCH has no worker here: its calls wait in memory.search
    for _ in range(BACKLOG):
        sender.send_task("MEMORY.SEARCH", args=[{"query": "x"}], expires=60)
    assert redis_client.llen("memory.search") == BACKLOG  # what the table must show
    with start_fleet_worker(
        memory_worker, queues=["memory.get", "memory.query"], pool="threads", concurrency=3
    ):
        rows = {row.node: row for row in collect_status(sender, timeout_s=1.0)}
        cli = subprocess.run(
            [sys.executable, "-m", "ditto_worker", "status", "--broker", redis_url],
            cwd=tmp_path,
            env={**os.environ, "DITTO_BROKER_URL": ""},
            capture_output=True,
            text=True,
            timeout=60,
        )
    sender.close()

    assert set(rows) == set(fleet_nodes())  # every installed worker kind's nodes (MEM-RT-2)
    expected = ["MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH", "MEMORY.WRITE", "MEMORY.UPDATE",
                "MEMORY.DELETE", "RETRIEVAL.SEARCH", "CONTEXT.UPDATE", "CONTEXT.LOAD"]  # fmt: skip
    assert set(expected) <= set(rows)
    for node in ["MEMORY.GET", "MEMORY.QUERY"]:
        assert (rows[node].backlog, rows[node].workers, rows[node].processes) == (0, 1, 3)
    assert (rows["MEMORY.SEARCH"].backlog, rows["MEMORY.SEARCH"].workers) == (BACKLOG, 0)
    for node in ["MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"]:
        assert (rows[node].backlog, rows[node].workers, rows[node].processes) == (0, 0, 0)

    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0].split() == ["node", "queue", "backlog", "workers", "processes"]
    table = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert table["MEMORY.GET"] == ["memory.get", "0", "1", "3"]
    assert table["MEMORY.SEARCH"] == ["memory.search", str(BACKLOG), "0", "0"]
    assert len(table) == len(fleet_nodes())
