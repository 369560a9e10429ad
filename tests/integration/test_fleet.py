"""The fleet end to end: a real Celery worker on a real Redis, real SQLite store.

No eager mode, no fakes: messages are JSON on Redis, routed to one queue per node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import CancelToken, create_memory, create_memory_worker, to_wire
from ditto_worker.config import FleetSettings
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet.celery_app import create_celery_app
from ditto_worker.fleet.client import DittoClient
from ditto_worker.memory.worker import MemoryWorker

pytestmark = pytest.mark.integration


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


def sqlite_worker(path: Path, **kwargs: Any) -> MemoryWorker:
    return create_memory_worker(SqliteMemoryStore(path), **kwargs)


class SlowStore(SqliteMemoryStore):
    """A real SQLite store whose GET sleeps first (to exercise timeouts and revokes)."""

    delay_s = 2.0

    def get(self, input: Any, options: Any = None) -> Any:
        time.sleep(self.delay_s)
        return super().get(input, options)


def test_every_node_round_trip_matches_direct_sdk(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path, tmp_path: Path
) -> None:  # MEM-NODE-3: invoke and the direct SDK return the same NodeResult shape
    direct = create_memory(SqliteMemoryStore(tmp_path / "direct.sqlite"))
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path)):
        calls: list[tuple[str, dict[str, Any]]] = [
            (
                "MEMORY.WRITE",
                {
                    "memories": [
                        {
                            "key": "pref",
                            "content": {"language": "zh-CN"},
                            "metadata": {"source": "user"},
                        },
                        {"content": "Jon lost his job as a banker", "metadata": {"n": 2}},
                        {"content": None},
                    ]
                },
            ),
            ("MEMORY.GET", {"keys": ["pref"]}),
            ("MEMORY.QUERY", {"filter": {"n": {"$gte": 1}}, "limit": 10}),
            ("MEMORY.SEARCH", {"query": "banker job", "limit": 5}),
        ]
        for node, payload in calls:
            remote = client.invoke(node, payload, timeout=10)
            local = direct.execute(node, payload)
            assert remote.status == local.status == "success", (node, remote.error)
            assert remote.node == node
            assert _strip_ids(to_wire(remote)["output"]) == _strip_ids(to_wire(local)["output"])
            assert _stamps(to_wire(remote)["output"]) == _stamps(to_wire(local)["output"])
        written = client.invoke("MEMORY.QUERY", {"limit": 10}, timeout=10).output
        assert [m.content for m in written.items] == [
            {"language": "zh-CN"},
            "Jon lost his job as a banker",
            None,
        ]  # MEM-DATA-4: null content survives the broker
        first = written.items[0]
        upd = client.invoke(
            "MEMORY.UPDATE", {"memories": [{"id": first.id, "content": None}]}, timeout=10
        )
        assert upd.status == "success" and upd.output[0].content is None
        assert upd.output[0].key == "pref" and upd.output[0].metadata == {"source": "user"}
        dele = client.invoke("MEMORY.DELETE", {"ids": [first.id, first.id, "nope"]}, timeout=10)
        assert dele.status == "success" and dele.output.deleted == [first.id]


_ASSIGNED = ("id", "score", "createdAt", "updatedAt")
"""What each store assigns on its own (MEM-DATA-1, MEM-DATA-5): compared by presence only."""


def _stamps(value: Any) -> list[bool]:
    """For every record in ``value``: whether it carries both timestamps (MEM-DATA-5)."""
    if isinstance(value, dict):
        here = [("createdAt" in value and "updatedAt" in value)] if "content" in value else []
        return here + [s for v in value.values() for s in _stamps(v)]
    if isinstance(value, list):
        return [s for v in value for s in _stamps(v)]
    return []


def _strip_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_ids(v) for k, v in value.items() if k not in _ASSIGNED}
    if isinstance(value, list):
        return [_strip_ids(v) for v in value]
    return value


def test_failures_cross_the_broker_as_node_results(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path
) -> None:  # MEM-ERR-1, MEM-ERR-3
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path)):
        bad = client.invoke("MEMORY.QUERY", {"limit": 10001}, timeout=10)
        assert bad.status == "failed" and bad.error.code == "INVALID_INPUT"
        assert "limit" in bad.error.message
        client.invoke("MEMORY.WRITE", {"memories": [{"key": "k", "content": 1}]}, timeout=10)
        conflict = client.invoke(
            "MEMORY.WRITE", {"memories": [{"key": "k", "content": 2}]}, timeout=10
        )
        assert conflict.status == "failed" and conflict.error.code == "CONFLICT"
        missing = client.invoke(
            "MEMORY.UPDATE", {"memories": [{"id": "nope", "content": 1}]}, timeout=10
        )
        assert missing.error.code == "NOT_FOUND"
        strategy = client.invoke("MEMORY.SEARCH", {"query": "x", "strategy": "graph"}, timeout=10)
        assert strategy.error.code == "UNSUPPORTED_STRATEGY"


def test_each_node_is_routed_to_its_own_queue(
    client: DittoClient, redis_client: redis.Redis
) -> None:  # SPEC "Python mapping": one queue per node
    for node in NODE_QUEUES:
        result = client.invoke(node, {"ids": ["x"]}, timeout=0.2)  # no worker: times out
        assert result.status == "timeout" and result.error.code == "MEMORY_TIMEOUT"
    for node, queue in NODE_QUEUES.items():
        assert redis_client.llen(queue) == 1, (node, queue)


def test_worker_consumes_only_its_queues(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, sqlite_path: Path
) -> None:
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path), queues=["memory.get"]):
        assert client.invoke("MEMORY.GET", {"ids": ["a"]}, timeout=10).status == "success"
        write = client.invoke("MEMORY.WRITE", {"memories": [{"content": 1}]}, timeout=0.5)
        assert write.status == "timeout"
        assert redis_client.llen("memory.write") == 1
    assert create_memory(SqliteMemoryStore(sqlite_path)).query({}).output.items == []


def test_unknown_node_is_refused_before_sending(
    client: DittoClient, redis_client: redis.Redis
) -> None:  # MEM-PY-3
    result = client.invoke("MEMORY.UPSERT", {"memories": []}, timeout=5)
    assert result.status == "failed" and result.error.code == "UNKNOWN_NODE"
    assert all(redis_client.llen(q) == 0 for q in NODE_QUEUES.values())


def test_timeout_revokes_and_worker_keeps_serving(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path
) -> None:  # MEM-PY-2: timeout -> timeout / MEMORY_TIMEOUT
    def factory() -> MemoryWorker:
        return create_memory_worker(SlowStore(sqlite_path))

    with start_fleet_worker(factory, pool="threads", concurrency=2):
        started = time.monotonic()
        result = client.invoke("MEMORY.GET", {"ids": ["a"]}, timeout=0.5)
        elapsed = time.monotonic() - started
        assert result.status == "timeout" and result.error.code == "MEMORY_TIMEOUT"
        assert elapsed < 1.5
        ok = client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=10)
        assert ok.status == "success"


def test_cancel_token_revokes_the_call(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path
) -> None:  # MEM-PY-2: cancel -> cancelled / MEMORY_CANCELLED
    token = CancelToken()
    token.cancel()
    early = client.invoke("MEMORY.GET", {"ids": ["a"]}, timeout=5, cancel=token)
    assert early.status == "cancelled" and early.error.code == "MEMORY_CANCELLED"

    def factory() -> MemoryWorker:
        return create_memory_worker(SlowStore(sqlite_path))

    with start_fleet_worker(factory):
        token = CancelToken()
        import threading

        threading.Timer(0.3, token.cancel).start()
        started = time.monotonic()
        result = client.invoke("MEMORY.GET", {"ids": ["a"]}, timeout=10, cancel=token)
        assert result.status == "cancelled" and result.error.code == "MEMORY_CANCELLED"
        assert time.monotonic() - started < 1.5


def test_an_expired_call_never_runs(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path
) -> None:  # MEM-PY-3: messages carry expires
    result = client.invoke("MEMORY.WRITE", {"memories": [{"content": "late"}]}, timeout=0.3)
    assert result.status == "timeout"
    time.sleep(0.5)
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path)):
        # The worker receives the expired message, marks it revoked, and serves the next call.
        assert client.invoke("MEMORY.QUERY", {"limit": 10}, timeout=10).status == "success"
        time.sleep(0.5)
    items = create_memory(SqliteMemoryStore(sqlite_path)).query({}).output.items
    assert items == []


@pytest.mark.parametrize("serializer", ["pickle", "yaml"])
def test_a_non_json_message_is_refused(
    start_fleet_worker: Any,
    redis_url: str,
    client: DittoClient,
    sqlite_path: Path,
    serializer: str,
) -> None:  # SPEC "Python mapping": only JSON crosses the broker; pickle is never accepted
    sender = create_celery_app(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path)):
        refused = sender.send_task(
            "MEMORY.WRITE",
            kwargs={"input": {"memories": [{"content": serializer}]}},
            queue="memory.write",
            serializer=serializer,
        )
        ok = client.invoke("MEMORY.WRITE", {"memories": [{"content": "json"}]}, timeout=10)
        assert ok.status == "success"
        time.sleep(0.5)
        assert refused.state == "PENDING"
    sender.close()
    items = create_memory(SqliteMemoryStore(sqlite_path)).query({}).output.items
    assert [m.content for m in items] == ["json"]


def test_an_oversize_input_is_refused_before_the_plugin(
    start_fleet_worker: Any, client: DittoClient, sqlite_path: Path
) -> None:  # issue 7: a configurable cap on input size (workers.memory.maxInputBytes)
    with start_fleet_worker(lambda: sqlite_worker(sqlite_path), maxInputBytes=4096):
        big = client.invoke("MEMORY.WRITE", {"memories": [{"content": "x" * 5000}]}, timeout=10)
        assert big.status == "failed" and big.error.code == "INVALID_INPUT"
        assert "4096-byte limit" in big.error.message and "xxxx" not in big.error.message
        small = client.invoke("MEMORY.WRITE", {"memories": [{"content": "x" * 100}]}, timeout=10)
        assert small.status == "success"
    items = create_memory(SqliteMemoryStore(sqlite_path)).query({}).output.items
    assert [len(m.content) for m in items] == [100]
