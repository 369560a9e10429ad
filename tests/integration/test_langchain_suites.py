"""LangChain's standard suites (``langchain-tests`` 1.1.9: ``VectorStoreIntegrationTests``,
``BaseStoreSyncTests``, ``BaseStoreAsyncTests``) pass against our ``VectorStore`` and
``BaseStore`` (issue 33 item 2). They need ``asyncio_mode=auto``, so
``tests/peer_suites/langchain_suites.py`` runs as its own pytest process; every one of its
tests must pass (no skip, no expected failure)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_tests")

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "peer_suites" / "langchain_suites.py"
EXPECTED = {"TestDittoVectorStore": 25, "TestDittoByteStoreSync": 12, "TestDittoByteStoreAsync": 12}


def test_langchain_standard_suites_pass(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "addopts=", "-rA", "-q", "--basetemp", str(tmp_path / "t"), str(SUITES)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-5000:] + done.stderr[-2000:]
    passed = re.findall(r"^PASSED \S+::(\w+)::", out, re.M)
    counts = {cls: passed.count(cls) for cls in EXPECTED}
    assert counts == EXPECTED, out[-3000:]
    assert re.search(rf"^{sum(EXPECTED.values())} passed in ", out.splitlines()[-1]), out[-500:]


@pytest.mark.integration
def test_the_adapters_on_a_fleet(start_fleet_worker: Any, redis_url: str, tmp_path: Path) -> None:
    """The same classes over a fleet (a real Celery worker on real Redis): documents,
    search with a filter, replace by id, key-value pairs, and another scope sees none."""
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.integrations.langchain import DittoByteStore, DittoVectorStore
    from ditto_worker.memory.worker import create_memory_worker
    from ditto_worker.runtime import create_ditto
    from ditto_worker.testing.embedder import HashingEmbedder
    from tests.conftest import fleet_config

    store = SqliteMemoryStore(tmp_path / "fleet.sqlite", embedder=HashingEmbedder())
    alice, bob = {"tenant": "acme", "user": "alice"}, {"tenant": "acme", "user": "bob"}
    with start_fleet_worker(lambda: create_memory_worker(store)):
        runtime = create_ditto(None, fleet_config(redis_url))
        try:
            mine, theirs = DittoVectorStore(runtime, alice), DittoVectorStore(runtime, bob)
            texts, metas = (
                ["green tea every morning", "lives in Lyon"],
                [{"t": "food"}, {"t": "home"}],
            )
            ids = mine.add_texts(texts, metadatas=metas, ids=["tea", "city"])
            assert ids == ["tea", "city"]
            hits = mine.similarity_search("green tea", k=2, filter={"t": "food"})
            assert [d.id for d in hits] == ["tea"]
            mine.add_texts(["oolong tea"], ids=["tea"])
            assert [d.page_content for d in mine.get_by_ids(["tea"])] == ["oolong tea"]
            assert theirs.get_by_ids(["tea", "city"]) == []
            assert theirs.similarity_search("tea", k=5) == []
            kv, other_kv = DittoByteStore(runtime, alice), DittoByteStore(runtime, bob)
            kv.mset([("a", b"\x00\x01"), ("b", b"2")])
            assert kv.mget(["a", "b"]) == [b"\x00\x01", b"2"]
            assert other_kv.mget(["a", "b"]) == [None, None]
            assert sorted(kv.yield_keys()) == ["a", "b"] and list(other_kv.yield_keys()) == []
        finally:
            runtime.close()
