"""Exactly-once effects: a replayed execution id applies nothing and returns the committed
result (issue 7 item 1; seed: no duplicated write, no double version bump after a retry)."""

from __future__ import annotations

from pathlib import Path

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory, to_wire


def test_write_update_delete_replays_return_the_committed_result(tmp_path: Path) -> None:
    memory = create_memory(SqliteMemoryStore(tmp_path / "m.sqlite"))
    drafts = {"memories": [{"content": "a"}, {"content": "b"}]}
    first = memory.write(drafts, execution_id="w1")
    again = memory.write(drafts, execution_id="w1")  # redelivered after a crash
    assert first.status == again.status == "success"
    assert to_wire(first)["output"] == to_wire(again)["output"]  # the same ids
    assert [m.content for m in memory.query({}).output.items] == ["a", "b"]  # nothing doubled
    a_id, b_id = (m.id for m in first.output)

    v1 = memory.update({"memories": [{"id": a_id, "content": "v1"}]}, execution_id="u1")
    memory.update({"memories": [{"id": a_id, "content": "v2"}]}, execution_id="u2")
    replay = memory.update({"memories": [{"id": a_id, "content": "v1"}]}, execution_id="u1")
    assert to_wire(replay)["output"] == to_wire(v1)["output"]
    assert memory.get({"ids": [a_id]}).output[0].content == "v2"  # the later update stands

    deleted = memory.delete({"ids": [b_id]}, execution_id="d1")
    assert memory.delete({"ids": [b_id]}, execution_id="d1").output.deleted == [b_id]
    assert memory.delete({"ids": [b_id]}, execution_id="d2").output.deleted == []  # MEM-DELETE-2
    assert deleted.output.deleted == [b_id]


def test_a_failed_mutation_records_nothing(tmp_path: Path) -> None:
    memory = create_memory(SqliteMemoryStore(tmp_path / "m.sqlite"))
    memory.write({"memories": [{"key": "k", "content": 1}]})
    conflict = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert conflict.error.code == "CONFLICT"
    memory.delete({"ids": [memory.get({"keys": ["k"]}).output[0].id]})
    retried = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert retried.status == "success"  # the failed attempt left no execution behind


def test_old_executions_are_pruned(tmp_path: Path) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite", execution_retention_s=0.0)
    memory = create_memory(store)
    memory.write({"memories": [{"content": "a"}]}, execution_id="old")
    memory.write({"memories": [{"content": "b"}]}, execution_id="new")  # prunes "old"
    again = memory.write({"memories": [{"content": "a"}]}, execution_id="old")
    assert again.status == "success"
    assert len(memory.query({}).output.items) == 3  # past retention, an id counts as new


def test_the_same_id_on_another_node_is_a_conflict_and_applies_nothing(tmp_path: Path) -> None:
    memory = create_memory(SqliteMemoryStore(tmp_path / "m.sqlite"))
    written = memory.write({"memories": [{"content": "a"}]}, execution_id="same")
    a_id = written.output[0].id
    update = memory.update({"memories": [{"id": a_id, "content": "b"}]}, execution_id="same")
    delete = memory.delete({"ids": [a_id]}, execution_id="same")
    for result in (update, delete):
        assert result.status == "failed" and result.error.code == "CONFLICT"
        assert "MEMORY.WRITE" in result.error.message
    assert memory.get({"ids": [a_id]}).output[0].content == "a"
    again = memory.write({"memories": [{"content": "a"}]}, execution_id="same")
    assert to_wire(again)["output"] == to_wire(written)["output"]  # still the WRITE's
