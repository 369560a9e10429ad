"""The Procfile as a newcomer runs it: ``honcho start``, the demo, per-node counts in Flower.

honcho starts every Procfile line — the worker groups, the retrieval, context and infer
workers, Flower on a free port — exactly as written, against a Redis started apart (as the
docs/fleet.md says: stopping the fleet must not stop its broker); only the environment differs
(ports, broker URL, fresh credentials, a SQLite file of the test's own, the context cache
on database 1, the infer worker pointed at a loopback fake endpoint). The demo then runs
through the fleet with ``--broker``, and Flower's ``/metrics`` (with the credentials; 401
without) must count every MEMORY node's succeeded calls, as many as the demo made, then the
CONTEXT and INFER calls made after it.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ditto_worker.config import FleetSettings
from ditto_worker.fleet.celery_app import fleet_nodes
from ditto_worker.fleet.client import DittoClient
from ditto_worker.testing.servers import RedisServer
from tests.conftest import missing_service
from tests.unit._fake_chat import FakeChatServer, reply_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = REPO / "data" / "locomo" / "30.json"
NODES = ["MEMORY.WRITE", "MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH",
         "MEMORY.UPDATE", "MEMORY.DELETE"]  # fmt: skip
WORKERS = ["reads.1", "writes.1", "search.1", "retrieval.1", "context.1", "infer.1"]  # = nodes
READY_S = 90.0
# the longest wait for an event after the fleet is up (events counted, queues listed): a
# bound for a busy machine (load 10 on 2 cores), not an expected time
EVENT_S = 120.0
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, auth: str | None = None, timeout_s: float = 10.0) -> tuple[int, str]:
    """Status and body of a GET; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def succeeded_per_node(metrics: str) -> dict[str, float]:
    """``flower_events_total{type="task-succeeded"}`` summed by task (node id) over workers."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "flower_events_total" and sample.labels["type"] == "task-succeeded":
                task = sample.labels["task"]
                counts[task] = counts.get(task, 0.0) + sample.value
    return counts


def online_workers(metrics: str) -> set[str]:
    """honcho process names (``reads.1`` …) of the workers Flower has seen online."""
    return {
        sample.labels["worker"].split("@")[0]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "flower_worker_online" and sample.value == 1.0
    }


@dataclass
class Fleet:
    broker_url: str
    flower_url: str
    credentials: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    gateway_port: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
        """Poll ``probe`` every 0.25 s until it returns a value; fail after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"honcho exited while waiting for {what}:\n{self.log()}"
            )
            try:
                value = probe()
            except (OSError, urllib.error.URLError):
                value = None  # not listening yet
            if value is not None:
                return value
            time.sleep(0.25)
        pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}:\n{self.log()}")

    def queues_drained(self, queues: int) -> str | None:
        """Flower's ``/api/queues/length`` once it lists ``queues`` queues, all empty.

        Flower lists the queues of the workers its inspections reached, and inspects only
        when it starts or is asked to: under load a busy worker misses a round (a CI run
        waited 30 s for a round that never came). So each poll asks for a fresh round until
        every queue is listed (a worker's answer is kept across rounds)."""
        status, body = http_get(f"{self.flower_url}/api/queues/length", self.credentials)
        assert status == 200
        if body.count('"messages": 0') == queues:
            return body
        try:  # answers once the round is over; the round goes on if this read times out
            http_get(f"{self.flower_url}/api/workers?refresh=1", self.credentials, timeout_s=1.0)
        except OSError:
            pass
        return None

    def metrics(self) -> str:
        status, body = http_get(f"{self.flower_url}/metrics", self.credentials)
        assert status == 200, (status, body[:200])
        return body


def _stop(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """SIGTERM honcho (it stops its children, SIGKILL after 5 s); then kill any leftover."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    # each Procfile process runs in its own session (honcho's start_new_session)
    for pid in re.findall(r"started \(pid=(\d+)\)", log_path.read_text(errors="replace")):
        try:
            os.killpg(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    """The infer worker's endpoint: a loopback fake (the real model: test_infer.py)."""
    with FakeChatServer(reply_script("fine")) as server:
        yield server


@pytest.fixture
def fleet(tmp_path: Path, chat: FakeChatServer) -> Iterator[Fleet]:
    """``honcho start`` with the repo's Procfile (and a Redis of its own, started apart);
    yields once Flower sees every worker."""
    if shutil.which("redis-server") is None:
        missing_service("no redis-server on PATH")
    redis = RedisServer().start()
    flower_port = next(p for p in iter(free_port, None) if p != redis.port)
    gateway_port = next(p for p in iter(free_port, None) if p not in (redis.port, flower_port))
    credentials = f"ops:{secrets.token_urlsafe(12)}"
    broker_url = f"{redis.url}/0"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DITTO_BROKER_URL": broker_url,
        "DITTO_WORKER_CONTEXT_REDIS_URL": f"{redis.url}/1",
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "fleet.sqlite"),
        "FLOWER_PORT": str(flower_port),
        "GATEWAY_PORT": str(gateway_port),
        "FLOWER_BASIC_AUTH": credentials,
        # Flower's inspect waits 1 s for replies by default: a busy worker misses that
        "FLOWER_INSPECT_TIMEOUT": "5000",
        # as `scripts/llm.sh start` would; unset, the infer line starts the local model
        "DITTO_WORKER_INFER_BASE_URL": chat.base_url,
        "DITTO_WORKER_INFER_MODEL": "fake-model",
    }
    log_path = tmp_path / "honcho.log"
    with log_path.open("wb") as log:
        # -d: honcho reads .env from the (empty) tmp folder, never a developer's .env;
        # cwd: the repo, so workers load its ditto.yaml as docs/fleet.md says
        proc = subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "--no-colour",
             "-f", str(REPO / "Procfile"), "-d", str(tmp_path)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        fleet = Fleet(broker_url, f"http://127.0.0.1:{flower_port}", credentials, proc, log_path,
                      gateway_port)  # fmt: skip
        try:
            fleet.wait_for(
                f"Flower to see {', '.join(WORKERS)} online",
                lambda: True if set(WORKERS) <= online_workers(fleet.metrics()) else None,
                READY_S,
            )
            yield fleet
        finally:
            _stop(proc, log_path)
            redis.close()


def demo_calls(stdout: str) -> dict[str, int]:
    """The demo's per-node table: ``MEMORY.GET  <calls>  <p50>  <p95>`` -> calls."""
    rows = re.findall(r"^(MEMORY\.[A-Z]+)\s+(\d+)\s+[\d.]+\s+[\d.]+$", stdout, re.M)
    return {node: int(calls) for node, calls in rows}


def test_honcho_fleet_runs_the_demo_and_flower_counts_every_node(fleet: Fleet) -> None:
    url = fleet.flower_url
    # /metrics and the API need the credentials (Flower 2.2.0 alone serves /metrics to all)
    for path in ["/metrics", "/api/queues/length", "/api/workers"]:
        assert http_get(url + path)[0] == 401, path
        assert http_get(url + path, "ops:wrong")[0] == 401, path
    assert http_get(url + "/healthcheck") == (200, "OK")  # liveness only, no data
    # the gateway line: up and ready over the fleet's broker, failing closed without tokens
    gateway = f"http://127.0.0.1:{fleet.gateway_port}"

    def ready() -> bool | None:
        try:
            return http_get(gateway + "/readyz")[0] == 200 or None
        except OSError:
            return None

    fleet.wait_for("the gateway line to be ready", ready, EVENT_S)
    assert http_get(gateway + "/v1/nodes")[0] == 401

    demo = subprocess.run(
        [sys.executable, "-m", "ditto_worker", "demo", "--broker", fleet.broker_url,
         "--conversation", str(CONVERSATION)],
        cwd=fleet.log_path.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "redis broker" in demo.stdout and "369 turns written" in demo.stdout
    calls = demo_calls(demo.stdout)
    assert sorted(calls) == sorted(NODES) and all(n > 0 for n in calls.values()), demo.stdout

    # task-succeeded events reach Flower shortly after the results: wait for all of them
    def all_counted() -> dict[str, float] | None:
        counts = succeeded_per_node(fleet.metrics())
        return counts if {node: int(counts.get(node, 0)) for node in NODES} == calls else None

    counts = fleet.wait_for("Flower to count every demo call", all_counted, EVENT_S)
    assert all(counts[node] > 0 for node in NODES), counts

    # the context and infer lines serve their queues, and Flower counts their calls
    client = DittoClient.from_fleet(FleetSettings(broker_url=fleet.broker_url))
    try:
        scope = {"tenant": "t", "user": "u"}
        item = {"id": "a", "sourceNode": "MEMORY.SEARCH", "content": "x"}
        others = [
            client.invoke("CONTEXT.UPDATE", {"name": "n", "ingress": [item]}, scope=scope),
            client.invoke("CONTEXT.LOAD", {"name": "n"}, scope=scope),
            client.invoke("INFER.GENERATE", {"messages": [{"role": "user", "content": "hi"}]}),
        ]
    finally:
        client.close()
    assert [r.status for r in others] == ["success"] * 3, [r.error for r in others]
    assert others[1].output.found and others[2].output.text == "fine"
    wanted = {"CONTEXT.UPDATE": 1, "CONTEXT.LOAD": 1, "INFER.GENERATE": 1}

    def others_counted() -> bool | None:
        counts = succeeded_per_node(fleet.metrics())
        return True if {n: int(counts.get(n, 0)) for n in wanted} == wanted else None

    fleet.wait_for("Flower to count the CONTEXT and INFER calls", others_counted, EVENT_S)

    queues = len(fleet_nodes())  # every installed worker kind's queue, all drained

    body = fleet.wait_for(
        "Flower to list every queue drained", lambda: fleet.queues_drained(queues), EVENT_S
    )
    assert "retrieval.search" in body

    # our series on the same /metrics: calls by node, status and code; queue lengths
    client = DittoClient.from_fleet(FleetSettings(broker_url=fleet.broker_url))
    try:
        bad = client.invoke("MEMORY.QUERY", {"limit": 0}, timeout=EVENT_S)
        assert bad.status == "failed" and bad.error is not None
    finally:
        client.close()

    def ditto_series() -> dict[tuple[str, ...], float] | None:
        series = {}
        for family in text_string_to_metric_families(fleet.metrics()):
            for sample in family.samples:
                if sample.name.startswith("ditto_"):
                    key = (sample.name, *(f"{k}={v}" for k, v in sorted(sample.labels.items())))
                    series[key] = sample.value
        failed = ("ditto_node_calls_total", "code=INVALID_INPUT", "node=MEMORY.QUERY",
                  "status=failed")  # fmt: skip
        return series if failed in series else None

    series = fleet.wait_for("the failed call in ditto_node_calls_total", ditto_series, EVENT_S)
    for node in NODES:
        key = ("ditto_node_calls_total", "code=", f"node={node}", "status=success")
        assert series[key] == calls[node], (node, series.get(key))
    assert series[("ditto_broker_up",)] == 1.0
    waiting = {k: v for k, v in series.items() if k[0] == "ditto_queue_messages"}
    assert len(waiting) == queues and set(waiting.values()) == {0.0}
    assert ("ditto_queue_messages", "node=MEMORY.GET", "queue=memory.get") in waiting
    # the failed call is a Celery failure too (NodeFailed): Flower's own failure count
    failed_events = sum(
        sample.value
        for family in text_string_to_metric_families(fleet.metrics())
        for sample in family.samples
        if sample.name == "flower_events_total"
        and sample.labels["type"] == "task-failed"
        and sample.labels["task"] == "MEMORY.QUERY"
    )
    assert failed_events == 1
