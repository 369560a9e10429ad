"""Composable task loops on a real fleet (issue 35 item 7; SPEC.md MEM-GRAPH-1/4/5).

A Celery worker on real Redis serves MEMORY (the task directory's SQLite), CONTEXT and
INFER (the scripted fake endpoint); the controller is a fleet runtime. The host runs a
``write`` and a ``search`` task inside its own ``runtime.loop()`` (``run_write_loop`` and
``run_search_loop`` joined with ``yield from``): both succeed, the search applies what the
write stored, every Graph counts against the host's one budget, and the ``recall`` Graph's
MEMORY.SEARCH and CONTEXT.LOAD were in flight at the same time on the fleet (each handler
saw the other's start event; ``tests/unit/test_memory_tasks_compose.py`` has the
embedded runtime's cases).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_worker import create_context_worker, create_ditto, create_infer_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.memory_tasks import open_memory_storage, task_scope
from ditto_worker.runtime.definition import queue_of
from tests.conftest import fleet_config
from tests.unit._task_kit import options
from tests.unit.test_memory_tasks_compose import Meeting, _two_tasks
from tests.unit.test_memory_tasks_preferences import GERMAN, model, proposing

pytestmark = pytest.mark.integration


def test_two_tasks_in_one_host_loop_on_the_fleet(redis_url: str, tmp_path: Path) -> None:
    from celery.contrib.testing.worker import start_worker

    meeting = Meeting("MEMORY.SEARCH", "CONTEXT.LOAD")
    store = open_memory_storage("sqlite", tmp_path)
    with model(proposing(GERMAN, "de")) as fake:
        infer = create_infer_worker({"baseUrl": fake.server.base_url, "model": "fake"},
                                    env={}, dotenv_path=None)  # fmt: skip
        workers = [meeting.wrap(w) for w in [*store.workers, create_context_worker(), infer]]
        app = create_worker_app(fleet_config(redis_url), workers)
        queues = [queue_of(n) for d in workers for n in d.nodes]
        fleet = {"brokerUrl": redis_url, "resultBackend": redis_url, "callTimeoutS": 180}
        try:
            with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                              queues=queues, shutdown_timeout=30.0,
                              loglevel="WARNING"):  # fmt: skip
                with create_ditto(config=load_runtime_config({"fleet": fleet}, env={})) as rt:
                    scope = task_scope(options(tmp_path))
                    result = rt.loop(_two_tasks(tmp_path), None, scope=scope, run_id="host-f")
        finally:
            app.close()
            store.close()
    assert result.status == "success", result.error
    wrote, found = result.output
    assert wrote.status == "success", wrote.error
    assert found.status == "success", found.error
    [record] = wrote.artifact["mutation"]["records"]
    assert found.artifact["applied"]["language"] == "de"
    assert found.artifact["message"].endswith(f"(memory {record['id']} v1)")
    assert len(result.graphs) == wrote.graphs + found.graphs
    assert all(g.run_id.startswith("host-f.") for g in result.graphs)
    assert meeting.saw == {"MEMORY.SEARCH": True, "CONTEXT.LOAD": True}
