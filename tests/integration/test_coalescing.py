"""Coalesced fleet calls on a real Redis and a real Celery worker (issue 36 items 1-2).

A client with ``fleet.coalescing`` on and ``inFlight: 1`` sends the first call of a node
at once and gathers the calls made while it is in flight into one batch message on the
node's own queue; every call of a batch stays itself: its own result, its own cancel, its
own failure, its own exactly-once.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_worker import CancelToken, create_memory_worker
from ditto_worker.config import FleetSettings
from ditto_worker.config.fleet import CoalescingSettings
from ditto_worker.contracts import NodeResult
from ditto_worker.fleet.client import DittoClient
from ditto_worker.memory.worker import MemoryWorker
from tests.conftest import stop_worker, wait_until
from tests.integration.test_crash_redelivery import (
    SqliteTarget,
    live_child,
    start_worker,
    wait_ready,
)

pytestmark = pytest.mark.integration

SLOW_S = 1.5  # a call of a key "slow…"
BUSY_S = 3.0  # the first call, a key "busy…": the others gather behind it meanwhile


def _worker(path: Path) -> MemoryWorker:
    return create_memory_worker(SlowStore(path))


@pytest.fixture
def batching(redis_url: str) -> Iterator[DittoClient]:
    """A client that keeps one message per node in flight, then batches (gathering calls
    wait for it up to 20 s)."""
    settings = CoalescingSettings(enabled=True, in_flight=1, max_wait_us=20_000_000)
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url, coalescing=settings)
    c = DittoClient.from_fleet(fleet)
    yield c
    c.close()


def _together(
    client: DittoClient, calls: list[tuple[str, Any, dict[str, Any]]]
) -> list[NodeResult[Any]]:
    """Run the calls on threads at once; their results in order."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        node, payload, kwargs = calls[i]
        results[i] = client.invoke(node, payload, **kwargs)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_gets_travel_in_batches_and_each_gets_its_own_answer(
    start_fleet_worker: Any, batching: DittoClient, tmp_path: Path, redis_client: Any
) -> None:
    SlowStore.reads = 0
    with start_fleet_worker(lambda: _worker(tmp_path / "m.sqlite")):
        memories = [{"key": f"k{i}", "content": f"c{i}"} for i in range(40)]
        assert (
            batching.invoke("MEMORY.WRITE", {"memories": memories}, timeout=20).status == "success"
        )
        results = _together(
            batching, [("MEMORY.GET", {"keys": [f"k{i}"]}, {"timeout": 30}) for i in range(40)]
        )
        assert [r.status for r in results] == ["success"] * 40
        assert [r.output[0].content for r in results] == [f"c{i}" for i in range(40)]
        stored = [k for k in redis_client.keys("celery-task-meta-*")]
        assert len(stored) < 41, "the calls went one message each"
    # one store read per GET message, whatever its number of calls (issue 36 item 3)
    assert SlowStore.reads == len(stored) - 1  # the WRITE's message reads nothing


OPENED = threading.Event()  # set by a GET of the key "open"; a GET of "wait…" waits for it
WAIT_S = 60.0
READS_LOCK = threading.Lock()


class SlowStore(SqliteMemoryStore):
    """A real SQLite store whose GET or WRITE of a key starting ``slow`` or ``busy`` sleeps
    first; a GET of a key ``wait…`` waits (up to :data:`WAIT_S`, then fails) for a GET of
    ``open``."""

    reads = 0  # calls of get, by every instance

    def get(self, input: Any, options: Any = None) -> Any:
        with READS_LOCK:
            SlowStore.reads += 1
        keys = [str(k) for k in input.keys]
        self._nap(keys)
        if "open" in keys:
            OPENED.set()
        if any(k.startswith("wait") for k in keys) and not OPENED.wait(WAIT_S):
            raise RuntimeError("no GET of 'open' ran meanwhile")
        return super().get(input, options)

    def write(self, input: Any, options: Any = None) -> Any:
        self._nap([str(m.key or "") for m in input.memories])
        return super().write(input, options)

    @staticmethod
    def _nap(keys: list[str]) -> None:
        if any(k.startswith("busy") for k in keys):
            time.sleep(BUSY_S)
        elif any(k.startswith("slow") for k in keys):
            time.sleep(SLOW_S)


class Callers:
    """Calls started one by one on threads, each once the previous one is gathering
    (``in order``: a batch holds them in that order)."""

    def __init__(self, client: DittoClient) -> None:
        self.client = client
        self.threads: list[threading.Thread] = []
        self.results: dict[str, NodeResult[Any]] = {}

    def start(self, name: str, node: str, payload: Any, **kwargs: Any) -> None:
        def run() -> None:
            self.results[name] = self.client.invoke(node, payload, **kwargs)

        thread = threading.Thread(target=run)
        self.threads.append(thread)
        thread.start()

    def gather(self, name: str, node: str, payload: Any, **kwargs: Any) -> None:
        coalescer = self.client._coalescer
        assert coalescer is not None
        before = coalescer.pending(node)
        self.start(name, node, payload, **kwargs)
        wait_until(lambda: coalescer.pending(node) > before, f"{name} gathering")

    def busy(self, node: str) -> None:
        """Start a slow one-call message of ``node``: later calls gather behind it."""
        coalescer = self.client._coalescer
        assert coalescer is not None
        payload: Any = {"keys": ["busy"]}
        if node == "MEMORY.WRITE":
            payload = {"memories": [{"key": "busy", "content": "x"}]}
        self.start("busy", node, payload, timeout=30)
        wait_until(lambda: coalescer.in_flight(node) == 1, "the first call in flight")

    def sent(self, node: str) -> None:
        coalescer = self.client._coalescer
        assert coalescer is not None
        wait_until(lambda: coalescer.pending(node) == 0, "the batch sent")

    def join(self) -> dict[str, NodeResult[Any]]:
        for thread in self.threads:
            thread.join(60)
        assert not any(t.is_alive() for t in self.threads)
        return self.results


def test_cancelling_one_call_of_a_batch_cancels_only_it(
    start_fleet_worker: Any, batching: DittoClient, tmp_path: Path
) -> None:
    with start_fleet_worker(lambda: _worker(tmp_path / "m.sqlite")):
        callers = Callers(batching)
        callers.busy("MEMORY.WRITE")
        token = CancelToken()
        write = "MEMORY.WRITE"
        callers.gather("slow", write, {"memories": [{"key": "slow-1", "content": "s"}]}, timeout=30)
        callers.gather("t", write, {"memories": [{"key": "t", "content": "t"}]}, cancel=token,
                       timeout=30)  # fmt: skip
        callers.gather("u", write, {"memories": [{"key": "u", "content": "u"}]}, timeout=30)
        # [slow-1, t, u] in one message: t waits behind slow-1 (the mutations of a batch on
        # a single-writer store run in order)
        callers.sent(write)
        token.cancel()
        results = callers.join()
        assert results["t"].status == "cancelled"
        assert results["t"].error is not None and results["t"].error.code == "MEMORY_CANCELLED"
        assert {n: results[n].status for n in ("busy", "slow", "u")} == dict.fromkeys(
            ("busy", "slow", "u"), "success"
        )
        got = batching.invoke("MEMORY.GET", {"keys": ["t", "u", "slow-1"]}, timeout=20)
        assert sorted(m.key for m in got.output) == ["slow-1", "u"]  # t never ran


def test_a_waiting_call_of_a_batch_never_holds_back_the_others(
    start_fleet_worker: Any, batching: DittoClient, tmp_path: Path
) -> None:
    """[wait, open] in one batch: the first waits for the second, which runs meanwhile (a
    worker running a batch's calls one after another would fail the first after
    WAIT_S)."""
    OPENED.clear()
    with start_fleet_worker(lambda: _worker(tmp_path / "m.sqlite")):
        seed = {"memories": [{"key": "wait-1", "content": "W"}, {"key": "open", "content": "O"}]}
        assert batching.invoke("MEMORY.WRITE", seed, timeout=20).status == "success"
        callers = Callers(batching)
        callers.busy("MEMORY.GET")
        callers.gather("wait", "MEMORY.GET", {"keys": ["wait-1"]}, timeout=WAIT_S * 2)
        callers.gather("open", "MEMORY.GET", {"keys": ["open"]}, timeout=WAIT_S * 2)
        callers.sent("MEMORY.GET")
        results = callers.join()
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(
        ("busy", "wait", "open"), "success"
    ), {n: r.error for n, r in results.items()}
    assert [m.content for m in results["wait"].output] == ["W"]
    assert [m.content for m in results["open"].output] == ["O"]


def test_one_calls_failure_timeout_or_invalid_input_never_fails_another(
    start_fleet_worker: Any, batching: DittoClient, tmp_path: Path
) -> None:
    with start_fleet_worker(lambda: _worker(tmp_path / "m.sqlite")):
        seed = {"memories": [{"key": "a", "content": "A"}, {"key": "b", "content": "B"}]}
        assert batching.invoke("MEMORY.WRITE", seed, timeout=20).status == "success"
        callers = Callers(batching)
        callers.busy("MEMORY.GET")
        get = "MEMORY.GET"
        callers.gather("a", get, {"keys": ["a"]}, timeout=30)
        callers.gather("invalid", get, {"keys": 5}, timeout=30)
        callers.gather("late", get, {"keys": ["slow-x"]}, timeout=SLOW_S / 2)
        callers.gather("not-json", get, {"keys": [object()]}, timeout=30)
        callers.gather("b", get, {"keys": ["b"]}, timeout=30)
        results = callers.join()
        assert results["a"].status == results["b"].status == "success"
        assert [m.content for m in results["a"].output] == ["A"]
        assert [m.content for m in results["b"].output] == ["B"]
        invalid = results["invalid"]
        assert invalid.status == "failed" and invalid.error is not None
        assert invalid.error.code == "INVALID_INPUT"
        assert results["late"].status == "timeout"
        assert results["not-json"].status == "failed"
        assert results["not-json"].error is not None
        assert results["not-json"].error.code == "INVALID_INPUT"


KILL_BATCH = 1500  # records per WRITE: ~0.3-1.5 s of work, so a kill lands inside the batch
BATCH_RECEIVED = re.compile(r"Task MEMORY\.WRITE:batch\[([^\]]+)\] received")


@pytest.mark.slow
def test_a_batch_redelivered_after_sigkill_mid_batch_applies_nothing_twice(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``ditto-worker worker --nodes writes`` (prefork, one pool process) on SQLite;
    four WRITEs gather into one batch behind a first WRITE; the pool process is SIGKILLed
    once the batch's second call has committed (its third is mid-transaction or not
    started). The batch is redelivered (mutations ack late) and each call runs again under
    its own execution id: the two committed ones answer from the store's ledger, the others
    apply once. Every call succeeds, every record exists once, and the database's trigger
    counts one INSERT per record."""
    log = tmp_path / "worker.log"
    target = SqliteTarget(tmp_path)
    target.prepare()
    # the first WRITE waits on a write lock the test holds until the four have gathered
    # behind it (on a quiet machine it used to finish before they did)
    monkeypatch.setenv("DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS", "600000")
    worker = start_worker(target, redis_url, tmp_path, log)
    settings = CoalescingSettings(enabled=True, in_flight=1, max_wait_us=60_000_000)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, coalescing=settings))
    names = ["first"] + [f"kill-{n}" for n in range(4)]
    try:
        wait_ready(log, worker)
        callers = Callers(client)

        def drafts(name: str) -> dict[str, Any]:
            return {"memories": [{"content": f"{name}-{i}"} for i in range(KILL_BATCH)]}

        write = "MEMORY.WRITE"
        lock = driver.connect(target.path, isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")
            callers.start("first", write, drafts("first"), timeout=120, execution_id="first")
            coalescer = client._coalescer
            assert coalescer is not None
            wait_until(lambda: coalescer.in_flight(write) == 1, "the first WRITE in flight")
            for name in names[1:]:
                callers.gather(name, write, drafts(name), timeout=120, execution_id=name)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        wait_until(lambda: BATCH_RECEIVED.search(log.read_text()), "the batch received", 120)
        wait_until(lambda: target.committed("kill-1"), "the batch's second call committed", 120)
        pool = live_child(worker.pid)
        assert pool is not None
        os.kill(pool, signal.SIGKILL)
        results = callers.join()
        received = BATCH_RECEIVED.findall(log.read_text())
    finally:
        client.close()
        stop_worker(worker)
    assert len(received) == 2 and received[0] == received[1], received  # redelivered once
    assert {n: results[n].status for n in names} == dict.fromkeys(names, "success")
    stored = target.all_memories()
    assert len(stored) == len(names) * KILL_BATCH  # nothing lost, nothing doubled
    assert Counter(m.content for m in stored) == Counter(
        f"{n}-{i}" for n in names for i in range(KILL_BATCH)
    )
    ids = {m.id for m in stored}
    assert {m.id for n in names for m in results[n].output} == ids  # replies name what exists
    assert target.effects() == Counter({("INSERT", i): 1 for i in ids})  # each applied once
    target.close()
