"""LangGraph's own TTL tests (langgraph-checkpoint-sqlite 3.1.2 ``tests/test_ttl.py``)
against our ``DittoStore`` on the fleet: a real ``ditto-worker worker --nodes memory``
(SQLite) on a real Redis, the store a fleet client (issue 33 item 1, "one file on the
fleet"). The file puts no ``index=``, so no embedding function has to reach the worker.
scripts/langgraph_suites/run.py runs it as in test_langgraph_suites.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import redis

from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
from tests.conftest import wait_until
from tests.integration._procs import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO: Final = Path(__file__).resolve().parents[2]
BROKER_DB: Final = 9
SCOPE: Final = {"tenant": "warm-up", "user": "fixture"}


@pytest.fixture(scope="module")
def broker_url(redis_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"{redis_server_url}/{BROKER_DB}"
    broker = redis.Redis.from_url(url)
    broker.flushdb()
    folder = tmp_path_factory.mktemp("lg-fleet")
    env = {"DITTO_BROKER_URL": url, "DITTO_RESULT_BACKEND": "",
           "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite")}  # fmt: skip
    args = ["--nodes", "memory", "--pool", "threads", "--concurrency", "4",
            "--hostname", f"lg-memory-{os.getpid()}@localhost"]  # fmt: skip
    worker = WorkerProc(folder, args, env, "memory")
    try:
        worker.wait_ready(timeout_s=120)
        _served(url)
        yield url
    finally:
        worker.stop()
        broker.flushdb()
        broker.close()


def _served(url: str) -> None:
    """Until the worker answers a MEMORY call: its store is open and migrated, so the
    suite's first put is not the slow first call (its TTLs are 1 s)."""
    config = load_runtime_config({"fleet": {"brokerUrl": url}}, env={})
    with create_ditto(config=config) as runtime:
        call = {"filter": {}, "limit": 1}
        wait_until(
            lambda: (
                runtime.invoke("MEMORY.QUERY", call, scope=SCOPE, timeout=5).status == "success"
            ),
            "the fleet's MEMORY worker serving",
        )


@pytest.mark.timeout(1200)
def test_langgraph_ttl_suite_on_the_fleet(broker_url: str, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    command = [sys.executable, str(REPO / "scripts" / "langgraph_suites" / "run.py"),
               "--store", "fleet", "--suite", "sqlite:tests/test_ttl.py",
               "--json", str(out)]  # fmt: skip
    env = {**os.environ, "DITTO_LG_BROKER": broker_url}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1100, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["store"] == "fleet" and result["skipped"] == 0, result
    assert result["failed_tests"] == [], result
    assert (result["tests"], result["passed"], result["never_touched_ours"]) == (11, 11, 0), result
