"""Re-embedding a MySQL/MariaDB database under a new embedding identity (MEM-RET-4,
:mod:`ditto_plugin_mysql.reembed`) on a real server: the live vectors move to the other
table and the identity with them in one short switch; records, keyword search, keys,
metadata and operation ids do not change; a killed reindex leaves the old identity
serving and finishes when run again; writes of the old identity during the run are
re-embedded before the switch; one run per database at a time. Shared checks:
:mod:`ditto_worker.testing.reembedding`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingProvider
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing import reembedding as checks

from .conftest import admin

Make = Callable[[EmbeddingProvider], MysqlMemoryStore]


@pytest.fixture
def make(mysql_url: str, mysql_database: str) -> Make:
    return lambda embedder: MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, embedder=embedder
    )


@pytest.mark.parametrize(
    "check",
    [
        checks.check_reindex_switches_every_vector_and_the_identity,
        checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes,
        checks.check_writes_during_a_reindex_are_not_lost,
        checks.check_calls_during_a_reindex_fail_only_with_the_identity,
    ],
)
def test_shared_reindex_checks(make: Make, check: Any) -> None:
    check(make)


def _tables(url: str, database: str) -> tuple[set[str], dict[str, str]]:
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name LIKE 'memory_vectors%%'",
                [database],
            )
            names = {str(row[0]) for row in cur.fetchall()}
            cur.execute(f"SELECT name, value FROM `{database}`.store_settings")
            settings = {str(n): str(v) for n, v in cur.fetchall()}
    finally:
        conn.close()
    return names, settings


def test_the_live_vectors_alternate_tables_and_new_processes_wake(
    make: Make, mysql_url: str, mysql_database: str
) -> None:
    with closing(make(checks.OLD)) as old:
        old.write(MemoryWriteInput.model_validate({"memories": [{"content": "a tea"}]}))
    waiting = make(checks.NEW)  # opened before the switch: refused, then recovers
    with pytest.raises(MemoryError) as err:
        waiting.search(MemorySearchInput(query="tea", strategy="vector"))
    assert err.value.code == ErrorCode.EMBEDDING_MISMATCH
    with closing(make(checks.NEW)) as new:
        assert new.reembed_embeddings() == 1
    hits = waiting.search(MemorySearchInput(query="tea", strategy="vector"))
    assert [hit.memory.content for hit in hits] == ["a tea"]
    waiting.close()
    names, settings = _tables(mysql_url, mysql_database)
    assert names == {"memory_vectors_b"} and settings["vectors_table"] == "memory_vectors_b"
    assert "embedding_next" not in settings
    third = HashingEmbedder(dims=16, seed=3)
    with closing(make(third)) as again:  # and back to the first table
        assert again.reembed_embeddings() == 1
        hits = again.search(MemorySearchInput(query="tea", strategy="vector"))
        assert [hit.memory.content for hit in hits] == ["a tea"]
    names, settings = _tables(mysql_url, mysql_database)
    assert names == {"memory_vectors"} and settings["vectors_table"] == "memory_vectors"
    assert settings["embedding"] == third.identity.to_json()


def test_one_reindex_per_database_at_a_time(
    make: Make, mysql_url: str, mysql_database: str
) -> None:
    with closing(make(checks.OLD)) as old:
        old.write(MemoryWriteInput.model_validate({"memories": [{"content": "a"}]}))
    other = admin(mysql_url)
    try:
        with other.cursor() as cur, closing(make(checks.NEW)) as new:
            cur.execute("SELECT GET_LOCK(%s, 0)", [f"ditto_reindex:{mysql_database}"])
            with pytest.raises(MemoryError) as err:
                new.reembed_embeddings()
            assert err.value.code == ErrorCode.CONFLICT
            cur.execute("SELECT RELEASE_ALL_LOCKS()")
            assert new.reembed_embeddings() == 1
    finally:
        other.close()


def test_the_reindex_command_on_mysql(
    make: Make, mysql_url: str, mysql_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ditto-worker reindex --store mysql`; the hashing providers stand in for models
    from typer.testing import CliRunner

    from ditto_worker.cli.commands import app

    checks.use_old_and_new(monkeypatch)
    with closing(make(checks.OLD)) as old:
        drafts = [{"content": f"note {i}"} for i in range(4)]
        ids = [i.id for i in old.write(MemoryWriteInput.model_validate({"memories": drafts}))]
    env = {"DITTO_WORKER_MEMORY_MYSQL_URL": mysql_url, "DITTO_BROKER_URL": "",
           "DITTO_WORKER_MEMORY_MYSQL_DATABASE": mysql_database,
           "DITTO_WORKER_MEMORY_MYSQL_EMBEDDING": "old"}  # fmt: skip
    args = ["reindex", "--store", "mysql", "--embedding", "new", "--batch-size", "3"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "4 memories embedded" in result.output and "seed=7" in result.output
    with closing(make(checks.NEW)) as new:
        checks.assert_vectors(new, {i: f"note {n}" for n, i in enumerate(ids)})
