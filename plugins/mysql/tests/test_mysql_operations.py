"""Operation ids (MEM-RUN-7) and conditional UPDATE (MEM-UPDATE-5) on MySQL, beyond the
conformance suite: migration 2 on a version-1 database, a copy of an operation arriving
while the first is in flight, and the ``ifMetadata`` check holding the row until COMMIT.
Effects are counted by triggers (:mod:`.test_mysql_exactly_once`). Tested on MariaDB 10.11.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_plugin_mysql import migrations as m
from ditto_worker import Scope, create_memory, to_wire
from ditto_worker.memory.core import Memory

from .test_mysql_exactly_once import _run, effects

ALICE = Scope("acme", "alice")
T = "2026-01-01T00:00:00.000000Z"


def test_a_version_1_database_gains_operation_ids(
    mysql_url: str, mysql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:  # as the plugin before migration 2 left it
        patch.setattr(m, "MIGRATIONS", m.MIGRATIONS[:1])
        patch.setattr(m, "LATEST_VERSION", 1)
        old = MysqlMemoryStore(mysql_url, database=mysql_database)
        assert old.migrate().applied == (1,)
        old.close()
    d = f"`{mysql_database}`"
    _run(mysql_url, f"INSERT INTO {d}.scopes (id, ns_hash, namespace) VALUES "
         f"(7, UNHEX(SHA2('{ALICE.namespace}', 256)), '{ALICE.namespace}')",
         f"INSERT INTO {d}.memories (seq, scope, id, content, created_at, updated_at) "
         f"VALUES (1, 7, 'id-1', '\"walks daily\"', '{T}', '{T}')",
         f"UPDATE {d}.store_settings SET value = '1' WHERE name = 'sequence'")  # fmt: skip
    store = MysqlMemoryStore(mysql_url, database=mysql_database)
    try:
        assert store.migrate().applied == (2, 3)
        memory = create_memory(store)
        [old_record] = memory.get({"ids": ["id-1"]}, scope=ALICE).output
        assert (old_record.content, old_record.operation_id) == ("walks daily", None)
        note = {"memories": [{"content": "new"}]}
        written = memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written == memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written[0].operation_id == "op-1"
        update = {"memories": [{"id": "id-1", "content": "runs"}]}
        [updated] = memory.update(update, scope=ALICE, operation_id="op-2").output
        assert (updated.content, updated.operation_id) == ("runs", "op-2")
    finally:
        store.close()


def test_migration_2_runs_again_after_a_crash_before_its_record(
    mysql_url: str, mysql_database: str
) -> None:
    # MySQL commits DDL at once: a crash after the ALTER leaves the column without the
    # version row; the next migration must not fail on the existing column (MySQL 8 has
    # no ADD COLUMN IF NOT EXISTS)
    store = MysqlMemoryStore(mysql_url, database=mysql_database)
    try:
        store.migrate()
        _run(mysql_url, f"DELETE FROM `{mysql_database}`.ditto_migrations WHERE version = 2")
        assert store.migrate().applied == (2,)
        columns = _run(
            mysql_url,
            "SELECT COUNT(*) FROM information_schema.columns WHERE "
            f"table_schema = '{mysql_database}' AND column_name = 'operation_id'",
        )
        assert columns[0][0] == 2  # memories and operations, once each
    finally:
        store.close()


@pytest.fixture
def counted(mysql_store: MysqlMemoryStore, mysql_url: str, mysql_database: str) -> Memory:
    from .test_mysql_exactly_once import install_effect_counter

    mysql_store.migrate()
    install_effect_counter(mysql_url, mysql_database)
    return create_memory(mysql_store)


def test_a_copy_of_an_operation_in_flight_waits_and_applies_nothing(
    counted: Memory, mysql_url: str, mysql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two attempts (two execution ids) of one operation: the second blocks on the first's
    # uncommitted claim, then answers its output; one INSERT in all
    from ditto_plugin_mysql import store as store_module

    entered, release = threading.Event(), threading.Event()
    real = store_module.lock_sequence

    def slow(conn: Any) -> int:
        if not entered.is_set():
            entered.set()
            assert release.wait(30)
        return real(conn)

    monkeypatch.setattr(store_module, "lock_sequence", slow)
    results: dict[str, Any] = {}
    draft = {"memories": [{"key": "progress", "content": "once"}]}

    def attempt(eid: str) -> None:
        results[eid] = counted.write(draft, execution_id=eid, operation_id="task:stage-1")

    first = threading.Thread(target=attempt, args=("e1",))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=attempt, args=("e2",))
    second.start()
    time.sleep(0.5)
    assert second.is_alive()  # waiting on the first attempt's claim of the operation id
    release.set()
    first.join(30)
    second.join(30)
    assert [results[e].status for e in ("e1", "e2")] == ["success", "success"]
    assert to_wire(results["e1"])["output"] == to_wire(results["e2"])["output"]
    [only] = results["e1"].output
    assert effects(mysql_url, mysql_database) == Counter({("INSERT", only.id): 1})


def test_a_failed_condition_rolls_back_the_operation_claim(
    counted: Memory, mysql_url: str, mysql_database: str
) -> None:
    a, b = counted.write({"memories": [{"content": "a", "metadata": {"v": 1}},
                                       {"content": "b", "metadata": {"v": 1}}]}).output  # fmt: skip
    batch = {"memories": [{"id": a.id, "content": "a2", "ifMetadata": {"v": 1}},
                          {"id": b.id, "content": "b2", "ifMetadata": {"v": 2}}]}  # fmt: skip
    failed = counted.update(batch, operation_id="op-c")
    assert failed.error is not None and failed.error.code == "CONFLICT"
    assert "memories[1].ifMetadata" in failed.error.message
    assert [i.content for i in counted.get({"ids": [a.id, b.id]}).output] == ["a", "b"]
    assert _run(mysql_url, f"SELECT COUNT(*) FROM `{mysql_database}`.operations")[0][0] == 0
    assert not [op for op, _ in effects(mysql_url, mysql_database) if op == "UPDATE"]
    # the condition holds once the record is as expected: the same operation id applies
    counted.update({"memories": [{"id": b.id, "metadata": {"v": 2}}]})
    done = counted.update(batch, operation_id="op-c")
    assert [(i.content, i.operation_id) for i in done.output] == [("a2", "op-c"), ("b2", "op-c")]


def test_a_condition_is_checked_on_the_locked_row(
    counted: Memory, mysql_url: str, mysql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a writer that checked ifMetadata holds the row: a second conditional writer reading
    # the same version waits for the first's COMMIT and then sees the new metadata
    from ditto_plugin_mysql import store as store_module

    [item] = counted.write({"memories": [{"content": 0, "metadata": {"version": 0}}]}).output
    entered, release = threading.Event(), threading.Event()
    real = store_module.check_targets

    def slow(entries: Any, found: Any) -> None:
        real(entries, found)
        if not entered.is_set():
            entered.set()
            assert release.wait(30)

    monkeypatch.setattr(store_module, "check_targets", slow)
    entry = {"id": item.id, "content": 1, "metadata": {"version": 1}, "ifMetadata": {"version": 0}}
    results: dict[str, Any] = {}

    def attempt(name: str) -> None:
        results[name] = counted.update({"memories": [entry]})

    first = threading.Thread(target=attempt, args=("first",))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=attempt, args=("second",))
    second.start()
    time.sleep(0.5)
    assert second.is_alive()  # blocked on the row the first one locked
    release.set()
    first.join(30)
    second.join(30)
    assert (results["first"].status, results["second"].status) == ("success", "failed")
    assert results["second"].error.code == "CONFLICT"
    assert counted.get({"ids": [item.id]}).output[0].metadata == {"version": 1}
    assert effects(mysql_url, mysql_database)[("UPDATE", item.id)] == 1
