"""Revocation that holds while every worker is down (issue 7 item 5).

Celery's revoke is a broadcast: a worker that is not running never hears it, and the
message it revoked is still in the queue when a worker starts. A real ``ditto-worker
worker --nodes writes`` on a real Redis and a real SQLite file is stopped; calls are then
cancelled, timed out or left to expire with no worker running; a new worker starts and
none of them runs. Three mechanisms, each shown on its own call:

* the per-call cancel flag (``ditto:cancel:<id>``, set by the client on cancel or
  timeout): the task answers ``cancelled`` without touching the store;
* ``expires`` (= the caller's deadline): Celery discards the message on receipt;
* ``--statedb`` / ``workers.<kind>.stateDb`` (Celery's ``worker_state_db``): a revoke a
  worker received is written to disk at shutdown and loaded at start, so the revoked
  message is discarded by the next worker even with no cancel flag and no expiry.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import re
import shelve
import subprocess
import sys
import threading
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import CancelToken, create_memory
from ditto_worker.config import FleetSettings
from ditto_worker.fleet.cancellation import cancel_key
from ditto_worker.fleet.celery_app import DEADLINE_HEADER, create_celery_app
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.failures import node_result_of
from ditto_worker.fleet.results import RESULT_KEY_PREFIX
from tests.conftest import EVENT_WAIT_S, stop_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE = "memory.write"


def start_worker(
    cwd: Path, env: dict[str, str], name: str, log: Path, *extra: str
) -> subprocess.Popen[str]:
    """A real ``ditto-worker worker --nodes writes`` (solo pool), ready to consume."""
    cwd.mkdir(exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "writes",
             "--pool", "solo", "--loglevel", "INFO", "--hostname", name, *extra],
            cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    deadline = time.monotonic() + EVENT_WAIT_S
    while "ready." not in log.read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    assert "ready." in log.read_text(), log.read_text()
    return proc


def stored_meta(r: redis.Redis, eid: str, wait_s: float = 30) -> dict[str, Any]:
    """The result the worker stored for ``eid`` (a NodeResult or a REVOKED state)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        raw = r.get(RESULT_KEY_PREFIX + eid)
        if raw is not None:
            return dict(json.loads(raw))
        time.sleep(0.05)
    raise AssertionError(f"no result stored for {eid}")


def wait_queued(r: redis.Redis, count: int, wait_s: float = 10) -> None:
    """Wait until ``count`` messages sit in the WRITE queue (no worker consumes it)."""
    deadline = time.monotonic() + wait_s
    while r.llen(QUEUE) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert r.llen(QUEUE) == count


def persisted_revokes(statedb: Path) -> Any:
    """The revoked-id set Celery's ``Persistent`` wrote to the state file."""
    with shelve.open(str(statedb), flag="r") as db:
        return pickle.loads(zlib.decompress(db["zrevoked"]))


def write(content: str) -> dict[str, Any]:
    return {"memories": [{"content": content}]}


def test_calls_cancelled_expired_or_revoked_while_every_worker_is_down_never_run(
    redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "memory.sqlite"
    statedb = tmp_path / "worker.state"
    env = {**os.environ, "DITTO_BROKER_URL": redis_url, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db)}
    # the first worker takes its state file from ditto.yaml, the second from --statedb
    yaml_dir = tmp_path / "w1"
    yaml_dir.mkdir()
    (yaml_dir / "ditto.yaml").write_text(f"workers:\n  memory:\n    stateDb: {statedb}\n")
    r = redis.Redis.from_url(redis_url)
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
    client = DittoClient.from_fleet(fleet)
    control = create_celery_app(fleet, results=False)

    def send_raw(eid: str, content: str, deadline: float) -> None:
        """What the client sends, without its cancel flag: only Celery decides."""
        control.send_task(
            "MEMORY.WRITE", kwargs={"input": write(content)}, task_id=eid, queue=QUEUE,
            expires=datetime.fromtimestamp(deadline, UTC), headers={DEADLINE_HEADER: deadline},
        )  # fmt: skip

    w1 = start_worker(yaml_dir, env, "revoke-w1@%h", tmp_path / "w1.log")
    w2 = None
    try:
        before = client.invoke("MEMORY.WRITE", write("before"), timeout=30)
        assert before.status == "success", before.error
        # a revoke the running worker hears, for a call that is sent only after it stopped
        replies = control.control.revoke("revoked-id", reply=True, timeout=5)
        assert any("revoked-id" in str(reply) for reply in replies), replies
        stop_worker(w1)
        assert w1.returncode == 0, (tmp_path / "w1.log").read_text()
        assert "revoked-id" in persisted_revokes(statedb)

        # --- every worker is down ---------------------------------------------------------
        token = CancelToken()
        cancelled: list[Any] = []
        caller = threading.Thread(
            target=lambda: cancelled.append(
                client.invoke("MEMORY.WRITE", write("cancel-token"), timeout=60, cancel=token,
                              execution_id="cancel-token")
            )
        )  # fmt: skip
        caller.start()
        wait_queued(r, 1)
        token.cancel()
        caller.join(10)
        assert [c.status for c in cancelled] == ["cancelled"]
        assert cancelled[0].error.code == "MEMORY_CANCELLED"

        async def cancel_ainvoke() -> None:
            task = asyncio.ensure_future(
                client.ainvoke("MEMORY.WRITE", write("cancel-task"), timeout=60,
                               execution_id="cancel-task")
            )  # fmt: skip
            while r.llen(QUEUE) < 2:
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_ainvoke())
        # both flags are raised before invoke returns / CancelledError is re-raised, so a
        # caller that exits right away still leaves the calls cancelled
        assert r.exists(cancel_key("cancel-token"), cancel_key("cancel-task")) == 2

        timed_out = client.invoke("MEMORY.WRITE", write("timed-out"), timeout=1,
                                  execution_id="timed-out")  # fmt: skip
        assert timed_out.status == "timeout"
        expires_at = time.time() + 1
        send_raw("expired", "expired", expires_at)  # no cancel flag: only `expires` stops it
        send_raw("revoked-id", "revoked", time.time() + 300)  # only the state file stops it
        send_raw("control", "control", time.time() + 300)  # not cancelled: it runs
        wait_queued(r, 6)  # all six still there, none lost, none consumed
        assert not r.exists(cancel_key("expired"), cancel_key("revoked-id"), cancel_key("control"))
        if time.time() <= expires_at:  # the deadline itself is what is tested
            time.sleep(expires_at - time.time() + 0.05)

        # --- a new worker starts ----------------------------------------------------------
        w2 = start_worker(tmp_path / "w2", env, "revoke-w2@%h", tmp_path / "w2.log",
                          "--statedb", str(statedb))  # fmt: skip
        assert stored_meta(r, "control")["result"]["status"] == "success"
        for eid in ("cancel-token", "cancel-task"):
            meta = stored_meta(r, eid)
            assert meta["status"] == "FAILURE"  # a NodeResult that is not success (NodeFailed)
            result = node_result_of(meta["result"])
            assert result is not None and result["status"] == "cancelled"
            assert result["error"]["code"] == "MEMORY_CANCELLED"
        for eid in ("timed-out", "expired", "revoked-id"):
            assert stored_meta(r, eid)["status"] == "REVOKED", eid
        wait_queued(r, 0)
    finally:
        client.close()
        control.close()
        stop_worker(w1)
        if w2 is not None:
            stop_worker(w2)
        r.close()
    log = (tmp_path / "w2.log").read_text()
    for eid in ("timed-out", "expired", "revoked-id"):
        assert f"Discarding revoked task: MEMORY.WRITE[{eid}]" in log, log
    for eid in ("cancel-token", "cancel-task"):
        ran = re.search(rf"MEMORY\.WRITE\[{eid}\] raised expected: [^\n]*", log)
        # the worker's one-line failure (NodeFailed: node, status and code only)
        assert (
            ran is not None
            and "NodeFailed(MEMORY.WRITE cancelled MEMORY_CANCELLED)" in ran.group(0)
        ), log
    # the store: the effects of the call before the stop and of the control call, only
    memory = create_memory(SqliteMemoryStore(db))
    contents = sorted(m.content for m in memory.query({"limit": 100}).output.items)
    assert contents == ["before", "control"]
