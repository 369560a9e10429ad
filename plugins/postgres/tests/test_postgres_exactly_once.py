"""Exactly-once WRITE/UPDATE/DELETE on PostgreSQL (issue 7 item 1; seed: no duplicated
write, no double version bump after a crash and retry).

Every effect on ``memories`` is counted by a trigger the test installs (``effects``: one
row per inserted, updated or deleted record, written in the mutation's own transaction),
so a replay that applied anything would show up there, not only in the returned output.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore, create_store
from ditto_plugin_postgres.db import transaction
from ditto_plugin_postgres.executions import claim_replay, record
from ditto_plugin_postgres.migrations import lock_key
from ditto_worker import create_memory, to_wire
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.core import Memory
from ditto_worker.memory.ports import CancelToken, MemoryCallOptions

ENV = "DITTO_WORKER_MEMORY_POSTGRES_URL"


def install_effect_counter(url: str, schema: str) -> None:
    """``<schema>.effects(op, id)``: a row per record inserted, updated or deleted."""
    s = f'"{schema}"'
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {s}.effects (op text NOT NULL, id text NOT NULL)")
        conn.execute(
            f"CREATE FUNCTION {s}.count_effect() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO {s}.effects VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.id "
            "ELSE NEW.id END); RETURN NULL; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER count_effect AFTER INSERT OR UPDATE OR DELETE ON {s}.memories "
            f"FOR EACH ROW EXECUTE FUNCTION {s}.count_effect()"
        )


def effects(url: str, schema: str) -> Counter[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f'SELECT op, id FROM "{schema}".effects').fetchall()
    return Counter((str(op), str(i)) for op, i in rows)


@pytest.fixture
def counted(pg_store: PostgresMemoryStore, postgres_url: str, pg_schema: str) -> Memory:
    pg_store.migrate()
    install_effect_counter(postgres_url, pg_schema)
    return create_memory(pg_store)


def test_replays_return_the_committed_output_and_apply_nothing(
    counted: Memory, postgres_url: str, pg_schema: str
) -> None:
    memory = counted
    drafts = {"memories": [{"content": {"z": 1, "a": [2, 1.5]}, "key": "k1"}, {"content": "b"}]}
    first = memory.write(drafts, execution_id="w1")
    again = memory.write(drafts, execution_id="w1")  # redelivered after a crash
    assert first.status == again.status == "success"
    assert to_wire(first)["output"] == to_wire(again)["output"]  # the same ids
    assert list(again.output[0].content) == ["z", "a"]  # the JSON text as it was written
    a_id, b_id = (m.id for m in first.output)
    assert len(memory.query({}).output.items) == 2  # nothing doubled (a key: no CONFLICT)

    v1 = memory.update({"memories": [{"id": a_id, "metadata": {"v": 1}}]}, execution_id="u1")
    memory.update({"memories": [{"id": a_id, "metadata": {"v": 2}}]}, execution_id="u2")
    replay = memory.update({"memories": [{"id": a_id, "metadata": {"v": 1}}]}, execution_id="u1")
    assert replay.status == "success"
    assert to_wire(replay)["output"] == to_wire(v1)["output"]  # the record as it was then
    assert memory.get({"ids": [a_id]}).output[0].metadata == {"v": 2}  # the later one stands

    deleted = memory.delete({"ids": [b_id]}, execution_id="d1")
    assert memory.delete({"ids": [b_id]}, execution_id="d1").output.deleted == [b_id]
    assert memory.delete({"ids": [b_id]}, execution_id="d2").output.deleted == []  # MEM-DELETE-2
    assert deleted.output.deleted == [b_id]
    assert effects(postgres_url, pg_schema) == Counter(
        {("INSERT", a_id): 1, ("INSERT", b_id): 1, ("UPDATE", a_id): 2, ("DELETE", b_id): 1}
    )


def test_a_failed_mutation_records_nothing(counted: Memory) -> None:
    memory = counted
    memory.write({"memories": [{"key": "k", "content": 1}]})
    conflict = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert conflict.error.code == "CONFLICT"
    missing = memory.update({"memories": [{"id": "nope", "content": 0}]}, execution_id="y")
    assert missing.error.code == "NOT_FOUND"
    memory.delete({"ids": [memory.get({"keys": ["k"]}).output[0].id]})
    retried = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert retried.status == "success"  # the failed attempt left no execution behind
    ok = memory.update({"memories": [{"id": retried.output[0].id, "content": 3}]}, execution_id="y")
    assert ok.status == "success"


def test_the_same_id_on_another_node_is_a_conflict_and_applies_nothing(
    counted: Memory, postgres_url: str, pg_schema: str
) -> None:
    memory = counted
    written = memory.write({"memories": [{"content": "a"}]}, execution_id="same")
    a_id = written.output[0].id
    update = memory.update({"memories": [{"id": a_id, "content": "b"}]}, execution_id="same")
    delete = memory.delete({"ids": [a_id]}, execution_id="same")
    for result in (update, delete):
        assert result.status == "failed" and result.error.code == "CONFLICT"
        assert "MEMORY.WRITE" in result.error.message
    assert memory.get({"ids": [a_id]}).output[0].content == "a"
    assert effects(postgres_url, pg_schema) == Counter({("INSERT", a_id): 1})
    again = memory.write({"memories": [{"content": "a"}]}, execution_id="same")
    assert to_wire(again)["output"] == to_wire(written)["output"]  # still the WRITE's


# --- a copy that runs while the first is in flight ----------------------------------------


def waiting_on_locks(url: str, at_least: int, timeout_s: float = 20.0) -> None:
    """Until ``at_least`` backends of this database wait on a heavyweight lock."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] >= at_least:
                return
            time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} backends waited on a lock")


def run(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(target()))
    thread.start()
    return thread, out


@pytest.fixture
def write_lock(postgres_url: str, pg_schema: str) -> Iterator[psycopg.Connection]:
    """A session holding the store's writer advisory lock: WRITEs block after claiming."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [lock_key(pg_schema, "write")])
        yield conn


def test_a_concurrent_copy_waits_for_the_first_and_replays_its_output(
    counted: Memory, postgres_url: str, pg_schema: str, write_lock: psycopg.Connection
) -> None:
    memory = counted
    drafts = {"memories": [{"content": "once"}, {"content": "twice?"}]}
    first, first_out = run(lambda: memory.write(drafts, execution_id="w"))
    waiting_on_locks(postgres_url, 1)  # the first claimed "w", waits for the writer lock
    copy, copy_out = run(lambda: memory.write(drafts, execution_id="w"))
    waiting_on_locks(postgres_url, 2)  # the copy waits on the first's claim
    write_lock.execute("SELECT pg_advisory_unlock_all()")
    first.join(30)
    copy.join(30)
    assert first_out[0].status == copy_out[0].status == "success"
    assert to_wire(copy_out[0])["output"] == to_wire(first_out[0])["output"]
    ids = [m.id for m in first_out[0].output]
    assert effects(postgres_url, pg_schema) == Counter({("INSERT", i): 1 for i in ids})
    assert len(memory.query({}).output.items) == 2


def test_a_concurrent_update_copy_waits_then_replays(
    counted: Memory, postgres_url: str, pg_schema: str
) -> None:
    memory = counted
    a_id = memory.write({"memories": [{"content": "a"}]}).output[0].id
    with psycopg.connect(postgres_url) as blocker:  # holds the record's row lock
        blocker.execute(f'SELECT 1 FROM "{pg_schema}".memories WHERE id = %s FOR UPDATE', [a_id])
        change = {"memories": [{"id": a_id, "metadata": {"n": 1}}]}
        first, first_out = run(lambda: memory.update(change, execution_id="u"))
        waiting_on_locks(postgres_url, 1)
        copy, copy_out = run(lambda: memory.update(change, execution_id="u"))
        waiting_on_locks(postgres_url, 2)
        blocker.rollback()
    first.join(30)
    copy.join(30)
    assert first_out[0].status == copy_out[0].status == "success"
    assert to_wire(copy_out[0])["output"] == to_wire(first_out[0])["output"]
    assert effects(postgres_url, pg_schema)[("UPDATE", a_id)] == 1  # no double update


def test_when_the_first_rolls_back_the_copy_proceeds(
    counted: Memory, postgres_url: str, pg_schema: str, write_lock: psycopg.Connection
) -> None:
    memory = counted
    drafts = {"memories": [{"content": "x"}]}
    token = CancelToken()
    first, first_out = run(lambda: memory.write(drafts, execution_id="r", cancel=token))
    waiting_on_locks(postgres_url, 1)
    copy, copy_out = run(lambda: memory.write(drafts, execution_id="r"))
    waiting_on_locks(postgres_url, 2)
    token.cancel()  # the first is interrupted and rolls back, claim included
    first.join(30)
    assert first_out[0].status == "cancelled"
    write_lock.execute("SELECT pg_advisory_unlock_all()")
    copy.join(30)
    assert copy_out[0].status == "success"
    (written,) = copy_out[0].output
    assert effects(postgres_url, pg_schema) == Counter({("INSERT", written.id): 1})
    replay = memory.write(drafts, execution_id="r")
    assert to_wire(replay)["output"] == to_wire(copy_out[0])["output"]


# --- retention, namespaces, settings ------------------------------------------------------


def test_old_executions_are_pruned(postgres_url: str, pg_schema: str) -> None:
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, execution_retention_s=0.0)
    memory = create_memory(store)
    memory.write({"memories": [{"content": "a"}]}, execution_id="old")
    memory.write({"memories": [{"content": "b"}]}, execution_id="new")  # prunes "old"
    again = memory.write({"memories": [{"content": "a"}]}, execution_id="old")
    assert again.status == "success"
    assert len(memory.query({}).output.items) == 3  # past retention, an id counts as new
    with psycopg.connect(postgres_url) as conn:
        left = conn.execute(f'SELECT execution_id FROM "{pg_schema}".executions').fetchall()
    assert left == [("old",)]  # its own row is kept; "new" was pruned by the third call
    store.close()


def test_ids_are_scoped_by_namespace(pg_store: PostgresMemoryStore) -> None:
    pg_store.migrate()
    schema = f'"{pg_store.schema}"'
    pool = pg_store._get_pool()
    for namespace, output in (("", ["plain"]), ("tenant-a", ["a"])):
        with transaction(pool, MemoryCallOptions()) as conn:
            assert claim_replay(conn, schema, "e", "MEMORY.WRITE", namespace) is None
            record(conn, schema, "e", output, 3600.0, namespace)
    with transaction(pool, None) as conn:
        assert claim_replay(conn, schema, "e", "MEMORY.WRITE") == ["plain"]
        assert claim_replay(conn, schema, "e", "MEMORY.WRITE", "tenant-a") == ["a"]
        assert claim_replay(conn, schema, "e", "MEMORY.WRITE", "tenant-b") is None
        assert claim_replay(conn, schema, None, "MEMORY.WRITE") is None
        rows = conn.execute(f"SELECT count(*) FROM {schema}.executions").fetchone()
        assert rows == (3,)


def test_execution_retention_setting() -> None:
    env = {ENV: "postgresql://u:p@127.0.0.1:1/db"}
    assert create_store({}, env)._retention_s == 86400.0
    assert create_store({"executionRetentionS": 60}, env)._retention_s == 60.0
    with pytest.raises(ConfigError) as info:
        create_store({"executionRetentionS": -1}, env)
    assert "executionRetentionS" in str(info.value)


def test_a_claim_conflict_never_shows_driver_text(pg_store: PostgresMemoryStore) -> None:
    pg_store.migrate()
    pool, schema = pg_store._get_pool(), f'"{pg_store.schema}"'
    with transaction(pool, None) as conn:
        claim_replay(conn, schema, "z", "MEMORY.DELETE")
        record(conn, schema, "z", {"deleted": []}, 3600.0)
    with pytest.raises(MemoryError) as info, transaction(pool, None) as conn:
        claim_replay(conn, schema, "z", "MEMORY.UPDATE")
    assert info.value.code == "CONFLICT"
    assert "executions" not in str(info.value) and "INSERT" not in str(info.value)
