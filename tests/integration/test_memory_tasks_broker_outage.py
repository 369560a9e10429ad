"""The fleet's broker Redis killed in the middle of a worked task (issue 35 item 8; SPEC.md
MEM-TASK-5: "Redis, database and embedding outages fail explicitly").

One real ``redis-server`` owned by the test is the fleet's broker *and* result backend;
real Celery workers serve CONTEXT and INFER (the scripted fake endpoint) in a thread of the
test, and MEMORY over SQLite either there too or as ``ditto-worker worker --nodes memory``
(prefork, a subprocess: the production shape); the controller runs ``run_write`` /
``run_search`` through a fleet runtime (``create_ditto`` with ``fleet.brokerUrl``: a
``DittoClient``). Redis is SIGKILLed at an event that proves the task is mid-way, never
after a sleep:

* ``write`` on the prefork worker: the preference's MEMORY.WRITE *committed* and stalls
  before its reply (the ambiguous window: the record is there, nobody heard of it);
  Celery terminates the unacknowledged call on the lost connection;
* ``search``: while its ``message`` INFER call runs, after ``progress:recall`` committed;
* ``write`` between two Graphs: once ``progress:propose`` committed, before the next call
  is sent.

Checked: the task ends ``failed`` / ``FLEET_UNAVAILABLE`` within a bound (the call's
timeout plus a busy machine's slack, in a thread: a hang fails the test) saying what was
lost — not a slow node's ``MEMORY_TIMEOUT`` / ``INFER_TIMEOUT``, as a call in flight
ended before (the finding of issue 35 item 8) —; the task's checkpoints are the ones
committed before the kill, no artifact is published; the store holds the preference once
(a kill past the commit: one INSERT, counted by a trigger) or not at all (before it).
Redis back on the same port (empty: no persistence), the *same* runtime resumes the task:
no committed stage runs again (the model is not asked again), the mutation is found by its
operation id (not written twice), and the outcome equals an undisturbed run's (another
user's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import (
    Scope,
    create_context_worker,
    create_ditto,
    create_infer_worker,
    create_memory_worker,
)
from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.memory_tasks import MemoryStorage, open_memory_storage, run_search, run_write
from ditto_worker.runtime.definition import queue_of
from ditto_worker.testing.servers import RedisServer
from tests.conftest import EVENT_WAIT_S, fleet_config, missing_service, wait_until
from tests.unit._task_kit import ScriptedModel, options
from tests.unit.test_memory_tasks_preferences import GERMAN, MESSAGES, proposing, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALL_TIMEOUT_S = 20.0
"""The controller's call timeout (``fleet.callTimeoutS``, and the INFER calls' ``model.
timeoutS``): a call whose reply was lost with Redis ends after it."""


class Gate:
    """A point inside a node call where the test takes over: once ``armed``, the first
    call that reaches it sets ``reached`` and waits (bounded) for ``released``."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.reached = threading.Event()
        self.released = threading.Event()

    def pass_through(self) -> None:
        if self.armed.is_set():
            self.armed.clear()
            self.reached.set()
            self.released.wait(EVENT_WAIT_S)


class Fleet:
    """The test's Redis, a Celery worker thread serving MEMORY / CONTEXT / INFER on it, and
    a controller runtime whose calls go through the broker."""

    def __init__(self, server: RedisServer, storage: MemoryStorage, model: ScriptedModel,
                 gate: Gate) -> None:  # fmt: skip
        self.server, self.storage, self.model, self.gate = server, storage, model, gate
        infer = create_infer_worker({"baseUrl": model.server.base_url, "model": "fake"},
                                    env={}, dotenv_path=None)  # fmt: skip
        self.definitions = [storage.workers[0], create_context_worker(), infer]
        self.app = create_worker_app(fleet_config(server.url), self.definitions)
        fleet = {"brokerUrl": server.url, "resultBackend": server.url,
                 "callTimeoutS": CALL_TIMEOUT_S}  # fmt: skip
        self.runtime = create_ditto(config=load_runtime_config({"fleet": fleet}, env={}))
        self.direct = create_ditto(workers=[create_memory_worker(storage.store)])
        """The store read in this process, not through the fleet."""

    def up(self) -> bool:
        return _serving(self.runtime)


def _serving(runtime: Any) -> bool:
    """One MEMORY.QUERY through the fleet succeeded (a MEMORY worker consumes again)."""
    answer = runtime.invoke("MEMORY.QUERY", {"limit": 1}, timeout=5,
                            scope=Scope("acme", "probe"))  # fmt: skip
    return bool(answer.status == "success")


def _own_redis() -> RedisServer:
    """A started ``redis-server`` of the test's own (it is killed and started again)."""
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as exc:
        server.close()
        missing_service(str(exc))
    return server


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    from celery.contrib.testing.worker import start_worker

    server = _own_redis()
    storage = open_memory_storage("sqlite", tmp_path / "store")
    gate = Gate()
    with ScriptedModel(_replying(gate)) as model:
        built = Fleet(server, storage, model, gate)
        queues = [queue_of(n) for d in built.definitions for n in d.nodes]
        try:
            with start_worker(built.app, pool="threads", concurrency=4,
                              perform_ping_check=False, queues=queues, shutdown_timeout=30.0,
                              loglevel="WARNING"):  # fmt: skip
                yield built
                if built.server.proc is None:  # a test that failed before Redis came back
                    built.server.start()
        finally:
            gate.released.set()
            built.runtime.close()
            built.direct.close()
            built.app.close()
            storage.close()
            server.close()


def _replying(gate: Gate) -> Callable[[Any], Any]:
    """The model: proposes the German preference; writes the message in the language
    asked for, passing ``gate`` first (the search's INFER call is then mid-way)."""

    def reply(body: Any) -> Any:
        if "proposals" in str(body.get("response_format")):
            return proposing(GERMAN, "de")
        gate.pass_through()
        asked = body["messages"][0]["content"]
        return {"message": MESSAGES["de" if "German" in asked else "en"]}

    return reply


def _in_thread(run: Callable[[], Any], bound_s: float) -> tuple[Any, float]:
    """``run()`` in a thread, its result and seconds taken; fails when it outlasts
    ``bound_s`` (a hang)."""
    done: list[Any] = []
    started = time.monotonic()
    worker = threading.Thread(target=lambda: done.append(run()), daemon=True)
    worker.start()
    worker.join(bound_s)
    assert not worker.is_alive(), f"the task did not end within {bound_s:.0f} s"
    assert done, "the task raised instead of returning an outcome"
    return done[0], time.monotonic() - started


def _task_keys(fleet: Fleet, task_id: str, user: str = "alice") -> set[str]:
    """The checkpoint keys committed in the task's space (read from the store directly)."""
    scope = Scope.for_task("acme", user, task_id)
    listed = fleet.direct.invoke("MEMORY.QUERY", {}, scope=scope)
    assert listed.status == "success", listed.error
    return {item.key for item in listed.output.items}


def _preferences(fleet: Fleet, user: str) -> list[Any]:
    query = {"filter": {"kind": "preference"}}
    listed = fleet.direct.invoke("MEMORY.QUERY", query, scope=Scope("acme", user))
    assert listed.status == "success", listed.error
    return list(listed.output.items)


def _same_shape(artifact: dict[str, Any]) -> dict[str, Any]:
    """An artifact without what differs between two users' runs of the same task (task
    id, memory ids, whether a stage was restored or a mutation replayed)."""
    ids = {m["id"] for m in artifact.get("memories") or []}
    text = str(artifact["message"])
    for found in ids:
        text = text.replace(found, "<id>")
    memories = [{k: v for k, v in m.items() if k not in ("id",)} for m in artifact["memories"]]
    mutation = artifact.get("mutation")
    if mutation is not None:
        mutation = {"node": mutation["node"],
                    "records": [{k: v for k, v in r.items() if k != "id"}
                                for r in mutation["records"]]}  # fmt: skip
    admission = artifact.get("admission")
    return {"message": text, "memories": memories, "mutation": mutation,
            "admission": None if admission is None else admission["decision"],
            "stages": [p["stage"] for p in artifact["progress"]],
            "applied": artifact["applied"]}  # fmt: skip


def _lost_fleet(outcome: Any) -> None:
    """The task failed on the fleet's outage, saying so (not a slow node's timeout, not a
    traceback) and how to go on."""
    assert outcome.status == "failed" and outcome.error is not None, outcome
    code, message = outcome.error["code"], outcome.error["message"]
    assert code == "FLEET_UNAVAILABLE", outcome.error
    assert "the result backend (127.0.0.1:" in message and "was lost" in message, message
    assert "same operation id" in message and "Traceback" not in message, message


def _inputs(kind: str, task_id: str, said: str | None = None) -> dict[str, Any]:
    return {"request": request(kind, task_id, said), "model": {"timeoutS": CALL_TIMEOUT_S}}


def _proposals(model: ScriptedModel) -> int:
    return sum(1 for b in model.bodies if "proposals" in str(b.get("response_format")))


def test_broker_killed_mid_search_fails_explicitly_and_the_resume_completes(
    fleet: Fleet, tmp_path: Path
) -> None:
    for user in ("alice", "bob"):
        wrote = run_write(fleet.runtime, _inputs("write", f"{user}-w1", GERMAN),
                          options(tmp_path, user=user, allow_write=True))  # fmt: skip
        assert wrote.status == "success", wrote.error
    calm = run_search(fleet.runtime, _inputs("search", "bob-s1"), options(tmp_path, user="bob"))
    assert calm.status == "success", calm.error

    fleet.gate.armed.set()

    def killer() -> None:
        assert fleet.gate.reached.wait(EVENT_WAIT_S), "the message's INFER call never started"
        fleet.server.stop()
        fleet.gate.released.set()

    kill = threading.Thread(target=killer, daemon=True)
    kill.start()
    down, took = _in_thread(lambda: run_search(fleet.runtime, _inputs("search", "s1"),
                                               options(tmp_path)),
                            CALL_TIMEOUT_S + EVENT_WAIT_S)  # fmt: skip
    kill.join(EVENT_WAIT_S)
    print(f"\nsearch: failed {down.error} after {took:.1f} s")
    _lost_fleet(down)
    assert _task_keys(fleet, "s1") == {"progress:recall"}
    assert not (tmp_path / "artifacts" / "s1.json").exists()

    fleet.server.start()
    wait_until(fleet.up, "the fleet serving again after Redis came back")
    back = run_search(fleet.runtime, _inputs("search", "s1"), options(tmp_path))
    assert back.status == "success", back.error
    assert back.artifact is not None and calm.artifact is not None
    assert [p["stage"] for p in back.artifact["progress"] if p["restored"]] == ["recall"]
    assert _same_shape(back.artifact) == _same_shape(calm.artifact)


def test_broker_killed_between_two_stages_of_a_write_fails_at_once_and_writes_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Redis killed once ``progress:propose`` committed, before the next Graph is sent:
    the send fails ``FLEET_UNAVAILABLE`` naming the broker, no preference is written (the
    before state); the resume restores the proposal and writes once."""

    def on_stage(line: str) -> None:  # in the controller's loop, between two Graphs
        if line.startswith("propose: done"):
            fleet.server.stop()

    cut = options(tmp_path, allow_write=True, on_stage=on_stage)
    down, took = _in_thread(lambda: run_write(fleet.runtime, _inputs("write", "w2", GERMAN), cut),
                            CALL_TIMEOUT_S + EVENT_WAIT_S)  # fmt: skip
    print(f"\nwrite between stages: failed {down.error} after {took:.1f} s")
    assert down.status == "failed" and down.error is not None, down
    assert down.error["code"] == "FLEET_UNAVAILABLE", down.error
    assert "the broker (127.0.0.1:" in down.error["message"], down.error
    assert fleet.server.proc is None  # killed inside the task
    assert _task_keys(fleet, "w2") == {"progress:propose"}
    assert _preferences(fleet, "alice") == []  # the before state
    asked = _proposals(fleet.model)

    fleet.server.start()
    wait_until(fleet.up, "the fleet serving again after Redis came back")
    back = run_write(fleet.runtime, _inputs("write", "w2", GERMAN),
                     options(tmp_path, allow_write=True))  # fmt: skip
    assert back.status == "success", back.error
    assert back.artifact is not None and back.artifact["mutation"]["replayed"] is False
    assert [p["stage"] for p in back.artifact["progress"] if p["restored"]] == ["propose"]
    assert _proposals(fleet.model) == asked  # the proposal was not inferred again
    [stored] = _preferences(fleet, "alice")
    assert stored.metadata["version"] == 1


def test_broker_killed_while_a_prefork_worker_holds_a_committed_write(tmp_path: Path) -> None:
    """The production worker's shape: ``ditto-worker worker --nodes memory`` (prefork, a
    subprocess; the stalling store of ``test_memory_tasks_fleet``) holds the preference
    write after its COMMIT when Redis is killed. Celery terminates the unacknowledged call
    on the lost connection; the task fails ``FLEET_UNAVAILABLE``; the worker reconnects
    to Redis on its own, and the resume finds the write by its operation id: one INSERT of
    the record (counted by a trigger), no UPDATE."""
    from celery.contrib.testing.worker import start_worker

    from tests.integration.test_crash_redelivery import SqliteTarget
    from tests.integration.test_memory_tasks_fleet import MemoryWorker

    server = _own_redis()
    target = SqliteTarget(tmp_path)
    target.prepare()
    gate = Gate()  # never armed: the model answers at once
    writer = options(tmp_path, allow_write=True)
    fleet = {"brokerUrl": server.url, "resultBackend": server.url,
             "callTimeoutS": CALL_TIMEOUT_S}  # fmt: skip
    worker: MemoryWorker | None = None
    try:
        with ScriptedModel(_replying(gate)) as model:
            infer = create_infer_worker({"baseUrl": model.server.base_url, "model": "fake"},
                                        env={}, dotenv_path=None)  # fmt: skip
            helpers = [infer, create_context_worker()]
            app = create_worker_app(fleet_config(server.url), helpers)
            queues = [queue_of(n) for d in helpers for n in d.nodes]
            with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                              queues=queues, shutdown_timeout=30.0,
                              loglevel="WARNING"):  # fmt: skip
                started = time.monotonic()
                worker = stalling = MemoryWorker(tmp_path, server.url, target)
                print(f"\nprefork worker up after {time.monotonic() - started:.1f} s")
                runtime = create_ditto(config=load_runtime_config({"fleet": fleet}, env={}))
                try:

                    def killer() -> None:  # once the write committed and stalls
                        stalling.stalled("write", EVENT_WAIT_S)
                        server.stop()

                    kill = threading.Thread(target=killer, daemon=True)
                    kill.start()
                    down, took = _in_thread(
                        lambda: run_write(runtime, _inputs("write", "w1", GERMAN), writer),
                        CALL_TIMEOUT_S + EVENT_WAIT_S,
                    )
                    kill.join(EVENT_WAIT_S)
                    print(f"\nprefork write: failed {down.error} after {took:.1f} s")
                    _lost_fleet(down)
                    inserted = {k: n for k, n in target.effects().items() if k[0] == "INSERT"}
                    task = Scope.for_task("acme", "alice", "w1")
                    found = target.memory().query({}, scope=task).output
                    kept = {i.key for i in found.items} if found is not None else set()
                    assert kept == {"progress:propose", "candidate"}  # committed before
                    assert not (tmp_path / "artifacts" / "w1.json").exists()
                    server.start()
                    started = time.monotonic()
                    wait_until(lambda: _serving(runtime), "the prefork worker back")
                    print(f"fleet back after {time.monotonic() - started:.1f} s")
                    back = run_write(runtime, _inputs("write", "w1", GERMAN), writer)
                    bob = options(tmp_path, user="bob", allow_write=True)
                    calm = run_write(runtime, _inputs("write", "bob-w1", GERMAN), bob)
                finally:
                    runtime.close()
            app.close()
    finally:
        if worker is not None:
            worker.kill()
        server.close()
    memory = target.memory()
    listed = memory.query({"filter": {"kind": "preference"}}, scope=Scope("acme", "alice"))
    assert listed.output is not None, listed.error
    [stored] = listed.output.items
    target.close()
    assert back.status == "success", back.error
    assert back.artifact is not None and back.artifact["mutation"]["replayed"] is True
    assert [p["stage"] for p in back.artifact["progress"] if p["restored"]] == ["propose"]
    assert calm.status == "success" and calm.artifact is not None, calm.error
    assert _same_shape(back.artifact) == _same_shape(calm.artifact)  # an undisturbed run's
    assert _proposals(model) == 2  # one per task: the resume inferred no proposal again
    assert inserted.get(("INSERT", stored.id)) == 1  # committed before the kill ...
    effects = target.effects()
    assert (effects[("INSERT", stored.id)], effects[("UPDATE", stored.id)]) == (1, 0)  # ... once
    assert stored.metadata is not None and stored.metadata["version"] == 1
    assert stored.operation_id == "w1:write"
