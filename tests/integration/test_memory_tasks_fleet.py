"""The worked tasks on a real fleet, a MEMORY worker SIGKILLed mid-mutation (issue 25 item 7:
"in one test, a fleet worker mid-mutation"; SPEC.md MEM-TASK-4, MEM-RUN-7).

A real ``ditto-worker worker --nodes memory`` (prefork, one pool process) over SQLite, and
over PostgreSQL, on real Redis serves MEMORY; INFER (the scripted fake endpoint) and
CONTEXT run in a Celery worker thread of the test; the controller runs ``run_write`` /
``run_update`` / ``run_search`` through a fleet runtime. The worker process's store is the
real plugin whose ``write`` / ``update`` stalls *after its transaction committed* on the first
preference mutation (a marker file keeps it to the first attempt), so the kill lands
exactly in the ambiguous window: the record is there, no reply was sent, nothing was
acknowledged. Two kills:

* ``write``: SIGKILL of the pool process. The message is requeued (``acks_late`` +
  ``reject_on_worker_lost``), the new pool process replays the operation id from the
  store's ledger, the controller's one call gets the committed record and the task
  goes on;
* ``update``: SIGKILL of the whole worker (main process and pool). The controller's call
  times out, the task fails ``MEMORY_TIMEOUT``; a new worker starts and the controller resumes
  the task: it reads the preference back, finds its operation id and the new version,
  and applies nothing again (``replayed``).

Checked: one preference record, version 2 (not 3), one INSERT and one UPDATE of it
(counted by triggers installed before the run), no proposal inferred twice, and a new
``search`` task recalls and cites ``v2``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import (
    Scope,
    create_context_worker,
    create_ditto,
    create_infer_worker,
)
from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.memory_tasks import run_search, run_update, run_write
from ditto_worker.runtime.definition import queue_of
from tests.conftest import fleet_config, postgres_url
from tests.integration.test_crash_redelivery import PostgresTarget, SqliteTarget, Target
from tests.unit._task_kit import ScriptedModel, options
from tests.unit.test_memory_tasks_preferences import FRENCH, GERMAN, MESSAGES, proposing, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STORES = {
    "sqlite": "ditto_plugin_sqlite:SqliteMemoryStore",
    "postgres": "ditto_plugin_postgres:PostgresMemoryStore",
}
"""The store class the worker process serves, per backend (its write/update stall)."""
RECEIVED = re.compile(r"Task (MEMORY\.\w+)\[([^\]]+)\] received")

_WORKER = r"""
import os, sys, time
from pathlib import Path
from importlib import import_module

markers, (module, _, name) = Path(sys.argv[1]), sys.argv[2].partition(":")
Store = getattr(import_module(module), name)

def stalling(name):
    real = getattr(Store, name)

    def method(self, input, options=None):
        done = real(self, input, options)  # committed
        marker = markers / f"{name}.stalled"
        preference = any((m.metadata or {}).get("kind") == "preference" for m in input.memories)
        if preference and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(600)  # until the test kills this process
        return done

    setattr(Store, name, method)

stalling("write")
stalling("update")
sys.argv = ["ditto-worker", "worker", *sys.argv[3:]]
from ditto_worker.cli import main
main()
"""


class MemoryWorker:
    """The stalling ``ditto-worker worker --nodes memory`` process (a session of its own)."""

    def __init__(self, folder: Path, broker: str, target: Target, seen: int = 0) -> None:
        self.folder, self.log_path = folder, folder / "worker.log"
        env = {**os.environ, "DITTO_BROKER_URL": broker, "DITTO_RESULT_BACKEND": broker,
               **target.worker_env()}  # fmt: skip
        args = [STORES[target.name], "--nodes", "memory", "--store", target.name,
                "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO",
                "--hostname", f"tasks-{os.getpid()}-{seen}@localhost"]  # fmt: skip
        with self.log_path.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(folder), *args], cwd=folder, env=env,
                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while self.log().count("ready.") <= seen:
            assert self.proc.poll() is None, self.log()[-4000:]
            assert time.monotonic() < deadline, self.log()[-4000:]
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def received(self, node: str) -> Counter[str]:
        """Per execution id of ``node``, how often the worker received it."""
        return Counter(eid for n, eid in RECEIVED.findall(self.log()) if n == node)

    def stalled(self, name: str, timeout_s: float = 120) -> int:
        """The pid of the pool process stalled after committing ``name`` (write/update)."""
        marker = self.folder / f"{name}.stalled"
        deadline = time.monotonic() + timeout_s
        while not (marker.exists() and marker.read_text()):
            assert self.proc.poll() is None, self.log()[-4000:]
            assert time.monotonic() < deadline, self.log()[-4000:]
            time.sleep(0.05)
        return int(marker.read_text())

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def _reply(body: Any) -> Any:
    """Proposes the preference the conversation states; writes the message in the language
    the prompt asks for."""
    asked = body["messages"][0]["content"]
    if "proposals" in str(body.get("response_format")):
        said = body["messages"][1]["content"]
        return proposing(FRENCH, "fr") if "French" in said else proposing(GERMAN, "de")
    return {"message": MESSAGES["de" if "German" in asked else "fr" if "French" in asked else "en"]}


@pytest.fixture
def helpers(redis_url: str) -> Iterator[ScriptedModel]:
    """INFER (the scripted model) and CONTEXT in a Celery worker thread of the test."""
    from celery.contrib.testing.worker import start_worker

    with ScriptedModel(_reply) as fake:
        infer = create_infer_worker({"baseUrl": fake.server.base_url, "model": "fake"},
                                    env={}, dotenv_path=None)  # fmt: skip
        context = create_context_worker()
        app = create_worker_app(fleet_config(redis_url), [infer, context])
        queues = [queue_of(n) for d in (infer, context) for n in d.nodes]
        with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                          queues=queues, shutdown_timeout=30.0, loglevel="WARNING"):  # fmt: skip
            yield fake
        app.close()


def _runtime(broker: str, call_timeout_s: float) -> Any:
    fleet = {"brokerUrl": broker, "resultBackend": broker, "callTimeoutS": call_timeout_s}
    return create_ditto(config=load_runtime_config({"fleet": fleet}, env={}))


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """The database (with triggers counting every row effect), dropped afterwards."""
    chosen = (
        PostgresTarget(postgres_url()) if request.param == "postgres" else SqliteTarget(tmp_path)
    )
    chosen.prepare()
    yield chosen
    chosen.close()


def test_a_memory_worker_killed_mid_mutation_writes_once_and_bumps_the_version_once(
    redis_url: str, tmp_path: Path, helpers: ScriptedModel, target: Target
) -> None:
    writer = options(tmp_path, allow_write=True)
    worker = MemoryWorker(tmp_path, redis_url, target)
    try:
        # 1. write: the pool process dies after COMMIT; Celery redelivers the call
        with _runtime(redis_url, 120) as runtime:
            killer = _Killer(lambda: os.kill(worker.stalled("write"), signal.SIGKILL))
            wrote = run_write(runtime, {"request": request("write", "w1", GERMAN)}, writer)
            killer.join()
        assert wrote.status == "success", wrote.error
        assert max(worker.received("MEMORY.WRITE").values()) == 2  # the killed call, again
        # 2. update: the whole worker dies after COMMIT; the call times out, the task fails
        # MEMORY_TIMEOUT; a new worker starts and the controller resumes the task
        with _runtime(redis_url, 20) as runtime:
            killer = _Killer(lambda: (worker.stalled("update"), worker.kill()))
            cut = run_update(runtime, {"request": request("update", "u1", FRENCH)}, writer)
            killer.join()
        assert cut.status == "failed" and cut.error is not None, cut
        assert cut.error["code"] == "MEMORY_TIMEOUT"  # an ambiguous end: was it applied?
        worker = MemoryWorker(tmp_path, redis_url, target, seen=1)
        with _runtime(redis_url, 120) as runtime:
            resumed = run_update(runtime, {"request": request("update", "u1", FRENCH)}, writer)
            found = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
    finally:
        worker.kill()
    assert resumed.status == "success", resumed.error
    assert resumed.artifact is not None and resumed.artifact["mutation"]["replayed"] is True
    assert found.status == "success", found.error
    assert found.artifact is not None
    [memory] = found.artifact["memories"]
    assert (memory["value"], memory["version"]) == ("fr", 2)
    assert found.artifact["message"].endswith(f"(memory {memory['id']} v2)")
    effects = target.effects()
    assert (effects[("INSERT", memory["id"])], effects[("UPDATE", memory["id"])]) == (1, 1)
    query = {"filter": {"kind": "preference"}}
    listed = target.memory().query(query, scope=Scope("acme", "alice")).output
    assert listed is not None
    assert [(m.id, m.metadata["version"], m.operation_id) for m in listed.items] == [
        (memory["id"], 2, "u1:update")
    ]  # fmt: skip
    proposals = [b for b in helpers.bodies if "proposals" in str(b.get("response_format"))]
    assert len(proposals) == 2  # one per task: the resume inferred no proposal again


class _Killer:
    """Runs ``kill`` in a thread (it waits for the stall, then kills); re-raises its error."""

    def __init__(self, kill: Any) -> None:
        import threading

        self.error: BaseException | None = None

        def run() -> None:
            try:
                kill()
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(180)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
