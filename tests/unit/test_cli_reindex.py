"""``ditto-worker reindex`` (MEM-RET-4): a SQLite store re-embedded under the provider
``--embedding`` names, a store without one refused, a store that cannot switch models
refused by name. The providers are the deterministic hashing ones (no model download),
put in place of the registry's embedding entry points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_plugin_sqlite import vectors as vec
from ditto_worker.cli.commands import app
from ditto_worker.contracts import MemoryWriteInput
from ditto_worker.runtime import registry
from ditto_worker.testing import HashingEmbedder

_PROVIDERS = {"old": lambda: HashingEmbedder(dims=64, seed=0),
              "new": lambda: HashingEmbedder(dims=32, seed=7)}  # fmt: skip


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    real = registry.build_embedder

    def build(kind: str | None, settings: Any = None, environ: Any = None) -> Any:
        maker = _PROVIDERS.get(str(kind))
        return maker() if maker is not None else real(kind, settings, environ)

    monkeypatch.setattr(registry, "build_embedder", build)
    path = tmp_path / "m.sqlite"
    with SqliteMemoryStore(path, embedder=_PROVIDERS["old"]()) as store:
        drafts = [{"content": f"note {i}"} for i in range(5)]
        store.write(MemoryWriteInput.model_validate({"memories": drafts}))
    return {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(path), "DITTO_BROKER_URL": "",
            "DITTO_WORKER_MEMORY_SQLITE_EMBEDDING": "old"}  # fmt: skip


def test_reindex_switches_a_sqlite_store_to_the_new_model(env: dict[str, str]) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["reindex", "--store", "sqlite", "--embedding", "new",
                                 "--batch-size", "2"], env=env)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "5 memories embedded" in result.output and "seed=7" in result.output
    with SqliteMemoryStore(
        env["DITTO_WORKER_MEMORY_SQLITE_PATH"], embedder=_PROVIDERS["new"]()
    ) as s:
        assert vec.stored_identity(s._conn()) == _PROVIDERS["new"]().identity
    again = runner.invoke(app, ["reindex", "--embedding", "new"], env=env)
    assert again.exit_code == 0 and "0 memories embedded" in again.output


def test_reindex_needs_a_provider_and_a_store_that_can(env: dict[str, str]) -> None:
    runner = CliRunner()
    none = runner.invoke(app, ["reindex", "--embedding", "none"], env=env)
    assert none.exit_code == 1 and "needs a provider" in none.output
    other = runner.invoke(app, ["reindex", "--store", "memory"], env=env)
    assert other.exit_code == 2
    assert "not supported yet for memory" in other.output
