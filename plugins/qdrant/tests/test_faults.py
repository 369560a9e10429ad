"""Server-mode faults and the server-only lines, against a loopback REST double
(:mod:`rest_double`; no Qdrant server runs on these machines).

Each fault — HTTP 503, a connection cut without an answer, a request never answered —
gives its documented code within the call's deadline, the message names neither the URL
nor the API key, and the *same* store object serves again once the endpoint is back
(issue 18 item 4). The requests show the lines local mode never runs: ``wait=true`` on
every mutation, the ``api-key`` header, payload-index creation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_qdrant import QdrantMemoryStore
from ditto_plugin_qdrant.payload import field_hash
from ditto_worker import create_memory
from ditto_worker.memory.core import Memory
from ditto_worker.testing import HashingEmbedder

sys.path.insert(0, str(Path(__file__).parent))
from rest_double import RestDouble  # noqa: E402

KEY = "secret-api-key-4711"
# The store's per-request timeout. The double answers from a local-mode client in a thread:
# on a busy machine an ordinary answer took longer than 1.5 s, the client gave up and the
# next call failed. Long enough for that, short enough that a stall still ends in the test.
TIMEOUT_S = 8.0
DEADLINE_S = 1.0  # the per-call deadline of the fault calls: well under TIMEOUT_S
SLACK_S = 2.0  # scheduling on a busy machine; a deadline not honoured shows as ~TIMEOUT_S


@pytest.fixture
def double() -> Iterator[RestDouble]:
    endpoint = RestDouble()
    endpoint.url = endpoint.start()  # type: ignore[attr-defined]
    yield endpoint
    endpoint.close()


@pytest.fixture
def store(double: RestDouble) -> Iterator[QdrantMemoryStore]:
    url = double.url  # type: ignore[attr-defined]
    s = QdrantMemoryStore(url=url, api_key=KEY, collection="faults", embedder=HashingEmbedder(),
                          timeout_s=TIMEOUT_S, embed_kinds=["preference"])  # fmt: skip
    yield s
    s.close()


def _safe(message: str, double: RestDouble) -> None:
    port = str(double.server.server_address[1])
    for secret in (KEY, "127.0.0.1", port, "http", "faults"):
        assert secret not in message, (secret, message)


def _serves(memory: Memory) -> None:
    written = memory.write({"memories": [{"content": "likes green tea"}]})
    assert written.status == "success", written.error
    page = memory.query({"limit": 100})
    assert page.status == "success" and written.output[0] in page.output.items


@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("503", "MEMORY_BACKEND_ERROR", "unavailable (HTTP 503)"),
        ("cut", "MEMORY_BACKEND_ERROR", "connection to the Qdrant server was lost"),
        ("stall", "MEMORY_TIMEOUT", "deadline"),
    ],
)
def test_a_fault_gives_its_code_within_the_deadline_then_the_store_serves_again(
    double: RestDouble, store: QdrantMemoryStore, mode: str, code: str, words: str
) -> None:
    memory = create_memory(store)
    _serves(memory)
    double.mode = mode
    for node, input in (
        ("MEMORY.QUERY", {"limit": 5}),
        ("MEMORY.WRITE", {"memories": [{"content": "x"}]}),
        ("MEMORY.SEARCH", {"query": "tea", "strategy": "keyword"}),
    ):
        started = time.monotonic()
        result = memory.execute(node, input, deadline=time.time() + DEADLINE_S)
        elapsed = time.monotonic() - started
        assert result.error is not None and result.error.code == code, (node, result)
        assert words in result.error.message or code == "MEMORY_TIMEOUT", result.error.message
        assert elapsed < DEADLINE_S + SLACK_S, (node, elapsed)  # the deadline, not TIMEOUT_S
        _safe(result.error.message, double)
    double.mode = "ok"
    _serves(memory)


def test_a_stall_without_a_deadline_ends_at_timeout_s(
    double: RestDouble, store: QdrantMemoryStore
) -> None:
    memory = create_memory(store)
    _serves(memory)
    double.mode = "stall"
    started = time.monotonic()
    result = memory.query({"limit": 5})
    assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
    assert "did not answer in time" in result.error.message
    elapsed = time.monotonic() - started
    assert TIMEOUT_S <= elapsed + 0.1 < TIMEOUT_S + SLACK_S, elapsed  # ended by timeoutS
    _safe(result.error.message, double)
    double.mode = "ok"
    _serves(memory)


def test_an_unreachable_server_is_a_safe_backend_error() -> None:
    s = QdrantMemoryStore(url="http://127.0.0.1:9", api_key=KEY, timeout_s=1)
    result = create_memory(s).query({}, deadline=time.time() + 2)
    assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
    assert "cannot be reached" in result.error.message and KEY not in result.error.message
    s.close()


def test_server_lines_wait_true_api_key_and_payload_indexes(
    double: RestDouble, store: QdrantMemoryStore
) -> None:
    memory = create_memory(store)
    items = memory.write({"memories": [{"key": "a", "content": "tea", "metadata": {"kind": "x"}}]})
    memory.update({"memories": [{"id": items.output[0].id, "content": "coffee"}]})
    memory.delete({"ids": [items.output[0].id]}, execution_id="del-1")
    mutations = [s for s in double.seen if s.method == "PUT" and s.path.endswith(("/points",
                 "/index")) or s.path.endswith("/points/delete")]  # fmt: skip
    assert len(mutations) >= 8
    assert all(s.query.get("wait") == ["true"] for s in mutations), mutations
    assert {s.api_key for s in double.seen} == {KEY}
    h = field_hash(("kind",))  # payloadIndexes: [kind] (the default)
    expected = {"ns", "rec", "id", "key", "seq", "updatedUs", "at", f"fs.{h}", f"fn.{h}"}
    assert set(double.indexes) == expected
    assert double.indexes["ns"] == {"type": "keyword", "is_tenant": True}
    assert double.indexes["seq"]["range"] is True  # order_by needs a range index


def test_a_write_cut_part_way_completes_on_retry_without_duplicates(
    double: RestDouble, store: QdrantMemoryStore
) -> None:
    # partial_commit: 256 points per request; the second request fails; the retry with
    # the same execution id rewrites the same point ids and records the execution
    memory = create_memory(store)
    memory.query({})  # the collection exists
    drafts = [{"key": f"k{i}", "content": f"note {i}"} for i in range(600)]
    double.fail_upserts_after = double._upserts + 1
    failed = memory.write({"memories": drafts}, execution_id="batch-1")
    assert failed.error is not None and failed.error.code == "MEMORY_BACKEND_ERROR"
    assert len(memory.query({"limit": 1000}).output.items) == 256  # what was sent stays
    double.fail_upserts_after = None
    retried = memory.write({"memories": drafts}, execution_id="batch-1")
    assert retried.status == "success", retried.error
    items = memory.query({"limit": 1000}).output.items
    assert [i.key for i in items] == [d["key"] for d in drafts]  # each once, in order
    again = memory.write({"memories": drafts}, execution_id="batch-1")
    assert [i.id for i in again.output] == [i.id for i in retried.output]
    assert len(memory.query({"limit": 1000}).output.items) == 600
