"""The coalescer's policy (issue 36 item 1), with a fake listener and publishers: a lone
call goes out at once as a one-call message; calls made while ``K`` messages are in flight
gather and go as one batch when one returns, at ``maxCalls``, or at ``maxWaitUs``."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from concurrent.futures import Future as ThreadFuture
from pathlib import Path
from typing import Any

import pytest
from kombu.exceptions import EncodeError, OperationalError

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.coalescing import UNSENT, Coalescer, Pending, meta_of
from ditto_worker.memory.worker import from_config
from ditto_worker.runtime.calls import Call
from ditto_worker.runtime.node_spec import KindCodes
from ditto_worker.testing.memory_store import InMemoryMemoryStore

CODES = KindCodes("MEMORY_CANCELLED", "MEMORY_TIMEOUT", "MEMORY_BACKEND_ERROR")


class Inline(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ThreadFuture[Any]:
        future: ThreadFuture[Any] = ThreadFuture()
        future.set_result(fn(*args, **kwargs))
        return future


class Loop:
    """call_soon_threadsafe runs at once; call_later is kept for the test to fire."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Callable[..., Any], tuple[Any, ...]]] = []

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        self.timers.append((delay, fn, args))

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for _, fn, args in timers:
            fn(*args)


class Listener:
    def __init__(self) -> None:
        self.loop = Loop()
        self.futures: dict[str, ThreadFuture[Any]] = {}
        self.ids = 0

    def new_id(self) -> str:
        self.ids += 1
        return f"batch-{self.ids}"

    def expect(self, task_id: str) -> tuple[ThreadFuture[Any], None]:
        self.futures[task_id] = ThreadFuture()
        return self.futures[task_id], None

    def waiting(self, task_id: str) -> ThreadFuture[Any] | None:
        return self.futures.get(task_id)

    def deliver(self, task_id: str, meta: Any) -> None:
        future = self.futures.get(task_id)
        if future is not None and not future.done():
            future.set_result(meta)

    def forget(self, task_id: str) -> None:
        future = self.futures.pop(task_id, None)
        if future is not None:
            future.cancel()


class Harness:
    def __init__(self, limit: int = 1, max_calls: int = 100) -> None:
        self.listener = Listener()
        self.singles: list[str] = []
        self.batches: list[tuple[str, list[str]]] = []
        self.sizes: list[int] = []
        self.fail_batch: type[Exception] | None = None
        self.fail_single: dict[str, type[Exception]] = {}
        self.coalescer = Coalescer(
            self.listener, self.one, self.many, Inline(),
            lambda node: limit, max_calls, 0.002, self.sizes.append,
        )  # fmt: skip

    def one(self, call: Call) -> None:
        failure = self.fail_single.get(call.execution_id)
        if failure is not None:
            raise failure()
        self.singles.append(call.execution_id)

    def many(self, node: str, batch_id: str, batch: list[Pending]) -> None:
        if self.fail_batch is not None:
            raise self.fail_batch()
        self.batches.append((batch_id, [p.call.execution_id for p in batch]))

    def call(self, eid: str, node: str = "MEMORY.GET") -> Call:
        """A call the client has accepted (its result future exists), then sent."""
        self.listener.expect(eid)
        call = Call(node, {"keys": [eid]}, eid, 1e12, CODES)
        self.coalescer.send(call)
        return call

    def answer(self, task_id: str, meta: Any) -> None:
        self.listener.deliver(task_id, meta)


def wire(eid: str, status: str = "success") -> dict[str, Any]:
    if status == "success":
        return {"executionId": eid, "node": "MEMORY.GET", "status": "success", "output": []}
    error = {"code": "INVALID_INPUT", "message": "bad"}
    return {"executionId": eid, "node": "MEMORY.GET", "status": status, "error": error}


def test_a_lone_call_goes_out_at_once_as_a_one_call_message() -> None:
    h = Harness(limit=1)
    h.call("a")
    assert h.singles == ["a"]
    assert h.batches == [] and h.listener.loop.timers == []
    assert h.coalescer.in_flight("MEMORY.GET") == 1
    h.answer("a", meta_of(wire("a")))
    assert h.coalescer.in_flight("MEMORY.GET") == 0
    h.call("b")  # idle again: at once
    assert h.singles == ["a", "b"] and h.batches == []


def test_calls_made_while_k_are_in_flight_gather_and_go_when_one_returns() -> None:
    h = Harness(limit=2)
    for eid in "abcde":
        h.call(eid)
    assert h.singles == ["a", "b"]  # K = 2 at once
    assert h.batches == []  # c, d, e gather
    h.answer("a", meta_of(wire("a")))
    assert h.batches == [("batch-1", ["c", "d", "e"])]
    assert h.sizes == [3]
    h.answer(
        "batch-1", {"status": "SUCCESS", "result": [wire("e"), wire("c"), wire("d", "failed")]}
    )
    futures = h.listener.futures
    assert futures["c"].result()["status"] == "SUCCESS"
    assert futures["e"].result()["result"]["executionId"] == "e"
    failed = futures["d"].result()
    assert (
        failed["status"] == "FAILURE" and failed["result"]["exc_message"][0]["executionId"] == "d"
    )
    assert h.coalescer.in_flight("MEMORY.GET") == 1  # b


def test_a_batch_goes_at_max_calls_and_at_max_wait() -> None:
    h = Harness(limit=1, max_calls=3)
    for eid in "abcd":
        h.call(eid)
    assert h.singles == ["a"] and h.batches == [("batch-1", ["b", "c", "d"])]
    h.call("e")
    assert len(h.listener.loop.timers) == 1  # armed once for the next gathering batch
    h.call("f")
    assert len(h.listener.loop.timers) == 1
    h.listener.loop.fire()  # maxWaitUs after "e"
    assert h.batches[-1] == ("batch-2", ["e", "f"])
    assert h.coalescer.in_flight("MEMORY.GET") == 3


def test_nodes_gather_separately() -> None:
    h = Harness(limit=1)
    h.call("a", "MEMORY.GET")
    h.call("b", "MEMORY.QUERY")
    assert h.singles == ["a", "b"]


def test_a_call_whose_caller_gave_up_is_left_out_and_a_lone_survivor_goes_alone() -> None:
    h = Harness(limit=1)
    h.call("a")
    h.call("b")
    h.call("c")
    h.listener.forget("b")  # its caller timed out or was cancelled
    h.answer("a", meta_of(wire("a")))
    assert h.batches == [] and h.singles == ["a", "c"]


def test_a_batch_that_cannot_be_encoded_goes_call_by_call() -> None:
    h = Harness(limit=1)
    h.call("a")
    h.call("b")
    h.call("c")
    h.fail_batch = EncodeError
    h.fail_single["c"] = EncodeError
    h.answer("a", meta_of(wire("a")))
    assert h.singles == ["a", "b"]
    assert h.listener.futures["c"].result() == {"status": UNSENT, "result": "encode"}
    assert not h.listener.futures["b"].done()
    assert h.coalescer.in_flight("MEMORY.GET") == 1  # b's own message


def test_a_batch_the_broker_refuses_fails_each_call_and_frees_its_slot() -> None:
    h = Harness(limit=1)
    h.call("a")
    h.call("b")
    h.call("c")
    h.fail_batch = OperationalError
    h.answer("a", meta_of(wire("a")))
    for eid in "bc":
        assert h.listener.futures[eid].result() == {"status": UNSENT, "result": "broker"}
    assert h.coalescer.in_flight("MEMORY.GET") == 0


def test_a_failed_batch_reports_its_failure_to_each_call() -> None:
    h = Harness(limit=1)
    for eid in "abc":
        h.call(eid)
    h.answer("a", meta_of(wire("a")))
    lost = {"status": "FAILURE", "result": {"exc_type": "WorkerLostError", "exc_message": []}}
    h.answer("batch-1", lost)
    assert h.listener.futures["b"].result() == lost == h.listener.futures["c"].result()


def test_a_batch_whose_callers_all_ended_is_forgotten_and_frees_its_slot() -> None:
    h = Harness(limit=1)
    for eid in "abc":
        h.call(eid)
    h.answer("a", meta_of(wire("a")))
    assert "batch-1" in h.listener.futures
    h.listener.forget("b")
    h.listener.forget("c")  # both timed out: nobody awaits the batch any more
    assert "batch-1" not in h.listener.futures
    assert h.coalescer.in_flight("MEMORY.GET") == 0


def test_a_single_send_that_raises_raises_to_its_caller_and_frees_its_slot() -> None:
    h = Harness(limit=1)
    h.fail_single["a"] = OperationalError
    with pytest.raises(OperationalError):
        h.call("a")
    assert h.coalescer.in_flight("MEMORY.GET") == 0


def test_a_single_writer_stores_mutations_run_a_batch_in_order(tmp_path: Path) -> None:
    """The worker runs a batch's calls at the same time, except a single-writer store's
    mutations (they would only queue on its write lock): their specs say ``serial``."""
    sqlite = create_memory_worker(SqliteMemoryStore(str(tmp_path / "m.sqlite")))
    serial = {n for n, spec in sqlite.nodes.items() if spec.serial}
    assert serial == {"MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"}
    concurrent = create_memory_worker(InMemoryMemoryStore())
    assert not any(spec.serial for spec in concurrent.nodes.values())
    configured = from_config(
        load_runtime_config({"workers": {"memory": {"store": "sqlite"}}}, env={})
    )
    assert {n for n, spec in configured.nodes.items() if spec.serial} == serial
