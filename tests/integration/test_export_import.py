"""``ditto-worker export`` / ``import`` across the five stores (issue 27): SQLite →
PostgreSQL → MySQL (MariaDB 10.11) → Milvus Lite 3 (Python reimplementation) → Qdrant local
mode → SQLite, each store built from its environment as ``ditto-worker worker --store``
builds it, each hop through the commands. Keys, content and metadata arrive equal in every
scope; operation ids are kept where the target keeps them; a re-run writes nothing twice;
the last store embeds with its own model (MEM-RET-4, MEM-RUN-7)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import Scope, create_memory
from ditto_worker.cli.commands import app
from tests.conftest import mysql_url, postgres_url

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "b:ob=1")  # a part the namespace encoding must keep apart
TASK = Scope.for_task("acme", "alice", "t1")
SCOPES = [
    "tenant=acme,user=alice",
    "tenant=acme,user=b:ob=1",
    "tenant=acme,user=alice,space=task:t1",
]


def _fill(memory: Any) -> None:
    memory.write(
        {
            "memories": [
                {"key": "pref", "content": "Write to me in German.",
                 "metadata": {"kind": "preference", "n": 1, "nested": {"a": [1, 2.5, None]}}},
                {"content": {"turn": 3, "text": "我喜欢中文 and emoji 🎉"}, "metadata": {}},
                {"key": "null", "content": None},
                {"content": ["a", True, 0]},
            ]
        },
        scope=ALICE,
        operation_id="task-1:seed",
    )  # fmt: skip
    memory.write({"memories": [{"content": "no op id"}, {"key": "k2", "content": 2}]},
                 scope=ALICE)  # fmt: skip
    memory.write({"memories": [{"key": "pref", "content": "bob's", "metadata": {"x": "y"}}]},
                 scope=BOB)  # fmt: skip
    memory.write({"memories": [{"key": "progress", "content": {"stage": 2}}]}, scope=TASK,
                 operation_id="t1:stage-2")  # fmt: skip
    memory.write({"memories": [{"key": "u", "content": "unscoped"}]})


def _listing(memory: Any, scope: Scope | None) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    cursor = None
    while True:
        page = memory.query({"limit": 2, **({"cursor": cursor} if cursor else {})}, scope=scope)
        assert page.status == "success", page.error
        out += [(i.key, i.content, i.metadata or {}, i.operation_id) for i in page.output.items]
        cursor = page.output.next_cursor
        if not cursor:
            return sorted(out, key=lambda i: json.dumps(i[:3], sort_keys=True))


def _exported(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The file's records per scope, as (key, content, metadata), sorted."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        data = json.loads(line)
        label = json.dumps(data["scope"], sort_keys=True)
        found.setdefault(label, []).append((data.get("key"), data["content"],
                                            data.get("metadata") or {}))  # fmt: skip
    return {k: sorted(v, key=lambda i: json.dumps(i, sort_keys=True)) for k, v in found.items()}


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, dict[str, str]]]:
    """Environment per store: fresh SQLite files, a PostgreSQL schema and a MySQL database
    of the test's own (dropped after), a Milvus Lite file and a Qdrant local folder."""
    pg, my = postgres_url(), mysql_url()
    tag = uuid.uuid4().hex[:12]
    base = {"DITTO_BROKER_URL": ""}
    envs = {
        "sqlite": {**base, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "a.sqlite")},
        "postgres": {**base, "DITTO_WORKER_MEMORY_POSTGRES_URL": pg,
                     "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA": f"x_{tag}"},
        "mysql": {**base, "DITTO_WORKER_MEMORY_MYSQL_URL": my,
                  "DITTO_WORKER_MEMORY_MYSQL_DATABASE": f"x_{tag}"},
        "milvus": {**base, "DITTO_WORKER_MEMORY_MILVUS_URI": str(tmp_path / "milvus.db"),
                   "DITTO_WORKER_MEMORY_MILVUS_COLLECTION": f"x_{tag}"},
        "qdrant": {**base, "DITTO_WORKER_MEMORY_QDRANT_PATH": str(tmp_path / "qdrant"),
                   "DITTO_WORKER_MEMORY_QDRANT_COLLECTION": f"x_{tag}"},
        "sqlite-again": {**base, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "z.sqlite"),
                         "DITTO_WORKER_MEMORY_SQLITE_EMBEDDING": "local"},
    }  # fmt: skip
    yield envs
    import psycopg
    import pymysql

    from ditto_plugin_mysql.db import parse_url

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "x_{tag}" CASCADE')
    address = parse_url(my)
    conn = pymysql.connect(host=address.host, port=address.port, user=address.user,
                           password=address.password, autocommit=True)  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `x_{tag}`")
    conn.close()


def _run(args: list[str], env: dict[str, str]) -> Any:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    return result


def _export(env: dict[str, str], store: str, path: Path) -> Any:
    """Every scope: listed by the store (--all-scopes), named one by one on Milvus, which
    cannot list them."""
    scopes = [arg for scope in SCOPES for arg in ("--scope", scope)]
    which = ["--unscoped", *scopes] if store == "milvus" else ["--all-scopes"]
    result = _run(["export", "--store", store, *which, "--page-size", "2", "-o", str(path)],
                  env)  # fmt: skip
    assert "acme/b:ob=1/memory: 1" in result.output and "unscoped: 1" in result.output
    return result


@pytest.mark.timeout(600)
def test_round_trip_through_every_store(
    stores: dict[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = SqliteMemoryStore(tmp_path / "a.sqlite")
    _fill(create_memory(source))
    source.close()
    first = tmp_path / "sqlite.jsonl"
    _export(stores["sqlite"], "sqlite", first)
    expected = _exported(first)
    assert sum(len(v) for v in expected.values()) == 9 and len(expected) == 4
    previous = first
    for name in ("postgres", "mysql", "milvus", "qdrant", "sqlite-again"):
        store = name.split("-")[0]
        env = stores[name]
        imported = _run(["import", str(previous), "--store", store, "--batch-size", "2"], env)
        assert "import: 9 memories read" in imported.output
        assert "German" not in imported.output and "我喜欢" not in imported.output
        out = tmp_path / f"{name}.jsonl"
        _export(env, store, out)
        assert _exported(out) == expected, name  # keys, content, metadata in every scope
        # every store keeps operation ids: a re-run is a replay
        _run(["import", str(previous), "--store", store, "--batch-size", "2"], env)
        _export(env, store, out)
        assert _exported(out) == expected, f"{name} after a re-run"
        ops = {json.loads(x).get("operationId") for x in out.read_text().splitlines()[1:]}
        assert None not in ops and "not kept" not in imported.output, name
        previous = out
    # the first hop kept the source's own operation ids
    ops = [json.loads(x).get("operationId") for x in (tmp_path / "postgres.jsonl").read_text()
           .splitlines()[1:]]  # fmt: skip
    assert ops.count("task-1:seed") == 4 and ops.count("t1:stage-2") == 1
    # the last store embedded the memories with its own model: vector search finds them
    last = SqliteMemoryStore(tmp_path / "z.sqlite", embedder=_local())
    try:
        hits = create_memory(last).search(
            {"query": "which language should I write in", "strategy": "vector", "limit": 6},
            scope=ALICE,
        )
        assert hits.status == "success", hits.error
        # the memories with text have vectors (null content and a bare number have none)
        assert len(hits.output) == 4 and hits.output[0].memory.key == "pref"
    finally:
        last.close()


def _local() -> Any:
    from ditto_worker.retrieval.embed import LocalEmbeddingProvider

    return LocalEmbeddingProvider()


def test_a_re_run_of_keyed_records_into_mysql_and_milvus_writes_nothing_twice(
    stores: dict[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    header = json.dumps({"format": "ditto-memory-export", "version": 1, "store": "x"})
    lines = [json.dumps({"scope": ALICE.to_header(), "id": f"i{n}", "key": f"k{n}",
                         "content": {"n": n}, "metadata": {"n": n}}) for n in range(5)]  # fmt: skip
    path = tmp_path / "keyed.jsonl"
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    milvus = ["export", "--store", "milvus", "--all-scopes"]
    refused = CliRunner().invoke(app, milvus, env=stores["milvus"])
    assert refused.exit_code == 1 and "cannot list its scopes" in refused.output
    # both keep operation ids now (issue 27): the re-run replays every WRITE (the path for
    # a store without them is tests/unit/test_transfer.py's)
    for store in ("mysql", "milvus"):
        env = stores[store]
        _run(["import", str(path), "--store", store, "--batch-size", "2"], env)
        again = _run(["import", str(path), "--store", store, "--batch-size", "2"], env)
        assert "already there" not in again.output and "replays" in again.output
        out = tmp_path / f"{store}.jsonl"
        _run(["export", "--store", store, "--scope", SCOPES[0], "-o", str(out)], env)
        assert len(out.read_text().splitlines()) == 1 + 5, store
