"""Re-embedding a Qdrant collection under a new embedding identity (MEM-RET-4,
:mod:`ditto_plugin_qdrant.reembed`) in local mode (one open store at a time, as local
mode is one process per folder): the new identity's collection replaces the old one
behind the collection name; records, keyword search, keys, metadata, operation ids and
cursors do not change; a killed reindex leaves the old collection serving and finishes
when run again; a second reindex swaps the alias. Shared checks:
:mod:`ditto_worker.testing.reembedding`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from ditto_plugin_qdrant import QdrantMemoryStore
from ditto_plugin_qdrant.points import dense_name
from ditto_plugin_qdrant.reembed import QdrantReembed
from ditto_worker.contracts import (
    MemoryGetInput,
    MemoryQueryInput,
    MemorySearchInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingProvider
from ditto_worker.testing import reembedding as checks

sys.path.insert(0, str(Path(__file__).parent))
from rest_double import RestDouble  # noqa: E402

Make = Callable[[EmbeddingProvider], QdrantMemoryStore]


def _make(tmp_path: Path) -> Make:
    return lambda embedder: QdrantMemoryStore(path=str(tmp_path / "q"), embedder=embedder)


def test_reindex_switches_every_vector_and_the_identity(tmp_path: Path) -> None:
    checks.check_reindex_switches_every_vector_and_the_identity(_make(tmp_path), one=True)


def test_a_killed_reindex_keeps_the_old_identity_and_resumes(tmp_path: Path) -> None:
    checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes(_make(tmp_path), one=True)


def test_cursors_survive_and_a_second_reindex_swaps_the_alias(tmp_path: Path) -> None:
    make = _make(tmp_path)
    third = checks.check_cursors_survive_two_reindexes(make)
    client = QdrantClient(path=str(tmp_path / "q"))
    try:
        names = {c.name for c in client.get_collections().collections}
        aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    finally:
        client.close()
    target = "ditto_memories-" + dense_name(third.identity).removeprefix("dense-")
    assert names == {target} and aliases == {"ditto_memories": target}
    with make(checks.NEW) as stale, pytest.raises(MemoryError) as err:  # gone as well
        stale.search(MemorySearchInput(query="note", strategy="vector"))
    assert err.value.code == ErrorCode.EMBEDDING_MISMATCH


# --- server mode, processes side by side (the loopback REST double) ------------------------


@pytest.fixture
def served() -> Iterator[Make]:
    endpoint = RestDouble()
    url = endpoint.start()
    yield lambda embedder: QdrantMemoryStore(url=url, embedder=embedder, timeout_s=5.0)
    endpoint.close()


@pytest.mark.parametrize(
    "check",
    [
        checks.check_reindex_switches_every_vector_and_the_identity,
        checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes,
        checks.check_writes_during_a_reindex_are_not_lost,
    ],
)
def test_shared_checks_on_a_server(served: Make, check: Any) -> None:
    check(served)


def test_a_switch_cut_between_its_two_requests_is_finished_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a collection made before its first reindex: deleted, then the alias created; a run
    # killed in between leaves no collection name, and the rerun creates the alias
    make = _make(tmp_path)
    with make(checks.OLD) as old:
        drafts = [{"content": f"note {i}", "key": f"k{i}"} for i in range(3)]
        ids = [i.id for i in old.write(MemoryWriteInput.model_validate({"memories": drafts}))]

    def killed(self: QdrantReembed, target: str, delete: bool) -> None:
        raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "killed")

    with make(checks.NEW) as new, monkeypatch.context() as patch:
        patch.setattr(QdrantReembed, "_alias", killed)
        with pytest.raises(MemoryError):
            new.reembed_embeddings()
    with make(checks.NEW) as new:
        assert new.reembed_embeddings() == 0  # only the alias was missing
        got = new.get(MemoryGetInput(ids=ids))
        assert [i.key for i in got] == ["k0", "k1", "k2"]
        checks.assert_vectors(new, {i: f"note {n}" for n, i in enumerate(ids)})


def test_the_reindex_command_on_qdrant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `ditto-worker reindex --store qdrant`; the hashing providers stand in for models
    from typer.testing import CliRunner

    from ditto_worker.cli.commands import app

    checks.use_old_and_new(monkeypatch)
    with _make(tmp_path)(checks.OLD) as old:
        drafts = [{"content": f"note {i}"} for i in range(4)]
        old.write(MemoryWriteInput.model_validate({"memories": drafts}))
    env = {"DITTO_WORKER_MEMORY_QDRANT_PATH": str(tmp_path / "q"), "DITTO_BROKER_URL": "",
           "DITTO_WORKER_MEMORY_QDRANT_EMBEDDING": "old"}  # fmt: skip
    args = ["reindex", "--store", "qdrant", "--embedding", "new", "--batch-size", "3"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "4 memories embedded" in result.output and "seed=7" in result.output
    with _make(tmp_path)(checks.NEW) as new:
        checks.assert_vectors(
            new, {i.id: str(i.content) for i in new.query(MemoryQueryInput()).items}
        )
