"""The CONTEXT cache through a real Redis Sentinel failover (issue 37 item 5).

A primary, a replica and three sentinels (``tests/integration/_sentinel.py``); the CONTEXT
worker's cache is configured with the sentinels' URL and the master's name
(``workers.context.redisUrl: sentinel://…``, ``sentinelMasterName``). Under a steady load
of CONTEXT.UPDATE calls the primary is SIGKILLed. Every call ends as a success,
``CONTEXT_UNAVAILABLE`` or ``CONTEXT_TIMEOUT`` — never another code, an exception or a
hang — and once the sentinels have promoted the replica, calls succeed again (redis-py's
Sentinel pool asks for the new master on the next connection). Replication is
asynchronous, so updates acknowledged just before the kill may be lost: counted and shown
(``-s``), not asserted; updates acknowledged after the recovery are all kept.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ditto_worker.context import ContextWorkerSettings, create_context_worker
from ditto_worker.errors import ErrorCode
from ditto_worker.memory.scope import Scope
from tests.conftest import missing_service
from tests.integration._sentinel import MASTER, SentinelGroup
from tests.integration.test_context import Nodes, item

pytestmark = pytest.mark.integration

RECOVERY_S = 120.0
"""How long after the promotion a success must come (generous: a busy machine)."""

AFTER_RECOVERY = 20
"""Successful calls made before the kill, and after the recovery before the load stops."""


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    made = SentinelGroup()
    try:
        made.start()
    except RuntimeError as exc:
        made.close()
        missing_service(f"no redis-server: {exc}")
    yield made
    made.close()


class Load:
    """CONTEXT.UPDATE calls in a loop, one item each, every outcome recorded."""

    def __init__(self, nodes: Nodes, name: str) -> None:
        self.nodes, self.name = nodes, name
        self.outcomes: list[tuple[float, str, str]] = []  # (monotonic end, code, item id)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            ident = uuid.uuid4().hex[:12]
            code, _, _ = self.nodes.outcome(
                self.nodes.update, self.name, [item(ident)], deadline_s=3.0
            )
            self.outcomes.append((time.monotonic(), code, ident))
            self.stop.wait(0.01)  # a steady rate, not a spin

    def successes_after(self, moment: float) -> list[tuple[float, str, str]]:
        return [o for o in self.outcomes if o[0] > moment and o[1] == "ok"]


def _wait_for(what: str, check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {within_s:.0f} s: {what}"
        time.sleep(0.05)


def test_context_calls_survive_a_primary_kill(group: SentinelGroup) -> None:
    settings = ContextWorkerSettings(
        redis_url=group.url, sentinel_master_name=MASTER, timeout_s=1.0
    )
    definition = create_context_worker(settings)
    nodes = Nodes(definition, Scope("acme", f"user-{uuid.uuid4().hex[:8]}"))
    load = Load(nodes, "plan:failover")
    load.thread.start()
    try:
        _wait_for(
            f"{AFTER_RECOVERY} successful updates before the kill",
            lambda: len(load.successes_after(0)) >= AFTER_RECOVERY,
            RECOVERY_S,
        )
        killed = group.kill_primary()
        promoted = group.wait_promoted()
        _wait_for(
            f"{AFTER_RECOVERY} successes after the promotion",
            lambda: len(load.successes_after(promoted)) >= AFTER_RECOVERY,
            RECOVERY_S,
        )
    finally:
        load.stop.set()
        load.thread.join(60)
    assert not load.thread.is_alive()
    codes = {code for _, code, _ in load.outcomes}
    allowed = {"ok", ErrorCode.CONTEXT_UNAVAILABLE, ErrorCode.CONTEXT_TIMEOUT}
    assert codes <= allowed, codes - allowed
    recovered = min(t for t, code, _ in load.outcomes if t > killed and code == "ok")
    loaded = nodes.load("plan:failover")
    kept = {i.id for i in loaded.items}
    acknowledged = [(t, ident) for t, code, ident in load.outcomes if code == "ok"]
    after = [ident for t, ident in acknowledged if t >= recovered]
    assert set(after) <= kept  # nothing acknowledged by the new master is lost
    lost = [ident for t, ident in acknowledged if t < recovered and ident not in kept]
    failed = sum(1 for t, code, _ in load.outcomes if killed < t and code != "ok")
    print(
        f"\nfailover: kill -> promoted {promoted - killed:.2f} s, kill -> first success "
        f"{recovered - killed:.2f} s, promoted -> first success {recovered - promoted:+.2f} s; "
        f"{len(load.outcomes)} calls, {failed} failed after the kill "
        f"({sorted(c for c in codes if c != 'ok')}), {len(lost)} of "
        f"{len([a for a in acknowledged if a[0] < recovered])} acknowledged before the "
        "recovery lost"
    )
    assert definition.close is not None
    definition.close()
