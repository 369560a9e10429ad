"""Workers that cannot serve do not start; two worker folders as two machines (issue 14
items 3 and 6).

Real ``ditto-worker worker`` processes on a real Redis:

* ``--store nosuch``, a plugin section with an unknown key, and a ``fleeet:`` typo exit
  non-zero with one line naming the problem, without ever announcing ``ready``;
* a retrieval worker whose store is missing (the SQLite file of another machine's path)
  waits ``fleet.startWaitS``, exits non-zero and creates nothing;
* the documented two-machine layout, as two folders: machine A runs the MEMORY workers
  with the store (``workers.memory.searchTarget`` set by its environment variable), machine
  B the RETRIEVAL worker, started first: it waits for A's store, then serves
  MEMORY.SEARCH's delegated RETRIEVAL.SEARCH calls. The store file is shared between the
  folders here; across real machines it would be a PostgreSQL or Qdrant store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.client import DittoClient
from tests.integration._procs import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_worker(
    folder: Path, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A worker that is expected to exit by itself (within 90 s)."""
    return subprocess.run(
        [sys.executable, "-m", "ditto_worker", "worker", *args], cwd=folder,
        env={**os.environ, **env}, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("yaml_text", "args", "code", "says"),
    [
        ("", ["--nodes", "reads", "--store", "nosuch"], 1,
         "worker: cannot start: MEMORY: no store plugin named 'nosuch'"),
        ("plugins:\n  sqlite:\n    bogus: 1\n", ["--nodes", "writes"], 1,
         "worker: cannot start: MEMORY: unknown sqlite store settings: bogus"),
        ("fleeet:\n  callTimeoutS: 3\n", ["--nodes", "reads"], 2,
         "unknown section 'fleeet'; did you mean 'fleet'?"),
        ("", ["--nodes", "reads", "-P", "threads"], 0, ""),  # the control: it starts
    ],
)  # fmt: skip
def test_a_worker_that_cannot_serve_exits_with_one_clear_line(
    yaml_text: str, args: list[str], code: int, says: str, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "ditto.yaml").write_text(yaml_text)
    env = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": "",
           "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.sqlite")}  # fmt: skip
    if code == 0:
        worker = WorkerProc(tmp_path, args, env)
        try:
            worker.wait_ready()
        finally:
            worker.stop()
        assert worker.proc.returncode == 0, worker.log()
        return
    out = run_worker(tmp_path, args, env)
    assert out.returncode == code, out
    assert says in out.stderr and "ready." not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr


def test_a_retrieval_worker_refuses_a_missing_store_and_creates_none(
    redis_url: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "not-here" / "memory.sqlite"
    started = time.monotonic()
    out = run_worker(tmp_path, ["--nodes", "retrieval"], {
        "DITTO_BROKER_URL": redis_url, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(elsewhere),
        "DITTO_START_WAIT_S": "2",
    })  # fmt: skip
    assert out.returncode == 1, out
    assert f"the sqlite store {elsewhere} does not exist" in out.stderr
    assert time.monotonic() - started >= 2  # it waited for the store
    assert not elsewhere.exists() and not elsewhere.parent.exists()
    assert not (tmp_path / ".ditto").exists()


def test_two_machines_memory_with_the_store_retrieval_elsewhere(
    redis_url: str, tmp_path: Path
) -> None:
    store = tmp_path / "shared" / "memory.sqlite"  # machine A's store (B reaches it here)
    machine_a, machine_b = tmp_path / "machine-a", tmp_path / "machine-b"
    machine_a.mkdir()
    machine_b.mkdir()
    common = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": "",
              "DITTO_WORKER_MEMORY_SQLITE_PATH": str(store)}  # fmt: skip
    # B starts first: it waits for the store A creates
    retrieval = WorkerProc(machine_b, ["--nodes", "retrieval"], {
        **common, "DITTO_START_WAIT_S": "60",
        "DITTO_WORKER_RETRIEVAL_TARGETS_MEMORIES_STORE": "sqlite",
    }, name="retrieval")  # fmt: skip
    memory = None
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    try:
        time.sleep(2)
        assert retrieval.proc.poll() is None and "ready." not in retrieval.log()
        assert not store.exists()
        memory = WorkerProc(machine_a, ["--nodes", "memory"], {
            **common, "DITTO_WORKER_MEMORY_SEARCH_TARGET": "memories",
        }, name="memory")  # fmt: skip
        memory.wait_ready()
        retrieval.wait_ready()
        wrote = client.invoke("MEMORY.WRITE", {"memories": [
            {"content": "Caroline went to the LGBTQ support group"},
            {"content": "Melanie painted a sunrise"},
        ]}, timeout=20)  # fmt: skip
        assert wrote.status == "success", wrote.error
        found = client.invoke("MEMORY.SEARCH", {"query": "support group", "limit": 5}, timeout=20)
    finally:
        client.close()
        retrieval.stop()
        if memory is not None:
            memory.stop()
    assert found.status == "success", found.error
    assert [r.memory.content for r in found.output][:1] == [
        "Caroline went to the LGBTQ support group"
    ]
    # the search ran on machine B: MEMORY.SEARCH on A delegated RETRIEVAL.SEARCH to B
    assert "Task RETRIEVAL.SEARCH[" in retrieval.log()
    assert "Task RETRIEVAL.SEARCH[" not in memory.log() and "Task MEMORY.SEARCH[" in memory.log()
