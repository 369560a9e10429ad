"""Storage faults (issue 7 item 4): real SQLite files and a real PostgreSQL server.

Faults injected, and what "the fault" means for each store:

* SQLite, **unavailable**: an embedded database has no server to stop; it is unavailable
  when its file is. Here its folder is moved away (as when its volume is unmounted) and
  brought back, and, separately, its file is replaced by garbage and then restored.
  Permission bits are not used: the tests run as root, which ignores them.
* SQLite, **locked**: another connection holds ``BEGIN EXCLUSIVE``. In WAL mode readers
  are not blocked by a writer (by design, so GET/QUERY/SEARCH keep succeeding); writers
  wait for the store's busy timeout (300 ms here) or the call's deadline if sooner.
* SQLite, **disk full**: the database lives on its own 2 MiB tmpfs (``mount -t tmpfs``,
  root in CI too) filled up by another file; freeing the file is the repair.
* PostgreSQL, **stopped**: the test's own cluster (``scripts/postgres.sh`` on its own
  port) is stopped with ``pause`` (data kept) and started again with ``resume``.
* PostgreSQL, **locked**: another session holds ``LOCK TABLE ... ACCESS EXCLUSIVE``; the
  call's deadline (``statement_timeout``) ends it with ``MEMORY_TIMEOUT``.
* PostgreSQL, **network cut**: a TCP proxy thread sits between the store and the server;
  it is cut (every socket closed, new connections refused) and restored on the same port;
  also cut under a statement that is waiting, and frozen (bytes silently dropped, the
  connections left open) so that only the client-side deadline can end the call.

For each: the NodeResult's status and exact code, the time it took (the call's timeout +
slack), no partial write, and the same store object serving again once the fault is gone.
Every error message (NodeResults and ``str(exc)``) goes through :func:`assert_safe`.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_worker import MemoryError, create_memory, create_memory_worker
from ditto_worker.contracts import NodeResult
from ditto_worker.memory.core import Memory
from tests.conftest import REPO, missing_service

pytestmark = pytest.mark.integration

SLACK_S = 0.5  # scheduling slack on a shared 2-core machine
SEARCH_TEXT = "hello fault world"


# --- the message scan ------------------------------------------------------------------

_DRIVER_WORDS = (
    "psycopg", "sqlite3", "operationalerror", "connection refused", "could not connect",
    "server closed", "sqlstate", "traceback", "is the server running", "errno",
    "databaseerror", "admin", "terminating", "pg_", "libpq", "kombu", "redis://",
)  # fmt: skip
_SQL = re.compile(r"\b(select|insert|update|delete)\b.*\b(from|into|set|where)\b", re.I)
_HOST_PORT = re.compile(r"\b\d{1,3}(\.\d{1,3}){3}\b|localhost|:\d{2,5}\b", re.I)


class Scan:
    """Every error message a fault test produced, checked by :meth:`check`."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.secrets: list[str] = []

    def secret(self, *values: object) -> None:
        """Strings that must never appear (URLs, passwords, ports, file paths)."""
        self.secrets.extend(str(v) for v in values if v not in (None, ""))

    def add(self, message: str) -> None:
        self.messages.append(message)

    def check(self) -> None:
        assert self.messages, "a fault test produced no error message to scan"
        for message in self.messages:
            assert_safe(message, self.secrets)


def assert_safe(message: str, secrets: list[str]) -> None:
    """No URL, password, host:port, SQL, db file path or raw driver text in ``message``."""
    low = message.lower()
    assert "://" not in message, message
    assert not _SQL.search(message), message
    assert not _HOST_PORT.search(message), message
    assert not any(word in low for word in _DRIVER_WORDS), message
    assert "/" not in message and "\\" not in message, message  # no file path at all
    for secret in secrets:
        assert secret.lower() not in low, (message, secret)


@pytest.fixture
def scan() -> Iterator[Scan]:
    found = Scan()
    yield found
    found.check()


# --- calls -------------------------------------------------------------------------------

Call = tuple[str, dict[str, Any]]


def node_calls(tag: str, record_id: str) -> list[Call]:
    """One call per node kind; the WRITE is a 3-record batch with keys ``<tag>-0..2``."""
    return [
        ("MEMORY.GET", {"ids": [record_id]}),
        ("MEMORY.QUERY", {"limit": 50}),
        ("MEMORY.SEARCH", {"query": "hello", "limit": 5}),
        ("MEMORY.WRITE", {"memories": [{"key": f"{tag}-{i}", "content": i} for i in range(3)]}),
        ("MEMORY.UPDATE", {"memories": [{"id": record_id, "content": "changed"}]}),
        ("MEMORY.DELETE", {"ids": [record_id]}),
    ]  # fmt: skip


def expect(
    scan: Scan,
    result: NodeResult[Any],
    code: str,
    started: float,
    budget_s: float,
) -> None:
    """``result`` failed with ``code`` within ``budget_s`` + slack; its message is scanned."""
    elapsed = time.monotonic() - started
    assert result.error is not None, (result.node, result.status)
    scan.add(result.error.message)
    status = "timeout" if code == "MEMORY_TIMEOUT" else "failed"
    assert (result.status, result.error.code) == (status, code), (result.node, result.error)
    assert elapsed <= budget_s + SLACK_S, (result.node, elapsed)


def run_failing(scan: Scan, memory: Memory, calls: list[Call], code: str, timeout_s: float) -> None:
    """Run each call with a deadline ``timeout_s`` ahead; each must fail with ``code``."""
    for node, payload in calls:
        started = time.monotonic()
        result = memory.execute(node, payload, deadline=time.time() + timeout_s)
        expect(scan, result, code, started, timeout_s)


def assert_serves(memory: Memory, record_id: str, seeded: int, tag: str) -> None:
    """The same store works again; the record is untouched and no failed batch landed."""
    got = memory.get({"ids": [record_id], "keys": [f"{tag}-{i}" for i in range(3)]})
    assert got.status == "success" and got.output is not None, got.error
    assert [(m.id, m.content) for m in got.output] == [(record_id, SEARCH_TEXT)]
    listed = memory.query({"limit": 100})
    assert listed.output is not None and len(listed.output.items) == seeded
    found = memory.search({"query": "hello", "limit": 5})
    assert found.output is not None and found.output[0].memory.id == record_id
    wrote = memory.write({"memories": [{"key": f"{tag}-after", "content": "after"}]})
    assert wrote.status == "success", wrote.error


def seed(memory: Memory) -> tuple[str, int]:
    """Write the searchable record and two others; returns (its id, record count)."""
    written = memory.write(
        {"memories": [{"content": SEARCH_TEXT}, {"content": "other one"}, {"content": "two"}]}
    )
    assert written.status == "success" and written.output is not None, written.error
    return written.output[0].id, 3


# --- SQLite ------------------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path, scan: Scan) -> Iterator[SqliteMemoryStore]:
    path = tmp_path / "volume" / "memory.sqlite"
    scan.secret(tmp_path, path.name, "memory.sqlite", "volume")
    store = SqliteMemoryStore(path, busy_timeout_ms=300)
    yield store
    store.close()


def test_sqlite_folder_unavailable_then_back(sqlite_store: SqliteMemoryStore, scan: Scan) -> None:
    memory = create_memory(sqlite_store)
    record_id, seeded = seed(memory)
    volume = Path(sqlite_store.path).parent
    away = volume.with_name("volume-away")
    volume.rename(away)  # as if its volume were unmounted
    run_failing(scan, memory, node_calls("gone", record_id), "MEMORY_BACKEND_ERROR", 1.0)
    results: list[NodeResult[Any]] = []
    other = threading.Thread(target=lambda: results.append(memory.get({"ids": [record_id]})))
    other.start()  # a thread without a connection yet cannot open the file either
    other.join()
    expect(scan, results[0], "MEMORY_BACKEND_ERROR", time.monotonic(), 1.0)
    away.rename(volume)
    assert_serves(memory, record_id, seeded, "gone")


def test_sqlite_file_replaced_by_garbage_then_restored(
    sqlite_store: SqliteMemoryStore, scan: Scan
) -> None:
    memory = create_memory(sqlite_store)
    record_id, seeded = seed(memory)
    path = Path(sqlite_store.path)
    with driver.connect(path) as side:  # empty the WAL so the file alone holds the data
        side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    side.close()
    kept = path.with_name("kept.sqlite")
    path.rename(kept)
    path.write_bytes(os.urandom(64 * 1024))
    run_failing(scan, memory, node_calls("junk", record_id), "MEMORY_BACKEND_ERROR", 1.0)
    os.replace(kept, path)
    assert_serves(memory, record_id, seeded, "junk")


def test_sqlite_table_locked_by_another_writer(sqlite_store: SqliteMemoryStore, scan: Scan) -> None:
    memory = create_memory(sqlite_store)
    record_id, seeded = seed(memory)
    locker = driver.connect(sqlite_store.path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        calls = node_calls("busy", record_id)
        for node, payload in calls[:3]:  # WAL: readers are not blocked by a writer
            result = memory.execute(node, payload, deadline=time.time() + 2)
            assert result.status == "success", (node, result.error)
        run_failing(scan, memory, calls[3:], "MEMORY_BACKEND_ERROR", 2.0)  # busy timeout
        started = time.monotonic()
        short = memory.execute(*calls[3], deadline=time.time() + 0.1)  # deadline < busy
        expect(scan, short, "MEMORY_TIMEOUT", started, 0.1)
        assert "busy" in scan.messages[0]
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert_serves(memory, record_id, seeded, "busy")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test (needs root with CAP_SYS_ADMIN, as in CI)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        missing_service("cannot mount a tmpfs (needs root) to fill a disk")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_sqlite_disk_full(small_disk: Path, scan: Scan) -> None:
    path = small_disk / "memory.sqlite"
    scan.secret(small_disk, "memory.sqlite")
    store = SqliteMemoryStore(path, busy_timeout_ms=300)
    try:
        memory = create_memory(store)
        record_id, seeded = seed(memory)
        filler = small_disk / "filler"
        with open(filler, "wb", buffering=0) as f:  # take every free block (unbuffered:
            # a buffered file would retry its rest on close and raise ENOSPC there)
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        big = [{"key": f"full-{i}", "content": "y" * 4000} for i in range(20)]
        started = time.monotonic()
        failed = memory.execute("MEMORY.WRITE", {"memories": big}, deadline=time.time() + 2)
        expect(scan, failed, "MEMORY_BACKEND_ERROR", started, 2.0)
        assert failed.error is not None and "full" in failed.error.message
        got = memory.get({"keys": [d["key"] for d in big]})
        assert got.status == "success" and got.output == []  # nothing half-written
        filler.unlink()
        wrote = memory.write({"memories": big})
        assert wrote.status == "success", wrote.error
        assert_serves(memory, record_id, seeded + len(big), "full-none")
    finally:
        store.close()


# --- PostgreSQL: the test's own cluster ---------------------------------------------------


class OwnPostgres:
    """A cluster of ``scripts/postgres.sh`` on its own port that a test may pause."""

    def __init__(self) -> None:
        port = os.environ.get("DITTO_FAULT_PG_PORT")
        if not port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = str(s.getsockname()[1])
        self.port = int(port)
        self.password = f"fault-{uuid.uuid4().hex[:12]}"
        self.env = {**os.environ, "DITTO_PG_PORT": port, "DITTO_PG_PASSWORD": self.password}
        self.url = ""

    def script(self, command: str) -> str:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "postgres.sh"), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def start(self) -> None:
        line = self.script("start").strip()
        self.url = line.split("=", 1)[1]


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    if shutil.which("runuser") is None:
        missing_service("runuser is needed by scripts/postgres.sh")
    server = OwnPostgres()
    try:
        server.start()
    except AssertionError as exc:
        missing_service(f"scripts/postgres.sh could not start a cluster: {exc}")
    yield server
    server.script("stop")


def pg_store(url: str, **kwargs: Any) -> Any:
    from ditto_plugin_postgres import PostgresMemoryStore

    options = {"pool_min_size": 1, "pool_max_size": 2, "connect_timeout_s": 1.0}
    return PostgresMemoryStore(url, schema=f"f_{uuid.uuid4().hex[:16]}", **options | kwargs)


def pg_secrets(scan: Scan, url: str, *more: object) -> None:
    parts = urlsplit(url)
    scan.secret(url, parts.password, parts.hostname, f":{parts.port}", str(parts.port), *more)


@pytest.fixture
def pg_memory(own_postgres: OwnPostgres, scan: Scan) -> Iterator[tuple[Memory, Any]]:
    store = pg_store(own_postgres.url)
    pg_secrets(scan, own_postgres.url, store.schema)
    yield create_memory(store), store
    store.close()


def test_postgres_server_stopped_then_started(
    own_postgres: OwnPostgres, pg_memory: tuple[Memory, Any], scan: Scan
) -> None:
    memory, store = pg_memory
    record_id, seeded = seed(memory)
    own_postgres.script("pause")
    try:
        run_failing(scan, memory, node_calls("down", record_id), "MEMORY_BACKEND_ERROR", 3.0)
        assert all("not reachable" in m for m in scan.messages), scan.messages
        with pytest.raises(MemoryError) as raised:  # an exception that reaches a caller
            store.migrate()
        scan.add(str(raised.value))
    finally:
        own_postgres.script("resume")
    assert_serves(memory, record_id, seeded, "down")


def test_postgres_table_locked(
    own_postgres: OwnPostgres, pg_memory: tuple[Memory, Any], scan: Scan
) -> None:
    import psycopg

    memory, store = pg_memory
    record_id, seeded = seed(memory)
    with psycopg.connect(own_postgres.url) as locker:
        locker.execute(f'LOCK TABLE "{store.schema}".memories IN ACCESS EXCLUSIVE MODE')
        run_failing(scan, memory, node_calls("lock", record_id), "MEMORY_TIMEOUT", 0.6)
        locker.rollback()
    assert_serves(memory, record_id, seeded, "lock")


# --- PostgreSQL behind a TCP proxy that can be cut -----------------------------------------


class CutProxy:
    """A loopback TCP proxy to ``target_port``: ``cut()`` closes every socket and refuses
    new ones, ``freeze()`` silently drops bytes (connections stay open), ``restore()``
    serves again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = 0
        self.frozen = threading.Event()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    def restore(self) -> None:
        self.frozen.clear()
        self._stop.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept, listener)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            if not select.select([listener], [], [], 0.05)[0]:
                continue
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream)
        listener.close()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._stop.is_set():
                for ready in select.select([a, b], [], [], 0.05)[0]:
                    data = ready.recv(65536)
                    if not data:
                        return
                    if not self.frozen.is_set():
                        peers[ready].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    def freeze(self) -> None:
        self.frozen.set()

    def cut(self) -> None:
        """Close every proxied socket (both ends) and stop listening."""
        self._stop.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(5)
        self._threads = []


@pytest.fixture
def proxy(own_postgres: OwnPostgres) -> Iterator[CutProxy]:
    server = CutProxy(own_postgres.port)
    server.restore()
    yield server
    server.cut()


@pytest.fixture
def proxied(
    own_postgres: OwnPostgres, proxy: CutProxy, scan: Scan
) -> Iterator[tuple[Memory, Any, str]]:
    url = own_postgres.url.replace(f":{own_postgres.port}/", f":{proxy.port}/")
    store = pg_store(url)
    pg_secrets(scan, url, store.schema, str(own_postgres.port))
    yield create_memory(store), store, url
    store.close()


def test_postgres_network_cut_then_restored(
    proxy: CutProxy, proxied: tuple[Memory, Any, str], scan: Scan
) -> None:
    memory, _, _ = proxied
    record_id, seeded = seed(memory)
    proxy.cut()
    run_failing(scan, memory, node_calls("cut", record_id), "MEMORY_BACKEND_ERROR", 3.0)
    proxy.restore()
    assert_serves(memory, record_id, seeded, "cut")


def test_postgres_network_cut_under_a_waiting_statement(
    own_postgres: OwnPostgres, proxy: CutProxy, proxied: tuple[Memory, Any, str], scan: Scan
) -> None:
    import psycopg

    memory, store, _ = proxied
    record_id, seeded = seed(memory)
    results: list[NodeResult[Any]] = []
    with psycopg.connect(own_postgres.url) as locker:
        locker.execute(f'LOCK TABLE "{store.schema}".memories IN ACCESS EXCLUSIVE MODE')
        started = time.monotonic()
        waiting = threading.Thread(
            target=lambda: results.append(
                memory.execute("MEMORY.QUERY", {"limit": 5}, deadline=time.time() + 10)
            )
        )
        waiting.start()
        wait_for_lock_waiter(own_postgres.url)
        proxy.cut()
        waiting.join(10)
        locker.rollback()
    expect(scan, results[0], "MEMORY_BACKEND_ERROR", started, 3.0)
    assert "lost" in results[0].error.message  # type: ignore[union-attr]
    proxy.restore()
    assert_serves(memory, record_id, seeded, "cut2")


def wait_for_lock_waiter(url: str) -> None:
    """Return once some session of the server waits for a lock (the event to cut on)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.02)
    raise AssertionError("no session ever waited for the lock")


def test_postgres_network_frozen_ends_at_the_deadline(
    proxy: CutProxy, proxied: tuple[Memory, Any, str], scan: Scan
) -> None:
    memory, _, _ = proxied
    record_id, seeded = seed(memory)
    proxy.freeze()  # bytes vanish; no RST, no FIN: only the client can end the wait
    started = time.monotonic()
    result = memory.execute("MEMORY.GET", {"ids": [record_id]}, deadline=time.time() + 1.0)
    expect(scan, result, "MEMORY_TIMEOUT", started, 1.0)
    proxy.cut()
    proxy.restore()
    assert_serves(memory, record_id, seeded, "frozen")


# --- through a real Celery worker on real Redis --------------------------------------------


def test_fleet_caller_sees_the_codes(
    start_fleet_worker: Any,
    client: Any,
    proxy: CutProxy,
    proxied: tuple[Memory, Any, str],
    redis_url: str,
    scan: Scan,
) -> None:
    memory, store, _ = proxied
    record_id, seeded = seed(memory)
    scan.secret(redis_url, urlsplit(redis_url).port)
    with start_fleet_worker(lambda: create_memory_worker(store), concurrency=2):
        ok = client.invoke("MEMORY.GET", {"ids": [record_id]}, timeout=10)
        assert ok.status == "success", ok.error
        proxy.cut()
        for node, payload in node_calls("fleet", record_id)[:4]:
            started = time.monotonic()
            result = client.invoke(node, payload, timeout=4)
            expect(scan, result, "MEMORY_BACKEND_ERROR", started, 4.0)
        proxy.restore()
        back = client.invoke("MEMORY.QUERY", {"limit": 100}, timeout=10)
        assert back.status == "success" and len(back.output.items) == seeded
    assert_serves(memory, record_id, seeded, "fleet")


def test_the_scan_catches_leaks() -> None:
    """The scan itself: each kind of leak is caught (a scan that passes everything is no test)."""
    leaks = [
        "cannot connect to postgresql://u:pw@db/x",
        "failed at 127.0.0.1",
        "failed on localhost:5432",
        "SELECT id FROM memories failed",
        'insert into "t".memories failed',
        "psycopg.OperationalError: boom",
        "sqlite3.OperationalError: disk I/O error",
        "connection refused",
        "cannot open /tmp/x/memory.sqlite",
        "wrong password hunter2",
    ]
    for text in leaks:
        with pytest.raises(AssertionError):
            assert_safe(text, ["hunter2"])
    assert_safe("the SQLite memory store is busy (locked by another writer)", ["hunter2"])
