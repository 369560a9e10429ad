"""SQLite-specific behaviour: files, processes, threads, cancellation, error mapping."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import ditto_plugin_sqlite
from ditto_plugin_sqlite import SqliteMemoryStore, create_store, driver
from ditto_plugin_sqlite.db import SCHEMA_VERSION, map_error, open_connection, transaction
from ditto_plugin_sqlite.sql import compile_filter, sort_columns
from ditto_worker.contracts import (
    MemoryDraft,
    MemoryGetInput,
    MemoryQueryInput,
    MemorySearchInput,
    MemoryWriteInput,
    OrderBy,
)
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.filters import parse_filter, parse_order_by
from ditto_worker.memory.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)

SLOW_SQL = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


def drafts(prefix: str, n: int) -> MemoryWriteInput:
    return MemoryWriteInput(
        memories=[MemoryDraft(key=f"{prefix}-{i}", content=f"note {prefix} {i}") for i in range(n)]
    )


def count(store: SqliteMemoryStore) -> int:
    return len(store.query(MemoryQueryInput(limit=10_000)).items)


def test_protocols_and_capabilities(sqlite_store: SqliteMemoryStore) -> None:
    # MEM-PY-11: atomic batches are declared
    assert isinstance(sqlite_store, MemoryStore) and isinstance(sqlite_store, MemorySearchProvider)
    assert sqlite_store.capabilities.batch_atomic is True
    assert sqlite_store.capabilities.key_conflict == "error"
    assert "multi_process" in sqlite_store.capabilities.extras
    assert ditto_plugin_sqlite.__all__ == ["DEFAULT_PATH", "SqliteMemoryStore", "create_store"]


# --- create_store (MEM-PY-8, MEM-CONF-5) ------------------------------------------------


def test_create_store_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with create_store({}, {}) as store:
        assert Path(store.path) == tmp_path / ".ditto" / "memory.sqlite"
        store.write(drafts("a", 1))
    with create_store(None, {}) as again:  # MEM-PY-8: separate calls see the same memories
        assert count(again) == 1


def test_create_store_settings_and_env(tmp_path: Path) -> None:
    from_settings = tmp_path / "deep" / "er" / "s.sqlite"
    with create_store({"path": str(from_settings), "busyTimeoutMs": 50}, {}) as store:
        assert Path(store.path) == from_settings and from_settings.exists()
    from_env = tmp_path / "env" / "e.sqlite"
    env = {
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(from_env),
        "DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS": "10",
    }
    with create_store({"path": str(from_settings)}, env) as store:
        assert Path(store.path) == from_env


@pytest.mark.parametrize(
    ("settings", "env"),
    [
        ({"url": "x"}, {}),
        ({"path": ":memory:"}, {}),
        ({"path": 5}, {}),
        ({"busyTimeoutMs": -1}, {}),
        ({"busyTimeoutMs": True}, {}),
        ({}, {"DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS": "soon"}),
    ],
)
def test_create_store_rejects_bad_config(
    tmp_path: Path, settings: dict[str, Any], env: dict[str, str]
) -> None:
    settings.setdefault("path", str(tmp_path / "m.sqlite"))
    with pytest.raises(ConfigError):
        create_store(settings, env)


# --- schema and files -------------------------------------------------------------------


def test_schema_is_idempotent_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    with SqliteMemoryStore(path) as first:
        first.write(drafts("a", 2))
    with SqliteMemoryStore(path) as second:
        assert count(second) == 2
    conn = driver.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(MemoryError) as info:
        SqliteMemoryStore(path)
    assert info.value.code == "MEMORY_BACKEND_ERROR"


def test_corrupt_file_is_a_safe_backend_error(tmp_path: Path) -> None:
    # MEM-ERR-4: no driver text reaches the caller
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MemoryError) as info:
        SqliteMemoryStore(path)
    assert info.value.code == "MEMORY_BACKEND_ERROR"
    assert "not a database" not in info.value.safe_message
    assert isinstance(info.value.__cause__, driver.dbapi().Error)


def test_map_error_hides_driver_text() -> None:
    error = map_error(driver.dbapi().OperationalError('near "SELECT": syntax error in secret SQL'))
    assert error.code == "MEMORY_BACKEND_ERROR" and "SELECT" not in error.safe_message
    assert map_error(driver.dbapi().OperationalError("interrupted")).code == "MEMORY_CANCELLED"


def test_busy_database_is_a_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    with SqliteMemoryStore(path, busy_timeout_ms=50) as store:
        blocker = driver.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(MemoryError) as info:
                store.write(drafts("a", 1))
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert info.value.code == "MEMORY_BACKEND_ERROR"
        assert "busy" in info.value.safe_message
        assert count(store) == 0
        store.write(drafts("a", 1))
        assert count(store) == 1


def test_closed_store(tmp_path: Path) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    store.close()
    store.close()
    with pytest.raises(MemoryError) as info:
        store.get(MemoryGetInput(ids=["x"]))
    assert info.value.code == "MEMORY_BACKEND_ERROR"


def test_not_json_content_is_invalid_input(sqlite_store: SqliteMemoryStore) -> None:
    # the contract already refuses such content; the store defends itself anyway
    for content in ({1, 2}, float("nan")):
        draft = MemoryDraft.model_construct(content=content)
        with pytest.raises(MemoryError) as info:
            sqlite_store.write(MemoryWriteInput.model_construct(memories=[draft]))
        assert info.value.code == "INVALID_INPUT"
    assert count(sqlite_store) == 0


def test_get_many_ids_and_keys(sqlite_store: SqliteMemoryStore) -> None:
    items = sqlite_store.write(drafts("k", 1200))
    got = sqlite_store.get(
        MemoryGetInput(ids=[i.id for i in items[:700]], keys=[f"k-{i}" for i in range(500, 1200)])
    )
    assert got == items


def test_bm25_alias_and_score(sqlite_store: SqliteMemoryStore) -> None:
    sqlite_store.write(drafts("a", 3))
    results = sqlite_store.search(MemorySearchInput(query="note a 1", strategy="bm25", limit=3))
    assert results[0].memory.key == "a-1"
    assert results[0].metadata == {"strategy": "bm25", "rank": 1}


# --- cancellation (MEM-RUN-2, MEM-PY-2) ---------------------------------------------------


def test_interrupt_running_statement(tmp_path: Path) -> None:
    conn = open_connection(str(tmp_path / "m.sqlite"), 1000)
    token = CancelToken()
    timer = threading.Timer(0.2, token.cancel)
    timer.start()
    try:
        with pytest.raises(MemoryError) as info:
            with transaction(conn, MemoryCallOptions(cancel=token), write=False) as c:
                c.execute(SLOW_SQL).fetchone()
        assert info.value.code == "MEMORY_CANCELLED"
        assert not conn.in_transaction
        assert conn.execute("SELECT 1").fetchone() == (1,)  # usable afterwards
    finally:
        timer.cancel()
        conn.close()


class CancelOnRegister(CancelToken):
    """Cancels right after the store registers its interrupt (cancel while running)."""

    def on_cancel(self, callback: Any) -> Any:
        unregister = super().on_cancel(callback)
        self.cancel()
        return unregister


def test_cancelled_calls_write_nothing(sqlite_store: SqliteMemoryStore) -> None:
    pre = CancelToken()
    pre.cancel()
    for token in (pre, CancelOnRegister()):
        options = MemoryCallOptions(cancel=token)
        with pytest.raises(MemoryError) as info:
            sqlite_store.write(drafts("a", 3), options)
        assert info.value.code == "MEMORY_CANCELLED"
    assert count(sqlite_store) == 0
    live = MemoryCallOptions(cancel=CancelToken())
    assert len(sqlite_store.write(drafts("a", 3), live)) == 3
    assert count(sqlite_store) == 3


# --- concurrency (MEM-PY-11, MEM-RUN-1) ---------------------------------------------------


def _writer(path: str, prefix: str, batches: int, per_batch: int, store: Any = None) -> None:
    own = store is None
    store = store if store is not None else SqliteMemoryStore(path, busy_timeout_ms=30_000)
    for batch in range(batches):
        store.write(drafts(f"{prefix}-{batch}", per_batch))
    if own:
        store.close()


WRITER = """
import sys
from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.contracts import MemoryDraft, MemoryWriteInput
path, prefix, batches, per_batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with SqliteMemoryStore(path, busy_timeout_ms=30_000) as store:
    for b in range(batches):
        store.write(MemoryWriteInput(memories=[
            MemoryDraft(key=f"{prefix}-{b}-{i}", content=f"note {prefix}") for i in range(per_batch)
        ]))
"""


def test_two_processes_write_one_file(tmp_path: Path) -> None:
    # several worker processes share one file: WAL + busy timeout + BEGIN IMMEDIATE
    path = str(tmp_path / "shared.sqlite")
    SqliteMemoryStore(path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, path, f"p{n}", "30", "5"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr[-2000:]
        assert "locked" not in stderr
    with SqliteMemoryStore(path) as store:
        keys = {item.key for item in store.query(MemoryQueryInput(limit=10_000)).items}
    assert len(keys) == 2 * 30 * 5


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads on 3.12+
def test_store_used_after_fork_reopens(tmp_path: Path) -> None:
    path = str(tmp_path / "forked.sqlite")
    with SqliteMemoryStore(path, busy_timeout_ms=30_000) as store:
        store.write(drafts("parent", 1))
        proc = multiprocessing.get_context("fork").Process(
            target=_writer, args=(path, "child", 3, 2, store)
        )
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        store.write(drafts("parent-again", 1))
        assert count(store) == 1 + 6 + 1


def test_threads_share_one_store(sqlite_store: SqliteMemoryStore) -> None:
    errors: list[BaseException] = []

    def work(prefix: str) -> None:
        try:
            _writer("", prefix, 10, 3, sqlite_store)
            sqlite_store.search(MemorySearchInput(query=prefix, limit=5))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert count(sqlite_store) == 4 * 10 * 3


def test_sql_text_never_contains_request_values() -> None:
    # MEM-PY-5: values and field paths are bound parameters, never formatted into SQL
    evil = "x'); DROP TABLE memories; --"
    flt = {evil: {"$in": [evil, 1]}, f'{evil}"."y': evil, "$or": [{"key": evil}]}
    compiled = compile_filter(parse_filter(flt))
    assert "DROP" not in compiled.text
    assert evil in compiled.params
    terms = parse_order_by([OrderBy(field=evil)])
    assert "DROP" not in sort_columns(terms).text


def test_stemming_finds_inflected_words(sqlite_store: SqliteMemoryStore) -> None:
    # porter tokenizer: "banker" in the question finds "bankers" in the memory
    sqlite_store.write(
        MemoryWriteInput(
            memories=[
                MemoryDraft(key="hit", content="Both of them worked as bankers downtown"),
                MemoryDraft(key="miss", content="What did the weather look like?"),
            ]
        )
    )
    results = sqlite_store.search(MemorySearchInput(query="What did the banker do?", limit=5))
    assert [r.memory.key for r in results] == ["hit"]


def test_written_items_are_what_a_read_gives_and_not_the_callers_objects(
    sqlite_store: SqliteMemoryStore,
) -> None:  # issue 36 item 0: the write's items are built without a second validation
    from ditto_worker import create_memory

    flat = {"speaker": "A", "n": 1, "x": 2.5, "ok": True, "none": None}
    nested = {"tags": ["a", "b"], "deep": {"k": 1}}
    content = ["list", {"k": "v"}]
    memory = create_memory(sqlite_store)
    raw = {"memories": [
        {"key": "s", "content": "text é", "metadata": flat},
        {"key": "n", "content": content, "metadata": nested},
        {"key": "z", "content": None}, {"key": "i", "content": 7},
    ]}  # fmt: skip
    written = memory.write(raw)
    assert written.status == "success", written.error
    read = memory.get({"keys": ["s", "n", "z", "i"]})
    assert [i.model_dump() for i in written.output] == [i.model_dump() for i in read.output]
    flat["speaker"] = "B"  # the caller's own objects change after the call
    nested["tags"].append("c")
    content.append("more")
    assert written.output[0].metadata == {"speaker": "A", "n": 1, "x": 2.5, "ok": True,
                                          "none": None}  # fmt: skip
    assert written.output[1].metadata == {"tags": ["a", "b"], "deep": {"k": 1}}
    assert written.output[1].content == ["list", {"k": "v"}]
