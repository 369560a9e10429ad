"""Operation ids on a real fleet (MEM-RUN-7; issue 25 item 1).

A replay of a mutation under the same operation id — after the first attempt's result
expired or its task was revoked, so the execution id is useless — applies nothing twice:
a real Celery worker on real Redis, the ``ditto_operation`` header from the client, the
store's ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import Scope, create_memory, create_memory_worker
from ditto_worker.config import FleetSettings
from ditto_worker.fleet.client import DittoClient
from ditto_worker.testing import InMemoryMemoryStore
from tests.conftest import mysql_url, postgres_url

pytestmark = pytest.mark.integration


@pytest.fixture(params=["memory", "sqlite", "postgres", "qdrant-local", "mysql", "milvus-lite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    if request.param == "memory":
        yield InMemoryMemoryStore
    elif request.param == "sqlite":
        yield lambda: SqliteMemoryStore(tmp_path / "m.sqlite")
    elif request.param == "qdrant-local":
        from ditto_plugin_qdrant import QdrantMemoryStore

        yield lambda: QdrantMemoryStore(path=str(tmp_path / "qdrant"))
    elif request.param == "mysql":
        yield from _mysql_stores()
    elif request.param == "milvus-lite":
        from ditto_plugin_milvus import MilvusMemoryStore

        milvus: list[Any] = []
        yield lambda: milvus.append(MilvusMemoryStore(uri=str(tmp_path / "m.db"))) or milvus[-1]
        for store in milvus:
            store.close()
    else:
        yield from _postgres_stores()


def _postgres_stores() -> Iterator[Callable[[], Any]]:
    """Stores on a fresh PostgreSQL schema, dropped afterwards."""
    from ditto_plugin_postgres import PostgresMemoryStore

    url, schema = postgres_url(), f"t_{uuid.uuid4().hex}"
    stores: list[Any] = []
    yield lambda: stores.append(PostgresMemoryStore(url, schema=schema)) or stores[-1]
    for store in stores:
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _mysql_stores() -> Iterator[Callable[[], Any]]:
    """Stores on a fresh MySQL database, dropped afterwards."""
    import pymysql

    from ditto_plugin_mysql import MysqlMemoryStore
    from ditto_plugin_mysql.db import parse_url

    url, database = mysql_url(), f"t_{uuid.uuid4().hex}"
    stores: list[Any] = []
    yield lambda: stores.append(MysqlMemoryStore(url, database=database)) or stores[-1]
    for store in stores:
        store.close()
    a = parse_url(url)
    conn = pymysql.connect(host=a.host, port=a.port, user=a.user, password=a.password)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    finally:
        conn.close()


def test_a_replay_after_expiry_or_revoke_applies_nothing_twice(
    start_fleet_worker: Any, redis_url: str, redis_client: Any, make_store: Callable[[], Any]
) -> None:
    store = make_store()
    if not store.capabilities.operation_ids:
        pytest.skip("the store does not declare operation_ids yet")
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
    scope = Scope.for_task("acme", "alice", "t-1")
    client = DittoClient.from_fleet(fleet, scope=scope)
    note = {"memories": [{"key": "progress", "content": {"stage": 1}}]}
    try:
        with start_fleet_worker(lambda: create_memory_worker(store)):
            first = client.invoke("MEMORY.WRITE", note, operation_id="t-1:stage-1", timeout=20)
            assert first.status == "success", first.error
            # the first attempt's result expires and its task id is revoked: the execution id
            # can no longer tell a retry what happened
            stored = list(redis_client.scan_iter(f"*{first.execution_id}*"))
            assert stored and redis_client.delete(*stored) == len(stored)
            client.app.control.revoke(first.execution_id)
            again = client.invoke("MEMORY.WRITE", note, operation_id="t-1:stage-1", timeout=20)
            assert again.status == "success", again.error
            assert again.execution_id != first.execution_id
            assert again.output == first.output
            changed = {"memories": [{"key": "progress", "content": {"stage": 2}}]}
            conflict = client.invoke("MEMORY.WRITE", changed, operation_id="t-1:stage-1")
            assert conflict.error is not None and conflict.error.code == "CONFLICT"
            bad = client.invoke("MEMORY.WRITE", note, operation_id="")
            assert bad.error is not None and bad.error.code == "INVALID_INPUT"
            got = client.invoke("MEMORY.GET", {"keys": ["progress"]}, timeout=20)
            assert [(i.content, i.operation_id) for i in got.output] == [
                ({"stage": 1}, "t-1:stage-1")
            ]
    finally:
        client.close()
    listed = create_memory(store).query({}, scope=scope).output.items
    assert [i.id for i in listed] == [first.output[0].id]
