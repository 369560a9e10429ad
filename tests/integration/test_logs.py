"""Logs as an operator reads them (issue 14 item 7): one timestamped format, JSON on request,
one line per outage.

* A real worker with ``fleet.logFormat: json`` and ``--logfile``: every line of the file is
  one JSON object with a UTC timestamp — Celery's lines and ours, main and pool processes.
* A client calling through a 6 s Redis outage (the broker and result backend gone): the
  result listener logs the outage once and its end once, and repeated send failures are
  cut to one line per window, where the listener alone used to log ten lines a second.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.client import DittoClient
from tests.conftest import EVENT_WAIT_S
from tests.integration._procs import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_worker_logs_json_lines_with_timestamps(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "ditto.yaml").write_text("fleet:\n  logFormat: json\n")
    logfile = tmp_path / "worker.json.log"
    env = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": "",
           "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.sqlite")}  # fmt: skip
    worker = WorkerProc(tmp_path, ["--nodes", "reads", "-c", "1", "--logfile", str(logfile)], env)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while not (logfile.exists() and "ready." in logfile.read_text()):
            assert worker.proc.poll() is None, worker.log()
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        assert client.invoke("MEMORY.GET", {"keys": ["k"]}, timeout=10).status == "success"
    finally:
        client.close()
        worker.stop()
    lines = logfile.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(STAMP.fullmatch(r["ts"]) for r in records)
    messages = " ".join(r["message"] for r in records)
    assert "ready." in messages and "received" in messages and "succeeded in" in messages
    assert {r["process"] for r in records} >= {"MainProcess"}
    assert "-------------- " not in worker.log()  # no banner among JSON lines (--quiet)


OUTAGE = textwrap.dedent(
    """
    import sys, threading, time
    from ditto_worker.cli.logs import configure_logging
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet.client import DittoClient
    from ditto_worker.testing.servers import RedisServer

    configure_logging("WARNING", "text")
    server = RedisServer().start()
    url = server.url + "/0"
    client = DittoClient.from_fleet(FleetSettings(broker_url=url, result_backend=url))
    stop = time.time() + 10

    def calls():
        while time.time() < stop:
            client.invoke("MEMORY.GET", {"keys": ["k"]}, timeout=0.3)

    threads = [threading.Thread(target=calls) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1)
    server.stop()
    print("OUTAGE-START", file=sys.stderr, flush=True)
    time.sleep(6)
    server.start()
    print("OUTAGE-END", file=sys.stderr, flush=True)
    for thread in threads:
        thread.join()
    time.sleep(1.5)
    client.close()
    server.close()
    """
)


def test_a_redis_outage_is_one_line_not_a_flood(tmp_path: Path) -> None:
    script = tmp_path / "outage.py"
    script.write_text(OUTAGE)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    assert "OUTAGE-START" in lines and "OUTAGE-END" in lines, out.stderr[-3000:]
    logged = [line for line in lines if STAMP.match(line)]
    lost = [line for line in logged if "result listener lost Redis" in line]
    back = [line for line in logged if "result listener reconnected" in line]
    assert len(lost) == 1 and len(back) == 1, logged
    assert len(lines) < 25, "\n".join(lines)  # was ~10 lines a second of outage
    assert all(STAMP.match(line) or line.startswith(("OUTAGE", "Traceback", " ")) for line in lines)
