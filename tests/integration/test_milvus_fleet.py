"""The Milvus store on the fleet: a real ``ditto-worker worker --store milvus`` process on
real Redis serves the six MEMORY nodes (issue 27 item 3).

The store is reached through an ``http://`` URI of a ``milvus-lite server`` process
(Milvus Lite 3, Python reimplementation), as a Milvus server would be, so the worker runs
its default prefork pool with two child processes (a Milvus Lite ``.db`` folder serves one
process only). The tenant scope sent by the client confines every node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import Scope
from ditto_worker.fleet import DittoClient
from tests.conftest import EVENT_WAIT_S, REPO, stop_worker

sys.path.insert(0, str(REPO / "plugins" / "milvus" / "tests"))
from lite_server import LiteServer  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def milvus_worker(redis_url: str, tmp_path: Path) -> Iterator[Path]:
    server = LiteServer(tmp_path / "milvus-data")
    server.start()
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DITTO_BROKER_URL": redis_url,
        "DITTO_RESULT_BACKEND": redis_url,
        "DITTO_WORKER_MEMORY_MILVUS_URI": server.uri,
        "DITTO_WORKER_MEMORY_MILVUS_COLLECTION": "fleet",
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "worker", "--store", "milvus",
             "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while "ready." not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        assert "ready." in log.read_text(), log.read_text()
        yield tmp_path
    finally:
        stop_worker(proc)
        server.stop()
    assert "Traceback" not in log.read_text(), log.read_text()


def test_six_nodes_round_trip_through_redis(milvus_worker: Path, client: DittoClient) -> None:
    alice, bob = Scope("acme", "alice"), Scope("acme", "bob")

    def ok(node: str, input: object, **kwargs: object) -> Any:
        result = client.invoke(node, input, timeout=60, scope=kwargs.pop("scope", alice),
                               **kwargs)  # type: ignore[arg-type]  # fmt: skip
        assert result.status == "success", (node, result.error)
        return result.output

    drafts = [
        {"key": "lang", "content": "Answer in German", "metadata": {"kind": "preference"}},
        {"key": "task:1", "content": {"stage": 2, "note": "translation done"},
         "metadata": {"kind": "task", "n": 2}},
    ]  # fmt: skip
    ids = [i.id for i in ok("MEMORY.WRITE", {"memories": drafts})]
    conflict = client.invoke("MEMORY.WRITE", {"memories": drafts[:1]}, timeout=60, scope=alice)
    assert conflict.error is not None and conflict.error.code == "CONFLICT"

    got = ok("MEMORY.GET", {"keys": ["task:1"], "ids": [ids[0]]})
    assert [i.key for i in got] == ["lang", "task:1"]
    flt = {"kind": {"$in": ["task", "preference"]}}
    page = ok("MEMORY.QUERY", {"limit": 1, "filter": flt})
    assert len(page.items) == 1 and page.next_cursor
    rest = ok("MEMORY.QUERY", {"limit": 1, "cursor": page.next_cursor, "filter": flt})
    assert [page.items[0].id, rest.items[0].id] == ids
    hits = ok("MEMORY.SEARCH", {"query": "German", "strategy": "keyword"})
    assert [h.memory.key for h in hits] == ["lang"]
    updated = ok("MEMORY.UPDATE", {"memories": [{"id": ids[0], "content": "Answer in French"}]})
    assert updated[0].content == "Answer in French"
    assert ok("MEMORY.SEARCH", {"query": "German", "strategy": "keyword"}) == []

    assert ok("MEMORY.QUERY", {}, scope=bob).items == []  # another tenant sees nothing
    assert ok("MEMORY.DELETE", {"ids": ids}, scope=bob).deleted == []
    assert ok("MEMORY.DELETE", {"ids": ids}).deleted == ids
    assert ok("MEMORY.QUERY", {}).items == []
