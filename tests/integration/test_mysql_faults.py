"""MySQL store faults (issue 27 item 3): the test's own MariaDB server (``scripts/mysql.sh``
on its own port) stopped and started again, between calls and in the middle of a WRITE
batch. Tested on MariaDB 10.11.

For each: the NodeResult's status and exact code (``MEMORY_BACKEND_ERROR``), the time it
took, a message with no URL, host, port, password, SQL or driver text (the scan of
:mod:`tests.integration.test_storage_faults`), nothing of a failed batch written, and the
same store object serving again once the server is back.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from ditto_worker import MemoryError, create_memory
from ditto_worker.memory.core import Memory
from ditto_worker.testing.services import services_required
from tests.conftest import REPO, missing_service
from tests.integration.test_storage_faults import (
    Scan,
    assert_serves,
    node_calls,
    run_failing,
    scan,
    seed,
)

pytestmark = pytest.mark.integration

__all__ = ["scan"]  # the fixture, used by the tests below


class OwnMysql:
    """A server of ``scripts/mysql.sh`` on its own port that a test may pause."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        self.port = int(port)
        self.password = f"fault-{uuid.uuid4().hex[:12]}"
        self.env = {**os.environ, "DITTO_MYSQL_PORT": port, "DITTO_MYSQL_PASSWORD": self.password}
        self.url = ""

    def script(self, command: str) -> str:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "mysql.sh"), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def start(self) -> None:
        self.url = self.script("start").strip().split("=", 1)[1]


@pytest.fixture(scope="module")
def own_mysql() -> Iterator[OwnMysql]:
    if shutil.which("mariadbd") is None and not services_required():
        missing_service("mariadbd is not installed (bash scripts/mysql.sh start installs it)")
    server = OwnMysql()
    try:
        server.start()
    except AssertionError as exc:
        missing_service(f"scripts/mysql.sh could not start a server: {exc}")
    yield server
    server.script("stop")


@pytest.fixture
def mysql_memory(own_mysql: OwnMysql, scan: Scan) -> Iterator[tuple[Memory, Any]]:
    from ditto_plugin_mysql import MysqlMemoryStore

    store = MysqlMemoryStore(
        own_mysql.url, database=f"f_{uuid.uuid4().hex[:16]}", pool_max_size=2,
        connect_timeout_s=1.0,
    )  # fmt: skip
    parts = urlsplit(own_mysql.url)
    scan.secret(own_mysql.url, parts.password, parts.hostname, f":{parts.port}", str(parts.port))
    scan.secret(store.database, "pymysql", "mariadb", "2003", "2013")
    yield create_memory(store), store
    store.close()


def test_mysql_server_stopped_then_started(
    own_mysql: OwnMysql, mysql_memory: tuple[Memory, Any], scan: Scan
) -> None:
    memory, store = mysql_memory
    record_id, seeded = seed(memory)
    own_mysql.script("pause")
    try:
        run_failing(scan, memory, node_calls("down", record_id), "MEMORY_BACKEND_ERROR", 3.0)
        with pytest.raises(MemoryError) as raised:  # an exception that reaches a caller
            store.migrate()
        scan.add(str(raised.value))
        assert "not reachable" in str(raised.value)
    finally:
        own_mysql.script("resume")
    assert_serves(memory, record_id, seeded, "down")


def test_mysql_server_stopped_in_the_middle_of_a_batch(
    own_mysql: OwnMysql,
    mysql_memory: tuple[Memory, Any],
    scan: Scan,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the batch's rows and terms are inserted, then the server stops before COMMIT
    from ditto_plugin_mysql import keywords

    memory, _ = mysql_memory
    record_id, seeded = seed(memory)
    inserted, stopped = threading.Event(), threading.Event()
    adjust = keywords.adjust

    def pause_here(*args: Any) -> None:
        if not inserted.is_set():
            inserted.set()
            assert stopped.wait(120)
        adjust(*args)

    monkeypatch.setattr(keywords, "adjust", pause_here)
    batch = {"memories": [{"key": f"mid-{i}", "content": f"hello {i}"} for i in range(500)]}
    results: list[Any] = []
    writer = threading.Thread(target=lambda: results.append(memory.write(batch)))
    writer.start()
    try:
        assert inserted.wait(60)
        own_mysql.script("pause")
        stopped.set()
        writer.join(30)
        assert not writer.is_alive()
        (result,) = results
        assert result.status == "failed" and result.error is not None
        assert result.error.code == "MEMORY_BACKEND_ERROR", result.error
        scan.add(result.error.message)
    finally:
        stopped.set()
        own_mysql.script("resume")
    monkeypatch.setattr(keywords, "adjust", adjust)
    got = memory.get({"keys": [f"mid-{i}" for i in range(500)]})
    assert got.status == "success" and got.output == []  # nothing half written
    started = time.monotonic()
    assert_serves(memory, record_id, seeded, "mid")
    assert time.monotonic() - started < 10
