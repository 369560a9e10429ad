"""``ditto-worker prune`` (issue 37 item 4): a SQLite store's forgotten operation ids and
expired execution ids deleted in batches, the young ones kept; a store without ledgers
refused. Old rows are made with the store's injectable clock, not by waiting."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.cli.commands import app
from ditto_worker.memory.core import create_memory

DAY = 86400.0


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "m.sqlite"
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        young = {"memories": [{"key": "young", "content": 1}]}
        assert memory.execute("MEMORY.WRITE", young, operation_id="young").status == "success"
        store.retention.clock = lambda: time.time() - 70 * DAY  # older than 2 x 30 days
        for i in range(5):
            body = {"memories": [{"key": f"old-{i}", "content": i}]}
            assert memory.execute("MEMORY.WRITE", body, operation_id=f"old-{i}").status == (
                "success"
            )
    return {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(path), "DITTO_BROKER_URL": ""}


def test_prune_deletes_the_old_ledger_rows_in_batches(env: dict[str, str]) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["prune", "--store", "sqlite", "--batch", "2"], env=env)
    assert result.exit_code == 0, result.output
    assert "5 operation ids and 5 execution ids deleted" in result.output, result.output
    again = runner.invoke(app, ["prune", "--store", "sqlite"], env=env)
    assert again.exit_code == 0 and "0 operation ids and 0 execution ids" in again.output
    with SqliteMemoryStore(env["DITTO_WORKER_MEMORY_SQLITE_PATH"]) as store:
        ledger = store._conn().execute("SELECT operation_id FROM operations").fetchall()
        assert [row[0] for row in ledger] == ["young"]
        memory = create_memory(store)
        young = {"memories": [{"key": "young", "content": 1}]}
        replay = memory.execute("MEMORY.WRITE", young, operation_id="young")
        assert replay.status == "success" and len(store._conn().execute(
            "SELECT 1 FROM memories").fetchall()) == 6  # fmt: skip


def test_prune_refuses_a_store_without_ledgers(env: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["prune", "--store", "memory"], env=env)
    assert result.exit_code == 2
    assert "keeps no ledgers" in result.output
