"""No memory content in worker logs, the client log, Celery events or Flower (issue 14 item 2).

A real ``ditto-worker worker --nodes memory,context,infer`` (prefork, DEBUG log level, so
Celery's most talkative lines are in) and a real Flower on a real Redis. Every field of
every MEMORY node's input carries a marker string (keys, content, metadata keys and values,
filters, queries, cursors, ids, options), and so do CONTEXT.UPDATE/LOAD (item ids, content,
source node, metadata, the context name) and INFER.GENERATE (the prompt, and the reply of a
loopback chat endpoint). The outputs carry it back, so each call really moved the marker
through the fleet; afterwards the marker is in none of: the worker's log, this process's log
records (the client's), Flower's ``/api/tasks`` (arguments, results, every event field).
With ``fleet.logContent: true`` the same worker puts the marker in its log (the check can
fail).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.client import DittoClient
from tests.conftest import EVENT_WAIT_S
from tests.integration._procs import FlowerProc, WorkerProc
from tests.unit._fake_chat import FakeChatServer, reply_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

M = "SSN-078-05-1120-MARKER"


def memory_calls(client: DittoClient) -> list[tuple[str, Any]]:
    """Every MEMORY node with the marker in every input field; returns (node, result)."""
    results: list[tuple[str, Any]] = []

    def call(node: str, payload: dict[str, Any]) -> Any:
        result = client.invoke(node, payload, timeout=20)
        results.append((node, result))
        return result

    write = call("MEMORY.WRITE", {"memories": [
        {"key": f"key-{M}", "content": {"note": M, M: [M]}, "metadata": {"tag": M, M: M}},
        {"key": f"other-{M}", "content": f"the text {M}"},
    ]})  # fmt: skip
    assert write.status == "success", write.error
    first = write.output[0].id
    call("MEMORY.GET", {"ids": [first, f"id-{M}"], "keys": [f"key-{M}"]})
    order = [{"field": "tag", "direction": "desc"}]
    call("MEMORY.QUERY", {"filter": {"tag": {"$in": [M]}, M: {"$exists": False}},
                          "orderBy": order, "limit": 5})  # fmt: skip
    call("MEMORY.QUERY", {"filter": {"tag": M}, "cursor": f"cursor-{M}"})  # INVALID_CURSOR
    call("MEMORY.SEARCH", {"query": M, "filter": {"tag": M}, "limit": 3, "strategy": "keyword"})
    call("MEMORY.SEARCH", {"query": M, "options": {M: M}})  # an undeclared option: failure
    call("MEMORY.UPDATE", {"memories": [{"id": first, "content": f"updated {M}",
                                         "metadata": {"tag": M}}]})  # fmt: skip
    call("MEMORY.UPDATE", {"memories": [{"id": f"missing-{M}", "content": M}]})  # NOT_FOUND
    call("MEMORY.DELETE", {"ids": [first, f"gone-{M}"]})
    return results


def other_calls(client: DittoClient) -> list[tuple[str, Any]]:
    """CONTEXT (pure and cache mode) and INFER with the marker in their inputs."""
    item = {"id": f"item-{M}", "sourceNode": f"MEMORY.SEARCH-{M}", "content": M,
            "metadata": {M: M}}  # fmt: skip
    scope = {"tenant": "t1", "user": "u1"}
    return [
        ("CONTEXT.UPDATE", client.invoke(
            "CONTEXT.UPDATE", {"context": {"items": [item]}, "ingress": [item]}, timeout=20)),
        ("CONTEXT.UPDATE", client.invoke(
            "CONTEXT.UPDATE", {"name": f"ctx-{M}", "ingress": [item]}, timeout=20, scope=scope)),
        ("CONTEXT.LOAD", client.invoke(
            "CONTEXT.LOAD", {"name": f"ctx-{M}"}, timeout=20, scope=scope)),
        ("INFER.GENERATE", client.invoke(
            "INFER.GENERATE", {"messages": [{"role": "user", "content": f"say {M}"}]},
            timeout=20)),
    ]  # fmt: skip


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply_script("the answer is ", M)) as server:
        yield server


def start(folder: Path, redis_url: str, chat: FakeChatServer, extra_yaml: str = "") -> WorkerProc:
    folder.mkdir(exist_ok=True)
    (folder / "ditto.yaml").write_text(extra_yaml)
    env = {
        "DITTO_BROKER_URL": redis_url,
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite"),
        "DITTO_WORKER_CONTEXT_REDIS_URL": redis_url,
        "DITTO_WORKER_INFER_BASE_URL": chat.base_url,
        "DITTO_WORKER_INFER_MODEL": "fake-model",
    }
    return WorkerProc(folder, ["--nodes", "memory,context,infer", "--pool", "prefork",
                               "--concurrency", "2", "--loglevel", "DEBUG"], env)  # fmt: skip


def test_no_marker_in_worker_log_client_log_or_flower(
    redis_url: str, tmp_path: Path, chat: FakeChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    worker = start(tmp_path / "worker", redis_url, chat)
    flower = FlowerProc(tmp_path, {"DITTO_BROKER_URL": redis_url})
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    try:
        worker.wait_ready()
        flower.wait_listening()
        results = memory_calls(client) + other_calls(client)
        # every call ran, and the marker travelled through it
        outputs = {node: r for node, r in results}
        assert outputs["MEMORY.SEARCH"].status == "failed"  # the undeclared option
        assert [r.status for n, r in results if n == "MEMORY.QUERY"] == ["success", "failed"]
        assert M in str(results[0][1].output) and M in str(outputs["CONTEXT.LOAD"].output)
        assert M in outputs["INFER.GENERATE"].output.text, outputs["INFER.GENERATE"]
        assert any(M in str(seen.body) for seen in chat.requests)
        ids = {r.execution_id for _, r in results}

        # Flower has every call with its final state (events arrive shortly after results)
        deadline = time.monotonic() + EVENT_WAIT_S
        while True:
            tasks = flower.tasks()
            done = {i for i, t in tasks.items() if t.get("state") in ("SUCCESS", "FAILURE")}
            if ids <= done or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert ids <= done, {i: tasks.get(i, {}).get("state") for i in ids}
        status, body = flower.get("/api/tasks")
        assert status == 200 and M not in body
        shown = tasks[results[0][1].execution_id]
        assert shown["result"] == "<NodeResult MEMORY.WRITE success>", shown
        # the client's task-sent event and the worker's task-received event race to
        # Flower (two connections): its kwargs are the client's placeholder or the
        # worker's body size, redacted either way
        redacted = r"\{'input': <redacted(, message \d+ bytes)?>\}"
        assert re.fullmatch(redacted, shown["kwargs"]), shown
        assert "Task MEMORY.WRITE[" in worker.log()
    finally:
        client.close()
        worker.stop()
        flower.stop()
    log = worker.log()
    assert "succeeded in" in log and "TaskPool: Apply" in log  # DEBUG lines were written
    assert M not in log
    assert caplog.records and not [r for r in caplog.records if M in r.getMessage()]


def test_log_content_shows_the_marker(redis_url: str, tmp_path: Path, chat: FakeChatServer) -> None:
    worker = start(tmp_path / "debug", redis_url, chat, "fleet:\n  logContent: true\n")
    client = DittoClient.from_fleet(
        FleetSettings(broker_url=redis_url, result_backend=redis_url, log_content=True)
    )
    try:
        worker.wait_ready()
        result = client.invoke("MEMORY.WRITE", {"memories": [{"content": M}]}, timeout=20)
        assert result.status == "success"
    finally:
        client.close()
        worker.stop()
    assert M in worker.log()
