"""Re-embedding a SQLite store under a new embedding identity (MEM-RET-4,
:mod:`ditto_plugin_sqlite.reembed`): every vector and the recorded identity change together,
keyword search and GET do not, a killed reindex finishes when run again, and the old
identity stays consistent until the switch."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, ann
from ditto_plugin_sqlite import vectors as vec
from ditto_worker.contracts import (
    MemoryGetInput,
    MemorySearchInput,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing import reembedding as checks

OLD, NEW, TEXTS = checks.OLD, checks.NEW, checks.TEXTS


def _filled(path: Path) -> list[str]:
    with SqliteMemoryStore(path, embedder=OLD) as store:
        drafts = [{"content": text, "key": f"k{i}"} for i, text in enumerate(TEXTS)]
        items = store.write(
            MemoryWriteInput.model_validate({"memories": [*drafts, {"content": 5}]})
        )
    return [item.id for item in items]


def _search(store: SqliteMemoryStore, query: str, strategy: str) -> list[tuple[str, float]]:
    hits = store.search(MemorySearchInput(query=query, strategy=strategy, limit=10))
    return [(hit.memory.id, round(hit.score, 6)) for hit in hits]


def _vectors(store: SqliteMemoryStore) -> dict[int, bytes]:
    with store._tx(None, write=False) as conn:
        return {
            int(s): bytes(b) for s, b in conn.execute("SELECT seq, embedding FROM memory_vectors")
        }


def _identity(path: Path) -> Any:
    # through a store: every connection of the process is the driver module's library
    with SqliteMemoryStore(path, embedder=NEW) as store:
        return vec.stored_identity(store._conn())


def test_reindex_rewrites_every_vector_and_the_identity(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    ids = _filled(path)
    with SqliteMemoryStore(path, embedder=OLD) as old:
        keyword, got = _search(old, "tea", "keyword"), old.get(MemoryGetInput(ids=ids))
        before = _vectors(old)
    with SqliteMemoryStore(path, embedder=NEW) as new:
        with pytest.raises(MemoryError) as err:  # not yet: the database is in the old one
            _search(new, "tea", "vector")
        assert err.value.code == ErrorCode.EMBEDDING_MISMATCH
        assert new.reembed_embeddings(batch_size=3) == 7  # the number has no text
        after = _vectors(new)
        assert set(after) == set(before) and len(after) == 7
        assert all(len(blob) == 32 * 4 for blob in after.values())
        expected = NEW.embed(TEXTS)[0]
        assert struct.unpack("<32f", after[min(after)]) == pytest.approx(expected, abs=1e-6)
        assert _search(new, "tea", "keyword") == keyword
        assert new.get(MemoryGetInput(ids=ids)) == got
        assert _search(new, TEXTS[3], "vector")[0][0] == ids[3]
        assert new.reembed_embeddings() == 0  # nothing left to do
    assert _identity(path) == NEW.identity
    with SqliteMemoryStore(path, embedder=OLD) as old, pytest.raises(MemoryError) as err:
        _search(old, "tea", "vector")
    assert err.value.code == ErrorCode.EMBEDDING_MISMATCH


def test_a_killed_reindex_keeps_the_old_identity_and_finishes_when_run_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.sqlite"
    ids = _filled(path)
    old = SqliteMemoryStore(path, embedder=OLD)
    served = _search(old, TEXTS[1], "vector")
    dying = checks.Dying(batches=1)
    with SqliteMemoryStore(path, embedder=dying) as new, pytest.raises(MemoryError):
        new.reembed_embeddings(batch_size=2)
    assert _identity(path) == OLD.identity
    assert _search(old, TEXTS[1], "vector") == served  # the old identity, consistently
    # the old process changes a staged record meanwhile: it is embedded again
    old.update(
        MemoryUpdateInput.model_validate({"memories": [{"id": ids[0], "content": "rooibos"}]})
    )
    resumed = HashingEmbedder(dims=32, seed=7)
    with SqliteMemoryStore(path, embedder=resumed) as new:
        assert new.reembed_embeddings(batch_size=2) == 6  # 1 staged before the kill
        assert "note 1 about tea" not in resumed.texts and "rooibos" in resumed.texts
        assert _search(new, "rooibos", "vector")[0][0] == ids[0]
    with pytest.raises(MemoryError) as err:  # the old process now refuses to mix
        old.write(MemoryWriteInput.model_validate({"memories": [{"content": "late"}]}))
    assert err.value.code == ErrorCode.EMBEDDING_MISMATCH
    old.close()
    assert _identity(path) == NEW.identity


def test_a_store_without_a_provider_cannot_reindex(tmp_path: Path) -> None:
    with SqliteMemoryStore(tmp_path / "m.sqlite") as plain, pytest.raises(MemoryError) as err:
        plain.reembed_embeddings()
    assert err.value.code == ErrorCode.INVALID_INPUT


# --- the checks every store's reindex passes (ditto_worker.testing.reembedding) ----------


@pytest.mark.parametrize(
    "check",
    [
        checks.check_reindex_switches_every_vector_and_the_identity,
        checks.check_a_killed_reindex_keeps_the_old_identity_and_finishes,
        checks.check_writes_during_a_reindex_are_not_lost,
        checks.check_calls_during_a_reindex_fail_only_with_the_identity,
    ],
)
def test_shared_reindex_checks(tmp_path: Path, check: Any) -> None:
    check(lambda embedder: SqliteMemoryStore(tmp_path / "m.sqlite", embedder=embedder))


def test_the_switch_renames_the_staged_tables_with_their_codes_and_triggers(
    tmp_path: Path,
) -> None:
    # the switch copies no vector: the staged vectors and SimHash codes become the live
    # tables, the code and change-log triggers follow, the log is cut (every process
    # reloads its index), and a write after it codes and logs its vector as before
    path = tmp_path / "m.sqlite"
    _filled(path)
    with SqliteMemoryStore(path, embedder=NEW) as new:
        assert new.reembed_embeddings(batch_size=3) == 7
        new.write(MemoryWriteInput.model_validate({"memories": [{"content": "after"}]}))
        with new._tx(None, write=False) as conn:
            vectors = dict(conn.execute("SELECT seq, embedding FROM memory_vectors"))
            codes = dict(conn.execute("SELECT seq, code FROM memory_vector_codes"))
            log = conn.execute("SELECT count(*) FROM memory_vector_log").fetchone()
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert len(vectors) == 8 and set(codes) == set(vectors)
    seqs = sorted(vectors)
    expected = ann.code_bytes([bytes(vectors[s]) for s in seqs])
    assert [bytes(codes[s]) for s in seqs] == [c.tobytes() for c in expected]
    assert log == (2,)  # the cut's last entry and the write after it
    assert {"memory_vectors_code_insert", "memory_vectors_log_insert"} <= names
    assert not {n for n in names if n.endswith("_next") or "_next_" in n}
