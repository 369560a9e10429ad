"""``ditto-worker migrate`` and ``ditto-worker demo --store postgres`` against the test server."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app

REPO = Path(__file__).resolve().parents[3]


def _env(url: str, schema: str) -> dict[str, str]:
    return {
        "DITTO_WORKER_MEMORY_POSTGRES_URL": url,
        "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA": schema,
        "DITTO_BROKER_URL": "",
    }


def test_migrate_command(
    postgres_url: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(
        app, ["migrate", "--store", "postgres"], env=_env(postgres_url, pg_schema)
    )
    assert first.exit_code == 0, first.output
    assert f"schema {pg_schema} at version 8 (applied now: 1, 2, 3, 4, 5, 6, 7, 8)" in first.output
    again = runner.invoke(
        app, ["migrate", "--store", "postgres"], env=_env(postgres_url, pg_schema)
    )
    assert again.exit_code == 0 and "(applied now: none)" in again.output
    with psycopg.connect(postgres_url) as conn:
        table = conn.execute("SELECT to_regclass(%s)", [f'"{pg_schema}".memories']).fetchone()
    assert table is not None and table[0] is not None
    bad = _env(postgres_url.replace("ditto@", "wrong-pw@"), pg_schema)
    failed = runner.invoke(app, ["migrate", "--store", "postgres"], env=bad)
    assert failed.exit_code == 1 and "wrong-pw" not in failed.output
    missing = runner.invoke(
        app, ["migrate", "--store", "postgres"], env={**bad, "DITTO_WORKER_MEMORY_POSTGRES_URL": ""}
    )
    assert missing.exit_code == 2


def test_demo_on_postgres(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the main job in-process (memory:// fleet) on the PostgreSQL store: keyword recall@10
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(
        app, ["demo", "--store", "postgres"], env=_env(postgres_url, pg_schema)
    )
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "recall@10" in line)
    match = re.search(r"\d+(?:\.\d+)?", line)
    assert match is not None and float(match.group()) >= 0.5, line
    assert "store postgres" in result.output
    with psycopg.connect(postgres_url) as conn:
        left = conn.execute(f'SELECT count(*) FROM "{pg_schema}".memories').fetchone()
    assert left == (0,)  # the demo deletes its run's records


def test_reindex_command_on_postgres(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ditto-worker reindex --store postgres` moves the schema to the provider --embedding
    # names (MEM-RET-4); the hashing providers stand in for the registry's models
    from ditto_plugin_postgres import PostgresMemoryStore
    from ditto_worker.contracts import MemoryWriteInput
    from ditto_worker.testing.reembedding import NEW, OLD, use_old_and_new

    use_old_and_new(monkeypatch)
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=OLD)
    drafts = [{"content": f"note {i}"} for i in range(5)]
    store.write(MemoryWriteInput.model_validate({"memories": drafts}))
    store.close()
    env = {**_env(postgres_url, pg_schema), "DITTO_WORKER_MEMORY_POSTGRES_EMBEDDING": "old"}
    runner = CliRunner()
    args = ["reindex", "--store", "postgres", "--embedding", "new", "--batch-size", "2"]
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "5 memories embedded" in result.output and "seed=7" in result.output
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute(
            f"SELECT value FROM \"{pg_schema}\".store_settings WHERE name = 'embedding'"
        ).fetchone()
    assert row is not None and row[0] == NEW.identity.to_json()
    again = runner.invoke(app, args, env=env)
    assert again.exit_code == 0 and "0 memories embedded" in again.output
