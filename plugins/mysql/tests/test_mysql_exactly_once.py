"""Exactly-once WRITE/UPDATE/DELETE on MySQL by execution id (as on PostgreSQL; seed: no
duplicated write, no double version bump after a crash and retry). Tested on MariaDB 10.11.

Every effect on ``memories`` is counted by triggers the test installs (``effects``: a row
per inserted, updated or deleted record, in the mutation's own transaction), so a replay
that applied anything would show up there, not only in the returned output.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_worker import create_memory, to_wire
from ditto_worker.memory.core import Memory

from .conftest import admin


def _run(url: str, *statements: str) -> list[Any]:
    conn = admin(url)
    try:
        rows: list[Any] = []
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
        return rows
    finally:
        conn.close()


def install_effect_counter(url: str, database: str) -> None:
    """``effects(op, id)``: a row per record inserted, updated or deleted."""
    d = f"`{database}`"
    _run(url, f"CREATE TABLE {d}.effects (op VARCHAR(8) NOT NULL, id VARCHAR(64) NOT NULL)",
         *(f"CREATE TRIGGER {d}.count_{op.lower()} AFTER {op} ON {d}.memories FOR EACH ROW "
           f"INSERT INTO {d}.effects VALUES ('{op}', {'OLD' if op == 'DELETE' else 'NEW'}.id)"
           for op in ("INSERT", "UPDATE", "DELETE")))  # fmt: skip


def effects(url: str, database: str) -> Counter[tuple[str, str]]:
    rows = _run(url, f"SELECT op, id FROM `{database}`.effects")
    return Counter((str(op), str(i)) for op, i in rows)


@pytest.fixture
def counted(mysql_store: MysqlMemoryStore, mysql_url: str, mysql_database: str) -> Memory:
    mysql_store.migrate()
    install_effect_counter(mysql_url, mysql_database)
    return create_memory(mysql_store)


def test_replays_return_the_committed_output_and_apply_nothing(
    counted: Memory, mysql_url: str, mysql_database: str
) -> None:
    memory = counted
    drafts = {"memories": [{"content": {"z": 1, "a": [2, 1.5]}, "key": "k1"}, {"content": "b"}]}
    first = memory.write(drafts, execution_id="w1")
    again = memory.write(drafts, execution_id="w1")  # redelivered after a crash
    assert first.status == again.status == "success"
    assert to_wire(first)["output"] == to_wire(again)["output"]  # the same ids
    a_id, b_id = (m.id for m in first.output)
    v1 = memory.update({"memories": [{"id": a_id, "metadata": {"v": 1}}]}, execution_id="u1")
    memory.update({"memories": [{"id": a_id, "metadata": {"v": 2}}]}, execution_id="u2")
    replay = memory.update({"memories": [{"id": a_id, "metadata": {"v": 1}}]}, execution_id="u1")
    assert to_wire(replay)["output"] == to_wire(v1)["output"]  # the record as it was then
    assert memory.get({"ids": [a_id]}).output[0].metadata == {"v": 2}  # the later one stands
    gone = memory.delete({"ids": [b_id]}, execution_id="d1")
    assert memory.delete({"ids": [b_id]}, execution_id="d1").output == gone.output
    assert effects(mysql_url, mysql_database) == Counter(
        {("INSERT", a_id): 1, ("INSERT", b_id): 1, ("UPDATE", a_id): 2, ("DELETE", b_id): 1}
    )


def test_a_failed_mutation_records_nothing_and_another_node_conflicts(counted: Memory) -> None:
    memory = counted
    taken = memory.write({"memories": [{"key": "k", "content": 1}]}, execution_id="w0")
    clash = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="w1")
    assert clash.error is not None and clash.error.code == "CONFLICT"
    retry = memory.write({"memories": [{"key": "k2", "content": 2}]}, execution_id="w1")
    assert retry.status == "success"  # the failed call recorded nothing
    other = memory.update({"memories": [{"id": taken.output[0].id, "content": 3}]},
                          execution_id="w0")  # fmt: skip
    assert other.error is not None and other.error.code == "CONFLICT"
    assert "MEMORY.WRITE" in other.error.message
    assert memory.get({"ids": [taken.output[0].id]}).output[0].content == 1


def test_a_concurrent_copy_waits_for_the_first_and_replays_its_output(
    counted: Memory, mysql_url: str, mysql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first copy holds its claim (uncommitted) while the second arrives
    from ditto_plugin_mysql import store as store_module

    memory = counted
    entered, release = threading.Event(), threading.Event()
    real = store_module.lock_sequence

    def slow(conn: Any) -> int:
        if not entered.is_set():
            entered.set()
            assert release.wait(30)
        return real(conn)

    monkeypatch.setattr(store_module, "lock_sequence", slow)
    results: list[Any] = []
    draft = {"memories": [{"content": "once"}]}
    first = threading.Thread(target=lambda: results.append(memory.write(draft, execution_id="c")))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=lambda: results.append(memory.write(draft, execution_id="c")))
    second.start()
    time.sleep(0.5)
    assert second.is_alive()  # waiting on the first copy's claim
    release.set()
    first.join(30)
    second.join(30)
    assert [r.status for r in results] == ["success", "success"]
    assert to_wire(results[0])["output"] == to_wire(results[1])["output"]
    assert sum(effects(mysql_url, mysql_database).values()) == 1


def test_ids_are_scoped_by_namespace(counted: Memory) -> None:
    from ditto_worker import Scope

    memory = counted
    a = memory.write({"memories": [{"content": "a"}]}, execution_id="same",
                     scope=Scope("t", "a"))  # fmt: skip
    b = memory.write({"memories": [{"content": "b"}]}, execution_id="same",
                     scope=Scope("t", "b"))  # fmt: skip
    assert a.status == b.status == "success" and a.output[0].id != b.output[0].id
