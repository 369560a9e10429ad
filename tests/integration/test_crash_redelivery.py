"""Nothing lost, nothing doubled: SIGKILL the worker's pool process during WRITE and UPDATE
batches, on SQLite, PostgreSQL and MySQL (MariaDB).

A real ``ditto-worker worker --nodes writes`` (prefork, one pool process) on a real Redis
and a real database (an SQLite file, a PostgreSQL schema of ``DITTO_TEST_POSTGRES_URL``
through ``--store postgres``, or a database of ``DITTO_TEST_MYSQL_URL`` through
``--store mysql``). Mutation tasks ack late and are requeued when their process
dies; the store claims each execution id in the mutation's transaction. One caller sends
WRITE batches and, after each, an UPDATE of that batch's records (content and metadata),
every call with a fixed execution id; the pool process is killed at random points until
at least one WRITE and one UPDATE were redelivered.

Checked afterwards: every call succeeded; every memory exists exactly once with its
updated content; a trigger installed in the database before the run counts the rows each
committed transaction inserted and updated — one INSERT and one UPDATE per record, so no
duplicated record and no double UPDATE (the contract has no version field: a re-applied
UPDATE would be a second counted row update); each reply names the records that exist, as
they are (issue 7 items 1-2; seed: "crash after a mutation and retry").
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_worker import create_memory
from ditto_worker.config import FleetSettings
from ditto_worker.fleet import DittoClient
from ditto_worker.memory.core import Memory
from ditto_worker.testing.effects import (
    count_postgres_effects,
    count_sqlite_effects,
    effects_sql,
    tally,
)
from tests.conftest import EVENT_WAIT_S, mysql_url, postgres_url, stop_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BATCH = 1500  # ~0.3-1.5 s of work per call, so a kill usually lands inside one
MIN_PAIRS = 3  # WRITE + UPDATE pairs sent at least ...
MAX_PAIRS = 12  # ... and at most, until both kinds were killed and redelivered
MAX_KILLS = 12
RECEIVED = re.compile(r"Task (MEMORY\.\w+)\[([^\]]+)\] received")


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a prefork worker's pool)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def live_child(pid: int) -> int | None:
    """The one running child of ``pid`` (the pool process of ``--concurrency 1``), read
    from ``/proc`` in microseconds (``pgrep`` takes milliseconds, longer than a call's
    COMMIT-to-ack window); ``None`` while there is none: the killed one not yet reaped
    (a zombie, which a SIGKILL does not reach) or its replacement not yet forked."""
    try:  # each thread's children (a pool process may be forked by any of them)
        listed = [c for t in Path(f"/proc/{pid}/task").iterdir()
                  for c in (t / "children").read_text().split()]  # fmt: skip
    except OSError:
        listed = [str(p) for p in children(pid)]
    for child in listed:
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
        except OSError:
            continue  # reaped meanwhile
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return int(child)
    return None


def wait_ready(
    log: Path, proc: subprocess.Popen[str], timeout_s: float = 60, seen: int = 0
) -> None:
    """Until the worker's log shows its ``seen + 1``-th ``ready.``."""
    deadline = time.monotonic() + timeout_s
    while log.read_text().count("ready.") <= seen and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    assert log.read_text().count("ready.") > seen, log.read_text()


def redeliveries(log: Path) -> Counter[str]:
    """Per node, the calls received more than once by the worker."""
    received = Counter(RECEIVED.findall(log.read_text()))
    return Counter(node for (node, _), n in received.items() if n > 1)


class Target:
    """One database under test: how a worker subprocess reaches it, and how to inspect it.

    ``prepare()`` creates the schema and a trigger counting every row a committed
    transaction inserted or updated (``effects(op, id)``).
    """

    name = ""

    def worker_env(self) -> dict[str, str]:
        raise NotImplementedError

    def prepare(self) -> None:
        raise NotImplementedError

    def effects(self) -> Counter[tuple[str, str]]:
        raise NotImplementedError

    def memory(self) -> Memory:
        raise NotImplementedError

    def committed(self, execution_id: str) -> bool:
        """True once the call's transaction (and so its execution record) committed."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the inspection store and drop the database."""

    def all_memories(self) -> list[Any]:
        memory = self.memory()
        stored: list[Any] = []
        page = memory.query({"limit": 10000}).output
        stored.extend(page.items)
        while page.next_cursor:  # MEM-QUERY-4 paging over all of it
            page = memory.query({"limit": 10000, "cursor": page.next_cursor}).output
            stored.extend(page.items)
        return stored


class SqliteTarget(Target):
    name = "sqlite"

    def __init__(self, folder: Path) -> None:
        self.path = folder / "crash.sqlite"
        self._store: SqliteMemoryStore | None = None

    def worker_env(self) -> dict[str, str]:
        return {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(self.path)}

    def prepare(self) -> None:
        SqliteMemoryStore(self.path).close()  # the schema
        with driver.connect(self.path) as conn:
            count_sqlite_effects(conn)
        conn.close()

    def effects(self) -> Counter[tuple[str, str]]:
        conn = driver.connect(self.path)
        try:
            return tally(conn.execute(effects_sql()).fetchall())
        finally:
            conn.close()

    def memory(self) -> Memory:
        self._store = self._store or SqliteMemoryStore(self.path)
        return create_memory(self._store)

    def committed(self, execution_id: str) -> bool:
        conn = driver.connect(self.path)
        try:
            sql = "SELECT 1 FROM executions WHERE execution_id = ?"
            return conn.execute(sql, (execution_id,)).fetchone() is not None
        finally:
            conn.close()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


class PostgresTarget(Target):
    name = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = f"t_{uuid.uuid4().hex}"
        self._store: Any = None
        self._probe: Any = None

    def worker_env(self) -> dict[str, str]:
        return {
            "DITTO_WORKER_MEMORY_POSTGRES_URL": self.url,
            "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA": self.schema,
        }

    def prepare(self) -> None:
        import psycopg

        from ditto_plugin_postgres import PostgresMemoryStore

        store = PostgresMemoryStore(self.url, schema=self.schema)
        store.migrate()
        store.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            count_postgres_effects(conn, self.schema)

    def effects(self) -> Counter[tuple[str, str]]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            return tally(conn.execute(effects_sql(self.schema)).fetchall())

    def memory(self) -> Memory:
        from ditto_plugin_postgres import PostgresMemoryStore

        self._store = self._store or PostgresMemoryStore(self.url, schema=self.schema)
        return create_memory(self._store)

    def committed(self, execution_id: str) -> bool:
        import psycopg

        if self._probe is None:
            self._probe = psycopg.connect(self.url, autocommit=True)
        sql = f'SELECT 1 FROM "{self.schema}".executions WHERE execution_id = %s'
        return self._probe.execute(sql, [execution_id]).fetchone() is not None

    def close(self) -> None:
        import psycopg

        if self._store is not None:
            self._store.close()
        if self._probe is not None:
            self._probe.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


class MysqlTarget(Target):
    name = "mysql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.database = f"t_{uuid.uuid4().hex}"
        self._store: Any = None
        self._probe: Any = None

    def worker_env(self) -> dict[str, str]:
        return {
            "DITTO_WORKER_MEMORY_MYSQL_URL": self.url,
            "DITTO_WORKER_MEMORY_MYSQL_DATABASE": self.database,
        }

    def _connect(self) -> Any:
        import pymysql

        from ditto_plugin_mysql.db import parse_url

        a = parse_url(self.url)
        return pymysql.connect(host=a.host, port=a.port, user=a.user, password=a.password,
                               autocommit=True)  # fmt: skip

    def _sql(self, statement: str, params: Any = None) -> list[Any]:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(statement, params)
                return list(cur.fetchall())
        finally:
            conn.close()

    def prepare(self) -> None:
        from ditto_plugin_mysql import MysqlMemoryStore

        store = MysqlMemoryStore(self.url, database=self.database)
        store.migrate()
        store.close()
        d = f"`{self.database}`"
        self._sql(f"CREATE TABLE {d}.effects (op VARCHAR(8) NOT NULL, id VARCHAR(64) NOT NULL)")
        for op in ("INSERT", "UPDATE"):
            self._sql(f"CREATE TRIGGER {d}.effects_{op.lower()} AFTER {op} ON {d}.memories "
                      f"FOR EACH ROW INSERT INTO {d}.effects VALUES ('{op}', NEW.id)")  # fmt: skip

    def effects(self) -> Counter[tuple[str, str]]:
        return tally(self._sql(f"SELECT op, id FROM `{self.database}`.effects"))

    def memory(self) -> Memory:
        from ditto_plugin_mysql import MysqlMemoryStore

        self._store = self._store or MysqlMemoryStore(self.url, database=self.database)
        return create_memory(self._store)

    def committed(self, execution_id: str) -> bool:
        # one open connection, as PostgresTarget's probe: a new one per poll takes ~0.1-0.3 s
        # here, longer than a call's COMMIT-to-ack window, so a kill aimed after the COMMIT
        # came after the ack (every autocommit SELECT reads the latest committed rows)
        if self._probe is None:
            self._probe = self._connect()
        with self._probe.cursor() as cur:
            cur.execute(
                f"SELECT 1 FROM `{self.database}`.executions WHERE execution_id = %s",
                [execution_id],
            )
            return cur.fetchone() is not None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        if self._probe is not None:
            self._probe.close()
        self._sql(f"DROP DATABASE IF EXISTS `{self.database}`")


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A prepared database of each kind, dropped afterwards."""
    chosen: Target
    if request.param == "mysql":
        chosen = MysqlTarget(mysql_url())
    elif request.param == "postgres":
        chosen = PostgresTarget(postgres_url())
    else:
        chosen = SqliteTarget(tmp_path)
    chosen.prepare()
    yield chosen
    chosen.close()


def start_worker(
    target: Target, redis_url: str, folder: Path, log: Path, new_session: bool = False
) -> subprocess.Popen[str]:
    """``ditto-worker worker --nodes writes --store <target>`` (one pool process) in
    ``folder`` (its ``ditto.yaml``, if any), logging to ``log`` (appended); with
    ``new_session`` in a process group of its own (``os.killpg`` kills the whole worker)."""
    env = {**os.environ, "DITTO_BROKER_URL": redis_url, **target.worker_env()}
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "writes",
             "--store", target.name, "--pool", "prefork", "--concurrency", "1",
             "--loglevel", "INFO"],
            cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            start_new_session=new_session,
        )  # fmt: skip


def redelivered(log: Path, node: str, eid: str, thread: threading.Thread) -> bool:
    """After a kill: True once the call is received again, False when the worker moves on
    to another call (the kill came after the acknowledgement) or the caller is done."""
    while True:
        received = RECEIVED.findall(log.read_text())
        if received.count((node, eid)) > 1:
            return True
        if received[-1] != (node, eid) or not thread.is_alive():
            return False
        time.sleep(0.01)


def aim(log: Path, aimed: set[str]) -> tuple[str, str]:
    """The node and id of the newest call the worker received, if not aimed at yet."""
    received = RECEIVED.findall(log.read_text())
    return received[-1] if received and received[-1][1] not in aimed else ("", "")


def test_sigkill_during_write_and_update_batches_loses_and_doubles_nothing(
    target: Target, redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(target, redis_url, tmp_path, log)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    writes: list[Any] = []
    updates: list[Any] = []
    # Kills still wanted: a WRITE and an UPDATE killed right after their COMMIT (before the
    # ack: the redelivered copy must replay), and one call killed mid-batch (rolled back:
    # the copy must apply it whole). Each is retried on later calls until it landed.
    wanted = {("MEMORY.WRITE", True), ("MEMORY.UPDATE", True), ("", False)}
    landed: list[tuple[str, bool]] = []
    kills = 0

    try:
        wait_ready(log, worker)

        def caller() -> None:
            n = 0
            while n < MIN_PAIRS or (n < MAX_PAIRS and wanted):
                drafts = [{"content": f"c-{n}-{i}", "metadata": {"batch": n}} for i in range(BATCH)]
                written = client.invoke("MEMORY.WRITE", {"memories": drafts}, timeout=120,
                                        execution_id=f"crash-w-{n}")  # fmt: skip
                writes.append(written)
                if written.status != "success":
                    return
                changes = [
                    {"id": m.id, "content": f"{m.content}-u", "metadata": {"batch": n, "u": 1}}
                    for m in written.output
                ]
                updates.append(
                    client.invoke("MEMORY.UPDATE", {"memories": changes}, timeout=120,
                                  execution_id=f"crash-u-{n}")
                )  # fmt: skip
                n += 1

        thread = threading.Thread(target=caller)
        thread.start()
        rng = random.Random(7)
        aimed: set[str] = set()
        while thread.is_alive() and wanted and kills < MAX_KILLS:
            node, eid = aim(log, aimed)
            if not eid:
                time.sleep(0.01)
                continue
            aimed.add(eid)  # one kill per call: its redelivery runs to the end
            if ("", False) in wanted and (eid == "crash-w-0" or (node, True) not in wanted):
                time.sleep(rng.uniform(0.0, 0.3))  # mid-batch
            elif (node, True) in wanted:
                deadline = time.monotonic() + EVENT_WAIT_S
                while not target.committed(eid) and time.monotonic() < deadline:
                    time.sleep(0.002)  # right after its COMMIT
            else:
                continue
            # looked up now, not before the wait: right after a kill that came after the
            # ack, the newest call is received while the killed process is still a zombie
            # (or just reaped), and a kill aimed at it reaches nothing
            pool = live_child(worker.pid)
            if pool is None:
                continue
            try:
                os.kill(pool, signal.SIGKILL)
            except ProcessLookupError:
                continue  # ended between the lookup and the kill: no kill landed
            kills += 1
            committed = target.committed(eid)  # the first run's COMMIT happened before
            if redelivered(log, node, eid, thread):  # the kill landed inside the call
                landed.append((node, committed))
                wanted.discard((node, True) if committed else ("", False))
        thread.join(300)
        assert not thread.is_alive()
    finally:
        client.close()
        stop_worker(worker)
    assert not wanted, (kills, landed, wanted)
    results = writes + updates
    assert [r.status for r in results] == ["success"] * len(results), [
        (r.status, r.error) for r in results if r.status != "success"
    ]
    pairs = len(updates)
    assert len(writes) == pairs >= MIN_PAIRS
    stored = target.all_memories()
    assert len(stored) == pairs * BATCH  # nothing lost, nothing doubled
    assert Counter(m.content for m in stored) == Counter(
        f"c-{n}-{i}-u" for n in range(pairs) for i in range(BATCH)
    )  # every record written once and updated
    assert all(m.metadata == {"batch": int(m.content.split("-")[1]), "u": 1} for m in stored)
    ids = {m.id for m in stored}
    assert {m.id for r in writes for m in r.output} == ids  # the replies name what exists
    by_id = {m.id: m for m in stored}
    assert all(by_id[m.id] == m for r in updates for m in r.output)  # as it is now
    effects = target.effects()
    assert effects == Counter(
        {**{("INSERT", i): 1 for i in ids}, **{("UPDATE", i): 1 for i in ids}}
    )
    after = sum(committed for _, committed in landed)
    print(
        f"\n{target.name}: {len(landed)} SIGKILLs of the pool process landed in a call "
        f"({after} after its COMMIT, {len(landed) - after} before; {kills} sent) during "
        f"{pairs} WRITE + {pairs} UPDATE batches of {BATCH}; {len(stored)} memories, each "
        "inserted once and updated once"
    )
