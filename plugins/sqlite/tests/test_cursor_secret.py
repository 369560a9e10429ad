"""The SQLite store's cursor secret (issue 13 item 2): kept in ``store_settings``, made
once per database file, shared by every store object and process on that file."""

from __future__ import annotations

import threading
from pathlib import Path

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_worker import create_memory
from ditto_worker.memory.cursors import CURSOR_SECRET_SETTING


def _fill(store: SqliteMemoryStore) -> None:
    memory = create_memory(store)
    memory.write({"memories": [{"key": f"k{i}", "content": i} for i in range(5)]})


def test_another_store_object_on_the_file_reads_the_cursor(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    first = SqliteMemoryStore(path)
    _fill(first)
    page = create_memory(first).query({"limit": 2})
    assert page.output is not None and page.output.next_cursor
    second = SqliteMemoryStore(path)  # another worker process would do the same
    rest = create_memory(second).query({"limit": 10, "cursor": page.output.next_cursor})
    assert rest.output is not None, rest.error
    keys = [i.key for i in page.output.items + rest.output.items]
    assert keys == [f"k{i}" for i in range(5)]
    with driver.connect(path) as conn:
        rows = conn.execute(
            "SELECT value FROM store_settings WHERE name = ?", (CURSOR_SECRET_SETTING,)
        ).fetchall()
    assert len(rows) == 1 and len(rows[0][0]) == 64
    first.close()
    second.close()


def test_a_cursor_of_another_file_is_invalid(tmp_path: Path) -> None:
    stores = [SqliteMemoryStore(tmp_path / f"{name}.sqlite") for name in ("a", "b")]
    for store in stores:
        _fill(store)
    page = create_memory(stores[0]).query({"limit": 2})
    assert page.output is not None and page.output.next_cursor
    other = create_memory(stores[1]).query({"limit": 2, "cursor": page.output.next_cursor})
    assert other.error is not None and other.error.code == "INVALID_CURSOR"
    for store in stores:
        store.close()


def test_racing_first_pages_agree_on_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    stores = [SqliteMemoryStore(path) for _ in range(6)]
    found: list[str] = []
    barrier = threading.Barrier(len(stores))

    def claim(store: SqliteMemoryStore) -> None:
        barrier.wait()
        found.append(store._cursor_secret())

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == len(stores) and len(set(found)) == 1
    for store in stores:
        store.close()
