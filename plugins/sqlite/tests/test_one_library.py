"""One SQLite library per process (:mod:`ditto_plugin_sqlite.driver`).

Before, a store without an embedder opened its file with the stdlib ``sqlite3`` and one
with an embedder with ``pysqlite3``: two copies of SQLite in one process on one file,
where closing a connection of one drops the POSIX locks the other holds
(https://www.sqlite.org/howtocorrupt.html section 2.2.1). A second process then wrote
while this one believed it held the write lock: writes failed with "database disk image
is malformed" and were lost. The test below opened the same file through both kinds of
store and a raw connection, and failed that way before.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_worker.contracts import MemoryGetInput, MemoryQueryInput, MemoryWriteInput
from ditto_worker.errors import ErrorCode
from ditto_worker.testing import HashingEmbedder

REPO = Path(__file__).resolve().parents[3]
EMBEDDER = HashingEmbedder(dims=16, seed=0)
ROUNDS, PER_ROUND = 12, 4
"""Each writer (two threads, one process) opens a store ROUNDS times, writes PER_ROUND
memories one call each, and closes it."""

_SECOND_PROCESS = """
import sys
from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.contracts import MemoryWriteInput
from ditto_worker.testing import HashingEmbedder

path, tag, rounds, per_round = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for r in range(rounds):
    with SqliteMemoryStore(path, embedder=HashingEmbedder(dims=16, seed=0),
                           busy_timeout_ms=60000) as store:
        for i in range(per_round):
            draft = {"content": f"note {tag} {r} {i}", "key": f"{tag}-{r}-{i}"}
            store.write(MemoryWriteInput.model_validate({"memories": [draft]}))
print("done")
"""


def _write_rounds(path: Path, tag: str) -> None:
    for r in range(ROUNDS):
        with SqliteMemoryStore(path, embedder=EMBEDDER, busy_timeout_ms=60000) as store:
            for i in range(PER_ROUND):
                draft = {"content": f"note {tag} {r} {i}", "key": f"{tag}-{r}-{i}"}
                store.write(MemoryWriteInput.model_validate({"memories": [draft]}))


def _read_without_embedder(path: Path, stop: threading.Event) -> None:
    while not stop.is_set():  # a store without embedder: the stdlib sqlite3 before
        with SqliteMemoryStore(path, busy_timeout_ms=60000) as store:
            store.get(MemoryGetInput(ids=["absent"]))
            store.query(MemoryQueryInput(limit=5))


def _probe_rows(path: Path, stop: threading.Event, written: list[int]) -> None:
    n = 0
    while not stop.is_set():  # another opener: a raw connection, written and closed
        conn = driver.connect(path, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO probe (n) VALUES (?)", (n,))
            conn.execute("COMMIT")
            n += 1
        finally:
            conn.close()
    written.append(n)


def _run(target: Callable[..., None], *args: object, failures: list[BaseException]) -> None:
    try:
        target(*args)
    except BaseException as exc:  # reported by the test, not lost in the thread
        failures.append(exc)


def test_every_opener_shares_one_library_and_no_write_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    SqliteMemoryStore(path, embedder=EMBEDDER).close()  # the schema and the identity
    with driver.connect(path) as conn:
        conn.execute("CREATE TABLE probe (n INTEGER NOT NULL)")
    conn.close()
    second = subprocess.Popen(
        [sys.executable, "-c", _SECOND_PROCESS, str(path), "p", str(ROUNDS), str(PER_ROUND)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    stop, failures, probes = threading.Event(), [], []
    writers = [
        threading.Thread(target=_run, args=(_write_rounds, path, t), kwargs={"failures": failures})
        for t in ("t0", "t1")
    ]
    others = [
        threading.Thread(
            target=_run, args=(_read_without_embedder, path, stop), kwargs={"failures": failures}
        ),
        threading.Thread(
            target=_run, args=(_probe_rows, path, stop, probes), kwargs={"failures": failures}
        ),
    ]
    for thread in writers + others:
        thread.start()
    for thread in writers:
        thread.join(timeout=300)
    out, err = second.communicate(timeout=300)
    stop.set()
    for thread in others:
        thread.join(timeout=60)
    assert failures == []
    assert second.returncode == 0 and out.strip() == "done", err[-2000:]
    with driver.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        keys = {row[0] for row in conn.execute("SELECT key FROM memories")}
        probe = sorted(row[0] for row in conn.execute("SELECT n FROM probe"))
    conn.close()
    rounds = [f"{tag}-{r}" for tag in ("t0", "t1", "p") for r in range(ROUNDS)]
    assert keys == {f"{one}-{i}" for one in rounds for i in range(PER_ROUND)}
    assert probe == list(range(probes[0])) and probes[0] > 0


def test_the_library_is_chosen_once_and_is_pysqlite3_when_installed() -> None:
    pytest.importorskip("pysqlite3")
    assert driver.driver_name() == "pysqlite3"
    assert driver.dbapi() is driver.dbapi()
    with (
        SqliteMemoryStore(":memory:") as plain,
        SqliteMemoryStore(":memory:", embedder=EMBEDDER) as vec,
    ):
        for store in (plain, vec):
            assert isinstance(store._conn(), driver.connection_class())
        assert isinstance(store._conn(), driver.dbapi().Connection)


_OPEN_CLOSE = """
import sys, threading
from ditto_plugin_sqlite import driver

path, rounds = sys.argv[1], int(sys.argv[2])
conn = driver.connect(path, isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("CREATE TABLE t (x)")
conn.close()

def cycle():
    for _ in range(rounds):
        conn = driver.connect(path, isolation_level=None, timeout=30)
        conn.execute("SELECT count(*) FROM t").fetchone()
        conn.close()

threads = [threading.Thread(target=cycle) for _ in range(int(sys.argv[3]))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("done", driver.driver_name())
"""


def test_threads_opening_and_closing_one_file_do_not_deadlock(tmp_path: Path) -> None:
    # SQLite 3.51.0-3.51.1 (pysqlite3-binary 0.5.4) deadlocks when a close of the last
    # connection of a WAL file meets an open or close of it in another thread; ungated,
    # 4 threads x 10,000 cycles hung 4 times in 4 (driver.opening serializes them; ~17 s)
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_CLOSE, str(tmp_path / "gate.sqlite"), "10000", "4"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("done")


def test_close_holds_the_gate_and_a_collected_connection_closes(tmp_path: Path) -> None:
    import gc

    conn = driver.connect(tmp_path / "c.sqlite", check_same_thread=False)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (conn.close(), closed.set()))
    with driver.opening():  # another thread opening: the close waits for it
        closer.start()
        assert not closed.wait(0.5)
    closer.join(timeout=30)
    assert closed.is_set()
    closes: list[int] = []

    class Spy(driver.connection_class()):  # type: ignore[misc]
        def close(self) -> None:
            closes.append(1)
            super().close()

    spy = driver.connect(tmp_path / "c.sqlite", factory=Spy)
    del spy
    gc.collect()
    assert closes == [1]  # collected: closed through close(), under the gate
    with pytest.raises(TypeError):  # a factory that would close ungated
        driver.connect(tmp_path / "c.sqlite", factory=driver.dbapi().Connection)


def test_a_failed_open_is_never_closed(tmp_path: Path) -> None:
    import gc

    # pysqlite3 crashed the process when the collected half-made connection was closed
    # (the store's "folder removed" fault, tests/integration/test_storage_faults.py)
    for _ in range(20):
        with pytest.raises(driver.dbapi().OperationalError):
            driver.connect(tmp_path / "missing" / "m.sqlite")
    gc.collect()
    conn = driver.connect(tmp_path / "m.sqlite")
    assert conn.opened and conn.execute("SELECT 1").fetchone() == (1,)
    conn.close()


_CORE = """
import json, sys
for name in ("pysqlite3", "sqlite_vec", "numpy"):  # the core install has none of them
    sys.modules[name] = None
from ditto_worker.contracts import MemoryGetInput, MemoryWriteInput
from ditto_worker.errors import MemoryError
from ditto_worker.testing import HashingEmbedder
from ditto_plugin_sqlite import SqliteMemoryStore, driver
at_import = [m for m in ("sqlite3", "pysqlite3") if sys.modules.get(m)]  # chosen on first use

path = sys.argv[1]
with SqliteMemoryStore(path) as store:
    [item] = store.write(MemoryWriteInput.model_validate({"memories": [{"content": "tea"}]}))
    got = store.get(MemoryGetInput(ids=[item.id]))
try:
    SqliteMemoryStore(path + ".v", embedder=HashingEmbedder(dims=8))
    code, message = None, None
except MemoryError as exc:
    code, message = str(exc.code), str(exc)
print(json.dumps({"driver": driver.driver_name(), "found": len(got), "code": code,
                  "at_import": at_import,
                  "message": message, "pysqlite3": "pysqlite3.dbapi2" in sys.modules}))
"""


def test_core_install_runs_on_the_stdlib_and_refuses_vectors_plainly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CORE, str(tmp_path / "core.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["at_import"] == [] and report["driver"] == "sqlite3" and report["found"] == 1
    assert report["code"] == ErrorCode.MEMORY_BACKEND_ERROR
    assert "pysqlite3-binary" in report["message"] and not report["pysqlite3"]


_SOURCES = ("ditto_worker", "plugins", "tests", "bench", "scripts", "docs", "conftest.py")


def _imports_sqlite(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and _called(node.func) in ("import_module", "__import__"):
            first = node.args[0] if node.args else None
            names = [first.value] if isinstance(first, ast.Constant) else []
        if any(str(name).partition(".")[0] in ("sqlite3", "pysqlite3") for name in names):
            lines.append(getattr(node, "lineno", 0))
    return sorted(lines)


def _called(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def test_no_module_but_the_driver_imports_an_sqlite_library() -> None:
    # the import-linter contract one-sqlite-library covers the packages; this covers the
    # tests, benches and scripts too (a test opening a store's file with the other library
    # is the same hazard), and imports by name
    found = {}
    for root in _SOURCES:
        for file in [REPO / root] if root.endswith(".py") else (REPO / root).rglob("*.py"):
            if file.name == "driver.py" and file.parent.name == "ditto_plugin_sqlite":
                continue
            lines = _imports_sqlite(ast.parse(file.read_text(encoding="utf-8")))
            if lines:
                found[str(file.relative_to(REPO))] = lines
    assert found == {}


def test_the_scan_sees_every_form_of_import() -> None:
    source = (
        "import sqlite3\nfrom pysqlite3 import dbapi2\nimport pysqlite3.dbapi2 as d\n"
        "def f():\n    import sqlite3 as s\n"
        "importlib.import_module('sqlite3')\nimport sqlite_vec\n"
        "from ditto_plugin_sqlite import driver\nx = ['sqlite3']\n"
    )
    assert _imports_sqlite(ast.parse(source)) == [1, 2, 3, 5, 6]
