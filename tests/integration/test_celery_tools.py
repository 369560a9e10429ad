"""Celery's own command line works on the fleet: ``celery -A ditto_worker.fleet …``.

A real ``ditto-worker worker`` process on real Redis; ``celery inspect`` finds it and
reports the queues it consumes; ``celery purge`` empties a queue (issue 11 item 5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.celery_app import create_celery_app
from tests.conftest import EVENT_WAIT_S, stop_worker

pytestmark = pytest.mark.integration


def _celery(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "ditto_worker.fleet", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_celery_inspect_and_purge_against_a_real_worker(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    env = {**os.environ, "DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": redis_url}
    name = f"tools-{uuid.uuid4().hex[:8]}@localhost"
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "reads", "--pool", "solo",
         "--hostname", name, "--store", "memory"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while True:
            ping = _celery(["inspect", "ping", "-d", name, "--json"], env, tmp_path)
            if ping.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        queues = _celery(["inspect", "active_queues", "-d", name, "--json"], env, tmp_path)
        assert queues.returncode == 0, queues.stderr
        reply = json.loads(queues.stdout.strip().splitlines()[-1])
        assert sorted(q["name"] for q in reply[name]) == ["memory.get", "memory.query"]

        # a queue nobody consumes: purge empties it
        sender = create_celery_app(FleetSettings(broker_url=redis_url, result_backend=redis_url))
        for _ in range(3):
            sender.send_task("MEMORY.SEARCH", kwargs={"input": {"query": "x"}}, expires=60)
        sender.close()
        assert redis_client.llen("memory.search") == 3
        purged = _celery(["purge", "-f", "-Q", "memory.search"], env, tmp_path)
        assert purged.returncode == 0, purged.stderr
        assert redis_client.llen("memory.search") == 0
    finally:
        stop_worker(worker)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args", [["inspect", "active_queues"], ["purge", "-f"], ["status"], ["worker"]], ids=" ".join
)
@pytest.mark.parametrize("broker", ["", "memory://"])
def test_without_a_broker_celery_exits_with_one_line_naming_the_setting(
    args: list[str], broker: str, tmp_path: Path
) -> None:
    # issue 23 item 5: not kombu's in-process memory:// transport and "No nodes replied"
    env = {**os.environ, "DITTO_BROKER_URL": broker, "DITTO_RESULT_BACKEND": ""}
    started = time.monotonic()
    result = _celery(args, env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "no broker configured" in lines[0] and "DITTO_BROKER_URL" in lines[0]
    assert "fleet.brokerUrl" in lines[0]
    assert time.monotonic() - started < 30  # no waiting for replies that cannot come


def test_a_config_error_is_one_line_too(tmp_path: Path) -> None:
    env = {**os.environ, "DITTO_BROKER_URL": "redis//127.0.0.1:6379/0"}
    result = _celery(["inspect", "ping"], env, tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "config error" in lines[0] and "DITTO_BROKER_URL" in lines[0]
