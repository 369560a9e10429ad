"""Milvus-specific behaviour, on Milvus Lite 3 (Python reimplementation): expressions never
carry unquoted request text (hostile strings filter exactly), the 65,536-byte JSON limit,
batches chunked under ``maxMessageBytes``, the two-step key check, the embedding identity a
collection fixes, the embed policy, configuration, one process per Milvus Lite folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from ditto_plugin_milvus import MilvusMemoryStore, create_store
from ditto_plugin_milvus.expressions import quote, to_expression
from ditto_worker import create_memory
from ditto_worker.errors import ConfigError
from ditto_worker.memory.filters import parse_filter
from ditto_worker.testing import HashingEmbedder

HOSTILE = [
    "x'; DROP TABLE memories; --",
    'a" or true or "',
    "back\\slash\\",
    'quote\\" or id != "',
    "new\nline\r\ttab",
    "\x00nul\x01\x7f",
    "] or [ ) or (",
    'exists sh["ft"]',
    "中文 emoji \U0001f600",
]


def _store(tmp_path: Path, **kwargs: Any) -> MilvusMemoryStore:
    kwargs.setdefault("embedder", HashingEmbedder())
    kwargs.setdefault("timeout_s", 120)  # a gRPC call's wait: generous, the machine may be busy
    return MilvusMemoryStore(uri=str(tmp_path / "milvus.db"), **kwargs)


def test_hostile_strings_are_literals(milvus_store: MilvusMemoryStore) -> None:
    memory = create_memory(milvus_store)
    drafts = [{"key": text, "content": text, "metadata": {"v": text, text: 1}} for text in HOSTILE]
    written = memory.write({"memories": drafts}).output
    assert len(written) == len(HOSTILE)
    for text, item in zip(HOSTILE, written, strict=True):
        for flt in ({"v": text}, {"key": text}, {"key": {"$in": [text]}}, {text: 1},
                    {"v": {"$gte": text, "$lte": text}}):  # fmt: skip
            page = memory.query({"filter": flt})
            assert page.status == "success", (flt, page.error)
            assert [i.id for i in page.output.items] == [item.id], (text, flt)
        others = memory.query({"filter": {"v": {"$ne": text}}}).output.items
        assert item.id not in [i.id for i in others] and len(others) == len(HOSTILE) - 1
        assert [i.id for i in memory.get({"keys": [text]}).output] == [item.id]
    assert len(memory.query({"limit": 100}).output.items) == len(HOSTILE)  # nothing dropped


def test_expressions_quote_every_value() -> None:
    for text in HOSTILE:
        assert quote(text).startswith('"') and quote(text).endswith('"')
        body = quote(text)[1:-1]
        unescaped = body.replace("\\\\", "").replace('\\"', "")
        assert '"' not in unescaped and "\n" not in body and "\r" not in body
    expression = to_expression(parse_filter({"a'b": {"$gt": 'x"; y'}, "key": 'k" or "'}))
    assert "a'b" not in expression and 'k\\" or \\"' in expression


def test_json_over_the_milvus_limit_is_invalid_input(milvus_store: MilvusMemoryStore) -> None:
    memory = create_memory(milvus_store)
    big = "x" * 70_000
    for draft, field in (
        ({"content": big}, "memories[1].content"),
        ({"content": "ok", "metadata": {"note": big}}, "memories[1].metadata"),
    ):
        result = memory.write({"memories": [{"content": "fine"}, draft]})
        assert result.error is not None and result.error.code == "INVALID_INPUT"
        assert field in result.error.message and "65536" in result.error.message
    assert memory.query({}).output.items == []  # nothing of either batch written
    (item,) = memory.write({"memories": [{"content": "small"}]}).output
    result = memory.update({"memories": [{"id": item.id, "content": big}]})
    assert result.error is not None and result.error.code == "INVALID_INPUT"
    assert memory.get({"ids": [item.id]}).output[0].content == "small"
    near = "y" * 65_000  # just under: stored and read back whole
    (kept,) = memory.write({"memories": [{"content": near}]}).output
    assert memory.get({"ids": [kept.id]}).output[0].content == near


def test_batches_are_chunked_under_max_message_bytes(tmp_path: Path) -> None:
    store = _store(tmp_path, max_message_bytes=2048)
    calls: list[int] = []
    real_insert = MilvusClient.upsert

    def counting(client: MilvusClient, name: str, rows: Any, **kwargs: Any) -> Any:
        if not name.endswith(("_ops", "_exec")):  # the memory rows, not the ledgers' entries
            calls.append(len(rows))
        return real_insert(client, name, rows, **kwargs)

    MilvusClient.upsert = counting  # type: ignore[method-assign]
    try:
        memory = create_memory(store)
        drafts = [{"key": f"k{i}", "content": f"record number {i} " * 20} for i in range(40)]
        written = memory.write({"memories": drafts}).output
    finally:
        MilvusClient.upsert = real_insert  # type: ignore[method-assign]
        store.close()
    assert len(calls) > 5 and sum(calls) == 40, calls
    with _store(tmp_path) as again:
        items = create_memory(again).query({"limit": 100}).output.items
        assert [i.id for i in items] == [w.id for w in written]  # all there, in order


def test_a_racing_writer_that_sees_another_holder_deletes_its_batch(
    milvus_store: MilvusMemoryStore,
) -> None:
    memory = create_memory(milvus_store)
    real = milvus_store._check_keys
    calls = {"n": 0}

    def racing(ns: str, seen: Any, own: Any, options: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the pre-check passes; another writer takes the key now
            milvus_store._check_keys = real  # type: ignore[method-assign]
            create_memory(milvus_store).write({"memories": [{"key": "k", "content": "first"}]})
            milvus_store._check_keys = racing  # type: ignore[method-assign]
            return []
        return real(ns, seen, own, options)

    milvus_store._check_keys = racing  # type: ignore[method-assign]
    result = memory.write({"memories": [{"key": "other", "content": 1},
                                        {"key": "k", "content": "second"}]})  # fmt: skip
    milvus_store._check_keys = real  # type: ignore[method-assign]
    assert result.error is not None and result.error.code == "CONFLICT"
    assert "memories[1].key" in result.error.message
    assert [(i.key, i.content) for i in memory.query({}).output.items] == [("k", "first")]


def test_a_collection_fixes_its_embedding_identity(tmp_path: Path) -> None:
    with _store(tmp_path) as first:
        first_id = create_memory(first).write({"memories": [{"content": "tea"}]}).output[0].id
    with _store(tmp_path, embedder=HashingEmbedder(seed=7)) as other:
        memory = create_memory(other)
        for node, input in (
            ("MEMORY.GET", {"ids": [first_id]}),
            ("MEMORY.QUERY", {}),
            ("MEMORY.WRITE", {"memories": [{"content": "x"}]}),
            ("MEMORY.SEARCH", {"query": "tea", "strategy": "keyword"}),
        ):
            result = memory.execute(node, input)
            assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH", node
            assert "seed=0" in result.error.message and str(tmp_path) not in result.error.message
    with _store(tmp_path, embedder=None) as plain:
        memory = create_memory(plain)
        assert [i.id for i in memory.query({}).output.items] == [first_id]  # reads work
        refused = memory.write({"memories": [{"content": "x"}]})
        assert refused.error is not None and refused.error.code == "EMBEDDING_MISMATCH"
    with _store(tmp_path, embed_kinds=["preference"]) as policy:
        result = create_memory(policy).query({})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"


def test_the_embed_policy_keeps_checkpoints_out_of_vector_search(tmp_path: Path) -> None:
    with _store(tmp_path, embed_kinds=["preference"]) as store:
        memory = create_memory(store)
        pref, task = memory.write({"memories": [
            {"content": "answer in German please", "metadata": {"kind": "preference"}},
            {"content": "German translation stage done", "metadata": {"kind": "task"}},
        ]}).output  # fmt: skip
        vector = memory.search({"query": "German", "strategy": "vector", "limit": 10}).output
        assert [r.memory.id for r in vector] == [pref.id]
        keyword = memory.search({"query": "German", "strategy": "keyword"}).output
        assert {r.memory.id for r in keyword} == {pref.id, task.id}
        memory.update({"memories": [{"id": task.id, "metadata": {"kind": "preference"}}]})
        memory.update({"memories": [{"id": pref.id, "metadata": {"kind": "task"}}]})
        vector = memory.search({"query": "German", "strategy": "vector", "limit": 10}).output
        assert [r.memory.id for r in vector] == [task.id]  # vectors follow the policy


def test_create_store_reads_settings_and_env(tmp_path: Path) -> None:
    env = {
        "DITTO_WORKER_MEMORY_MILVUS_URI": str(tmp_path / "env.db"),
        "DITTO_WORKER_MEMORY_MILVUS_COLLECTION": "from_env",
        "DITTO_WORKER_MEMORY_MILVUS_EMBED_KINDS": "preference, fact",
    }
    store = create_store({"uri": str(tmp_path / "yaml.db"), "collection": "c"}, env)
    assert store.lite and store.collection == "from_env"
    assert store._embed_kinds == ["fact", "preference"]
    create_memory(store).write({"memories": [{"content": "x"}]})
    store.close()
    assert (tmp_path / "env.db").is_dir() and not (tmp_path / "yaml.db").exists()
    server = create_store(
        {"uri": "http://127.0.0.1:19530", "maxMessageBytes": 65536},
        {"DITTO_WORKER_MEMORY_MILVUS_TOKEN": "root:Milvus"},
    )
    assert not server.lite and "multi_process" in server.capabilities.extras
    assert server.max_message_bytes == 65536 and server._conn._token == "root:Milvus"


@pytest.mark.parametrize(
    "settings",
    [{"token": "k"}, {"password": "x"}, {"uri": "milvus:19530"}, {"timeoutS": 0},
     {"collection": "a-b"}, {"embedKinds": [1]}, {"vectorIndex": "IVF"},
     {"uri": "http://root:Milvus@127.0.0.1:19530"}, {"maxMessageBytes": 10}],
)  # fmt: skip
def test_create_store_rejects_bad_settings(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        create_store({"uri": str(tmp_path / "m.db"), **settings}, {})
    assert "Milvus@" not in str(caught.value)


def test_milvus_lite_serves_one_process_per_folder(milvus_store: MilvusMemoryStore) -> None:
    create_memory(milvus_store).write({"memories": [{"content": "x"}]})
    uri = milvus_store._conn._uri
    code = (
        "from ditto_plugin_milvus import MilvusMemoryStore\n"
        "from ditto_worker import create_memory\n"
        f"r = create_memory(MilvusMemoryStore(uri={uri!r})).query({{}})\n"
        "print(r.error.code, '|', r.error.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith(
        "MEMORY_BACKEND_ERROR | Milvus Lite could not open its folder: it serves one process"
    ), out.stdout + out.stderr
    assert uri not in out.stdout


def test_driver_errors_are_mapped_without_driver_text() -> None:
    from pymilvus.exceptions import ConnectionConfigException, MilvusException

    from ditto_plugin_milvus.connection import map_error
    from ditto_worker.memory.ports import MemoryCallOptions

    secret = 'sh["fs"]["p1"] == "card 4111" at http://root:pw@10.0.0.1:19530'
    cases = [
        (MilvusException(code=1100, message=secret), False, "the Milvus server rejected the "
         "request (code 1100)"),
        (MilvusException(code=2, message=f"Fail connecting to server on {secret}"), False,
         "the Milvus server cannot be reached"),
        (MilvusException(code=1, message=f"[query] Retry timeout: 2s, {secret}"), True,
         "Milvus Lite did not answer in time"),
        (ConnectionConfigException(message=secret), True, "Milvus Lite could not open its "
         "folder: it serves one process per folder, and another process may have it open "
         "(run `milvus-lite server` or a Milvus server for several)"),
        (ValueError(secret), False, "the Milvus memory store failed"),
    ]  # fmt: skip
    for exc, lite, message in cases:
        error = map_error(exc, None, lite)
        assert (error.code, error.safe_message) == ("MEMORY_BACKEND_ERROR", message), exc
    late = map_error(
        MilvusException(code=1, message=secret), MemoryCallOptions(deadline=1.0), False
    )
    assert (late.code, late.safe_message) == ("MEMORY_TIMEOUT", "the memory call's deadline passed")


TURNS = [
    {"content": "I went to a support group yesterday", "metadata": {"speaker": "Caroline"}},
    {"content": "That sounds great", "metadata": {"speaker": "Melanie"}},
]


def test_index_fields_are_indexed_and_embedded_and_fixed_by_the_collection(
    tmp_path: Path,
) -> None:
    embedder = HashingEmbedder()  # records what it embedded (.texts)
    with _store(tmp_path, embedder=embedder, index_fields=["speaker"]) as store:
        memory = create_memory(store)
        memory.write({"memories": TURNS})
        assert sorted(embedder.texts) == ["Caroline: I went to a support group yesterday",
                                          "Melanie: That sounds great"]  # fmt: skip
        found = memory.search({"query": "Melanie", "strategy": "keyword"}).output
        assert [h.memory.content for h in found] == ["That sounds great"]
        embedder.calls.clear()
        second = found[0].memory.id
        memory.update({"memories": [{"id": second, "metadata": {"speaker": "Caroline"}}]})
        assert embedder.texts == ["Caroline: That sounds great"]  # the vector follows
        assert len(memory.search({"query": "Caroline", "strategy": "keyword"}).output) == 2
    with _store(tmp_path) as plain:  # the collection keeps the fields it was made with
        result = create_memory(plain).search({"query": "support"})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
        assert "indexFields ['speaker']" in result.error.message


def test_the_reference_ditto_yaml_builds_the_store(tmp_path: Path) -> None:
    from ditto_worker.config import load_runtime_config_file
    from ditto_worker.runtime.registry import build_store

    repo = Path(__file__).resolve().parents[3]
    env = {"DITTO_WORKER_MEMORY_MILVUS_URI": str(tmp_path / "ref.db")}
    config = load_runtime_config_file(repo / "ditto.yaml", env=env)
    store = build_store(config, "milvus", env=env)
    assert isinstance(store, MilvusMemoryStore) and store.lite
    assert store.collection == "ditto_memories" and not store.collection_per_scope
    assert create_memory(store).write({"memories": [{"content": "x"}]}).status == "success"
    store.close()
