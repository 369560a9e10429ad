"""A node call that does not succeed is a Celery failure, end to end (issue 14 item 3).

A real Celery worker (in a thread of this process, threads pool) on a real Redis, traced by
OpenTelemetry's Celery instrumentation into an in-memory exporter:

* callers still get NodeResults — ``failed`` with the code and safe message, identical to
  what the embedded runtime answers — on the listener path and through ``ainvoke``;
* the task state is FAILURE with :class:`NodeFailed` carrying the NodeResult, and the
  ``task-failed`` event names node, status and code only;
* the worker's span of a failed call has status ERROR; a successful call's does not; the
  client's publish span and the worker's run span share one trace;
* Celery logs the failure on one line without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory, create_memory_worker
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.failures import NodeFailed, node_result_of
from ditto_worker.fleet.results import RESULT_KEY_PREFIX

pytestmark = pytest.mark.integration

MARK = "SECRET-FILTER-VALUE"

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
celery_otel = pytest.importorskip("opentelemetry.instrumentation.celery")


@pytest.fixture(scope="module")
def spans() -> Iterator[Any]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    instrumentor = celery_otel.CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield exporter
    instrumentor.uninstrument()


def test_failed_nodes_are_celery_failures_with_their_node_result(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path,
    spans: Any, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="celery.app.trace")
    direct = create_memory(SqliteMemoryStore(tmp_path / "direct.sqlite"))
    with start_fleet_worker(lambda: create_memory_worker(SqliteMemoryStore(tmp_path / "m.sqlite"))):
        spans.clear()
        ok = client.invoke("MEMORY.QUERY", {"limit": 1, "filter": {"tag": MARK}}, timeout=10)
        bad = client.invoke("MEMORY.QUERY", {"limit": 0}, timeout=10)
        missing = asyncio.run(
            client.ainvoke(
                "MEMORY.UPDATE", {"memories": [{"id": "nope", "content": 1}]}, timeout=10
            )  # fmt: skip
        )
    assert ok.status == "success"
    expected = direct.execute("MEMORY.QUERY", {"limit": 0})
    assert (bad.status, bad.error) == ("failed", expected.error)  # the same NodeResult
    assert bad.error is not None and bad.error.code == "INVALID_INPUT"
    assert missing.status == "failed" and missing.error is not None
    assert missing.error.code == "NOT_FOUND"

    # stored as a Celery FAILURE whose exception carries the NodeResult
    meta = json.loads(redis_client.get(RESULT_KEY_PREFIX + bad.execution_id) or b"{}")
    assert meta["status"] == "FAILURE" and meta["result"]["exc_type"] == "NodeFailed"
    wire = node_result_of(meta["result"])
    assert wire is not None and wire["error"]["code"] == "INVALID_INPUT"
    assert repr(NodeFailed(wire)) == "NodeFailed(MEMORY.QUERY failed INVALID_INPUT)"

    # logged on one line, without a traceback
    failed_lines = [r for r in caplog.records if "raised expected" in r.getMessage()]
    assert len(failed_lines) == 2 and not any(r.exc_info for r in failed_lines)
    assert "NodeFailed(MEMORY.QUERY failed INVALID_INPUT)" in failed_lines[0].getMessage()

    # tracing: the worker spans of the failed calls are errors; all share their client's trace
    finished = spans.get_finished_spans()
    runs = {s.attributes.get("celery.task_name"): s for s in finished if s.name.startswith("run/")}
    by_id = {s.attributes.get("messaging.message.id", s.attributes.get("celery.task_id")): s
             for s in finished if s.name.startswith("run/")}  # fmt: skip
    assert runs, [s.name for s in finished]
    ok_span, bad_span = by_id.get(ok.execution_id), by_id.get(bad.execution_id)
    assert ok_span is not None and bad_span is not None, [dict(s.attributes) for s in finished]
    assert ok_span.status.status_code != trace.StatusCode.ERROR
    assert bad_span.status.status_code == trace.StatusCode.ERROR
    publish = [s for s in finished if s.name.startswith("apply_async/")]
    assert {s.context.trace_id for s in publish} >= {bad_span.context.trace_id}
    seen = [
        (dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events]) for s in finished
    ]
    assert MARK not in str(seen)  # no input in span attributes or events
