"""The fleet through a real Redis Sentinel failover (issue 37 item 5).

Broker and result backend are ``sentinel://`` URLs of a group of a primary, a replica and
three sentinels (``tests/integration/_sentinel.py``); a real worker process serves the
MEMORY nodes on SQLite. A caller thread makes a steady stream of MEMORY.WRITE calls, each
with its own operation id, and retries a call that did not succeed with the same operation
id (MEM-RUN-7: a replay applies nothing twice). The primary is SIGKILLed mid-stream.

Checked: every attempt ends as ``success``, ``failed`` with ``FLEET_UNAVAILABLE`` or
``MEMORY_TIMEOUT``-like ``timeout`` — never an exception or a hang past its timeout's
bound; the fleet serves again after the promotion (the time is printed with ``-s``); and
every write whose call succeeded is in the store exactly once (one record per operation
id), including those retried across the failover. Writes that were acknowledged by the
old primary and never reached the replica are the caller's to retry; the retry with the
same operation id is what keeps them exactly once.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ditto_worker.config import load_runtime_config
from ditto_worker.errors import ErrorCode
from ditto_worker.fleet.client import DittoClient
from tests.integration._procs import WorkerProc
from tests.integration._sentinel import MASTER
from tests.integration.test_brokers import worker_env
from tests.integration.test_context_failover import group  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALL_TIMEOUT_S = 5.0
"""Each attempt's timeout, s."""

SERVED_WITHIN_S = 180.0
"""How long after the promotion the fleet must serve again (generous: a busy machine)."""

BEFORE, AFTER = 10, 10
"""Logical writes completed before the kill, and after the recovery, before the stream stops."""


class Writer:
    """Logical writes in a loop; each is retried with its operation id until it succeeds."""

    def __init__(self, client: DittoClient) -> None:
        self.client = client
        self.attempts: list[tuple[float, float, str, str | None]] = []  # start, end, status, code
        self.done: list[tuple[float, str]] = []  # (monotonic end, operation id)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            op = uuid.uuid4().hex
            draft = {"content": "failover", "metadata": {"op": op}}
            while not self.stop.is_set():
                started = time.monotonic()
                result = self.client.invoke(
                    "MEMORY.WRITE", {"memories": [draft]}, timeout=CALL_TIMEOUT_S, operation_id=op
                )
                code = result.error.code if result.error else None
                self.attempts.append((started, time.monotonic(), result.status, code))
                if result.status == "success":
                    self.done.append((time.monotonic(), op))
                    break
                self.stop.wait(0.05)  # a paced retry, not a spin

    def done_after(self, moment: float) -> int:
        return sum(1 for t, _ in self.done if t > moment)


def _wait_for(what: str, check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {within_s:.0f} s: {what}"
        time.sleep(0.05)


def test_fleet_calls_survive_a_primary_kill(group: Any, tmp_path: Path) -> None:  # noqa: F811
    env = {
        "DITTO_BROKER_URL": group.url,
        "DITTO_RESULT_BACKEND": group.url.replace("/0", "/1"),
        "DITTO_SENTINEL_MASTER_NAME": MASTER,
    }
    worker = WorkerProc(tmp_path, ["--nodes", "memory", "-c", "2"], worker_env(tmp_path, **env))
    client = DittoClient.from_fleet(load_runtime_config(None, env=env).fleet)
    writer = Writer(client)
    try:
        worker.wait_ready(120)
        writer.thread.start()
        _wait_for(f"{BEFORE} writes before the kill", lambda: writer.done_after(0) >= BEFORE, 120)
        killed = group.kill_primary()
        promoted = group.wait_promoted()
        _wait_for(
            f"{AFTER} writes after the promotion (worker log:\n{worker.log()[-3000:]})",
            lambda: writer.done_after(promoted) >= AFTER,
            SERVED_WITHIN_S,
        )
        writer.stop.set()
        writer.thread.join(CALL_TIMEOUT_S * 6)
        assert not writer.thread.is_alive()
        ops = [op for _, op in writer.done]
        found = client.invoke(
            "MEMORY.QUERY", {"filter": {"op": {"$in": ops}}, "limit": 10_000}, timeout=60
        )
    finally:
        writer.stop.set()
        client.close()
        worker.stop()
    statuses = {(status, code) for _, _, status, code in writer.attempts}
    allowed = {("success", None), ("failed", ErrorCode.FLEET_UNAVAILABLE)}
    assert {s for s in statuses if s[0] != "timeout"} <= allowed, statuses
    slowest = max(end - start for start, end, _, _ in writer.attempts)
    assert slowest < CALL_TIMEOUT_S * 4, slowest  # an attempt ends near its timeout, never hangs
    assert found.status == "success", found.error
    per_op: dict[str, int] = {}
    for record in found.output.items:
        per_op[record.metadata["op"]] = per_op.get(record.metadata["op"], 0) + 1
    assert per_op == dict.fromkeys(ops, 1)  # every completed write exactly once
    served = min(t for t, _ in writer.done if t > killed)
    retried = len(writer.attempts) - len(writer.done)
    print(
        f"\nfleet failover: kill -> promoted {promoted - killed:.2f} s, kill -> first completed "
        f"write {served - killed:.2f} s; {len(writer.done)} writes, {len(writer.attempts)} "
        f"attempts ({retried} retried: {sorted(str(s) for s in statuses if s[0] != 'success')}); "
        f"slowest attempt {slowest:.2f} s"
    )
