"""Server faults, against a ``milvus-lite server`` process (Milvus Lite 3, Python
reimplementation) reached through an ``http://`` URI as a Milvus server is.

The server is killed (SIGKILL) between calls and in the middle of a batch, and stalled
(SIGSTOP): each fault gives its documented code within the call's time, the message names
neither the URI nor the token, and the *same* store object serves again once the server
is back on the same folder (issue 27 item 3). A batch cut by the crash leaves what the
store declares (``partial_commit``): the requests applied before it, nothing else.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker import create_memory
from ditto_worker.memory.core import Memory
from ditto_worker.testing import HashingEmbedder

sys.path.insert(0, str(Path(__file__).parent))
from lite_server import LiteServer  # noqa: E402

pytestmark = pytest.mark.slow
TOKEN = "root:secret-token-4711"
TIMEOUT_S = 2.0  # the stores' timeoutS
# what a loaded machine (load average 10 on 2 cores) may add to a bounded call: the
# bounds below show a call is cut by its deadline or timeoutS, not that the machine is quick
MARGIN_S = 8.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiteServer]:
    lite = LiteServer(tmp_path / "milvus-data")
    lite.start()
    yield lite
    if lite.process is not None and lite.process.poll() is None:
        os.kill(lite.process.pid, signal.SIGCONT)
    lite.stop()


def _store(server: LiteServer, timeout_s: float = TIMEOUT_S) -> MilvusMemoryStore:
    return MilvusMemoryStore(uri=server.uri, token=TOKEN, collection="faults",
                             timeout_s=timeout_s, embedder=HashingEmbedder(),
                             max_message_bytes=4096)  # fmt: skip


@pytest.fixture
def store(server: LiteServer) -> Iterator[MilvusMemoryStore]:
    s = _store(server)
    yield s
    s.close()


def _safe(message: str, server: LiteServer) -> None:
    for secret in (TOKEN, "secret", "127.0.0.1", str(server.port), "http", "faults"):
        assert secret not in message, (secret, message)


def _serves(memory: Memory) -> str:
    written = memory.write({"memories": [{"content": "likes green tea"}]})
    assert written.status == "success", written.error
    page = memory.query({"limit": 1000})
    assert page.status == "success" and written.output[0] in page.output.items
    # a first search imports pymilvus's search-result modules (~0.8 s here, once per
    # process): done now, so the deadlines below measure the calls, not an import
    assert memory.search({"query": "tea", "strategy": "keyword"}).status == "success"
    return str(written.output[0].id)


CALLS: list[tuple[str, Any]] = [
    ("MEMORY.QUERY", {"limit": 5}),
    ("MEMORY.GET", {"keys": ["k"]}),
    ("MEMORY.WRITE", {"memories": [{"content": "x"}]}),
    ("MEMORY.SEARCH", {"query": "tea", "strategy": "keyword"}),
    ("MEMORY.DELETE", {"ids": ["00000000-0000-0000-0000-000000000000"]}),
]


def test_a_killed_server_is_a_backend_error_then_the_store_serves_again(
    server: LiteServer, store: MilvusMemoryStore
) -> None:
    memory = create_memory(store)
    first = _serves(memory)
    server.kill()
    for node, input in CALLS:
        started = time.monotonic()
        result = memory.execute(node, input)
        elapsed = time.monotonic() - started
        assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR", node
        assert result.error.message == "the Milvus server cannot be reached", result.error
        assert elapsed < TIMEOUT_S + MARGIN_S, (node, elapsed)  # within timeoutS
        _safe(result.error.message, server)
    with_deadline = memory.execute("MEMORY.QUERY", {}, deadline=time.time() + 0.5)
    assert with_deadline.error is not None and with_deadline.error.code == "MEMORY_BACKEND_ERROR"
    server.start()
    second = _serves(memory)
    ids = [i.id for i in memory.query({"limit": 100}).output.items]
    assert ids == [first, second]  # the record written before the crash survived it


def test_a_batch_cut_by_a_crash_leaves_the_requests_applied_before_it(
    server: LiteServer, store: MilvusMemoryStore
) -> None:
    memory = create_memory(store)
    memory.write({"memories": [{"content": "warm up"}]})
    real = MilvusClient.upsert
    sent: list[int] = []

    def crash_after_three(client: MilvusClient, name: str, rows: Any, **kwargs: Any) -> Any:
        if name.endswith(("_ops", "_exec")):  # a ledger's entry, not a batch's request
            return real(client, name, rows, **kwargs)
        if len(sent) == 3:
            server.kill()  # the server dies between the 3rd and the 4th request
        result = real(client, name, rows, **kwargs)
        sent.append(len(rows))
        return result

    drafts = [{"key": f"k{i:03d}", "content": f"record {i} " + "words " * 40} for i in range(60)]
    MilvusClient.upsert = crash_after_three  # type: ignore[method-assign]
    try:
        result = memory.write({"memories": drafts})
    finally:
        MilvusClient.upsert = real  # type: ignore[method-assign]
    assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
    _safe(result.error.message, server)
    assert len(sent) == 3 and sum(sent) < len(drafts)
    server.start()
    keys = [i.key for i in memory.query({"limit": 1000}).output.items[1:]]
    assert keys == [d["key"] for d in drafts[: sum(sent)]]  # a prefix: what was applied


def test_a_stalled_server_times_out_within_the_deadline(
    server: LiteServer, store: MilvusMemoryStore
) -> None:
    # the deadline calls go through a store whose timeoutS is far beyond deadline + margin,
    # so a call that ends within that bound was cut by its deadline, not by timeoutS
    patient = _store(server, timeout_s=60.0)
    memory, plain_memory = create_memory(patient), create_memory(store)
    _serves(memory)
    _serves(plain_memory)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        for node, input in CALLS:
            started = time.monotonic()
            result = memory.execute(node, input, deadline=time.time() + 1.0)
            elapsed = time.monotonic() - started
            assert result.error is not None and result.error.code == "MEMORY_TIMEOUT", node
            assert elapsed < 1.0 + MARGIN_S, (node, elapsed)
            _safe(result.error.message, server)
        started = time.monotonic()
        plain = plain_memory.execute("MEMORY.QUERY", {})  # no deadline: timeoutS bounds it
        assert plain.error is not None and plain.error.code == "MEMORY_BACKEND_ERROR"
        assert plain.error.message == "the Milvus server did not answer in time"
        assert time.monotonic() - started < TIMEOUT_S + MARGIN_S
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    _serves(memory)
    patient.close()
