"""Re-embedding a Milvus collection under a new embedding identity (MEM-RET-4,
:mod:`ditto_plugin_milvus.reembed`) on Milvus Lite: the new identity's collection replaces
the old one behind the collection name; records, keyword search, keys, metadata, operation
ids and cursors do not change; a killed reindex leaves the old collection serving and
finishes when run again; a second reindex moves the alias; collections per scope are each
reindexed. In process (one open store at a time, as Milvus Lite serves one process per
file) and side by side through a ``milvus-lite server`` process. Shared checks:
:mod:`ditto_worker.testing.reembedding`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingProvider, MemoryCallOptions
from ditto_worker.scope import Scope
from ditto_worker.testing import reembedding as checks

sys.path.insert(0, str(Path(__file__).parent))
from lite_server import LiteServer  # noqa: E402

Make = Callable[[EmbeddingProvider], MilvusMemoryStore]


def _make(tmp_path: Path, **settings: Any) -> Make:
    uri = str(tmp_path / "milvus.db")
    return lambda embedder: MilvusMemoryStore(uri=uri, embedder=embedder, **settings)


def test_reindex_switches_every_vector_and_the_identity(tmp_path: Path) -> None:
    checks.check_reindex_switches_every_vector_and_the_identity(_make(tmp_path), one=True)


def test_a_killed_reindex_keeps_the_old_identity_and_resumes(tmp_path: Path) -> None:
    checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes(_make(tmp_path), one=True)


def test_cursors_survive_and_a_second_reindex_moves_the_alias(tmp_path: Path) -> None:
    make = _make(tmp_path)
    checks.check_cursors_survive_two_reindexes(make)
    client = MilvusClient(str(tmp_path / "milvus.db"))
    try:
        names = set(client.list_collections())
        target = client.describe_collection("ditto_memories")["collection_name"]
    finally:
        client.close()
    assert names - {"ditto_memories_ops"} == {target} and target.startswith("ditto_memories_r")
    with make(checks.NEW) as stale, pytest.raises(MemoryError) as err:
        stale.search(MemorySearchInput(query="note", strategy="vector"))
    assert err.value.code == ErrorCode.EMBEDDING_MISMATCH


def test_every_scope_collection_is_reindexed(tmp_path: Path) -> None:
    make = _make(tmp_path, collection_per_scope=True)
    scopes = [MemoryCallOptions(scope=Scope(tenant="t", user=u)) for u in ("ann", "bob")]
    with make(checks.OLD) as old:
        for n, options in enumerate(scopes):
            drafts = [{"content": f"note {n} {i}"} for i in range(3)]
            old.write(MemoryWriteInput.model_validate({"memories": drafts}), options)
    with make(checks.NEW) as new:
        assert new.reembed_embeddings(batch_size=2) == 6
        for n, options in enumerate(scopes):
            hits = new.search(
                MemorySearchInput(query=checks.NEW.embed([f"note {n} 1"])[0], strategy="vector",
                                  limit=1), options)  # fmt: skip
            assert hits[0].memory.content == f"note {n} 1"
            assert abs(float(hits[0].score or 0) - 1.0) < 1e-4


def test_a_switch_cut_between_its_two_requests_is_finished_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = _make(tmp_path)
    with make(checks.OLD) as old:
        drafts = [{"content": f"note {i}", "key": f"k{i}"} for i in range(3)]
        ids = [i.id for i in old.write(MemoryWriteInput.model_validate({"memories": drafts}))]
    real = MilvusClient.create_alias

    def killed(self: MilvusClient, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed")

    with make(checks.NEW) as new, monkeypatch.context() as patch:
        patch.setattr(MilvusClient, "create_alias", killed)
        with pytest.raises(MemoryError):
            new.reembed_embeddings()
    assert MilvusClient.create_alias is real
    with make(checks.NEW) as new:
        assert new.reembed_embeddings() == 0  # only the alias was missing
        checks.assert_vectors(new, {i: f"note {n}" for n, i in enumerate(ids)})


# --- side by side: a milvus-lite server process -------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    lite = LiteServer(tmp_path_factory.mktemp("milvus") / "data")
    lite.start()
    yield lite
    lite.stop()


@pytest.mark.parametrize(
    "check",
    [
        checks.check_reindex_switches_every_vector_and_the_identity,
        checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes,
        checks.check_writes_during_a_reindex_are_not_lost,
    ],
)
def test_shared_checks_on_a_server(server: LiteServer, check: Any) -> None:
    name = f"c{abs(hash(check.__name__)) % 10**8}"
    check(lambda embedder: MilvusMemoryStore(uri=server.uri, collection=name, embedder=embedder))


def test_the_reindex_command_on_milvus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `ditto-worker reindex --store milvus`; the hashing providers stand in for models
    from typer.testing import CliRunner

    from ditto_worker.cli.commands import app

    checks.use_old_and_new(monkeypatch)
    with _make(tmp_path)(checks.OLD) as old:
        drafts = [{"content": f"note {i}"} for i in range(4)]
        ids = [i.id for i in old.write(MemoryWriteInput.model_validate({"memories": drafts}))]
    env = {"DITTO_WORKER_MEMORY_MILVUS_URI": str(tmp_path / "milvus.db"), "DITTO_BROKER_URL": "",
           "DITTO_WORKER_MEMORY_MILVUS_EMBEDDING": "old"}  # fmt: skip
    args = ["reindex", "--store", "milvus", "--embedding", "new", "--batch-size", "3"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "4 memories embedded" in result.output and "seed=7" in result.output
    with _make(tmp_path)(checks.NEW) as new:
        checks.assert_vectors(new, {i: f"note {n}" for n, i in enumerate(ids)})
