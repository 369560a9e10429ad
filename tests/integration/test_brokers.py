"""Other brokers (issue 14 item 6): RabbitMQ (``amqp://``) and Redis Sentinel, on loopback.

* RabbitMQ: Debian's ``rabbitmq-server``, a node of the test's own (free port, temporary
  folder). A worker on ``amqp://`` with a Redis result backend answers calls; without a
  result backend the configuration is refused (exit 2, naming ``fleet.resultBackend``); a
  broker that does not answer makes the worker exit 1 within ``fleet.startWaitS`` (it
  used to retry for ~45 minutes, and ``worker_main`` exited 0).
* Sentinel: a Redis master and ``redis-server --sentinel`` monitoring it. Broker and result
  backend are ``sentinel://`` URLs with ``fleet.sentinelMasterName`` (env
  ``DITTO_SENTINEL_MASTER_NAME``): calls work, a call nobody serves times out at its
  timeout, and with the master gone a call ends within its timeout instead of raising after
  Celery's 20 reconnect attempts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ditto_worker.config import load_runtime_config
from ditto_worker.fleet.client import DittoClient
from ditto_worker.testing.servers import RedisServer, free_port
from tests.conftest import EVENT_WAIT_S, missing_service
from tests.integration._procs import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RABBIT = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port} after {timeout_s} s")


@pytest.fixture(scope="module")
def rabbitmq_url() -> Iterator[str]:
    """``amqp://guest:guest@127.0.0.1:PORT//`` of a RabbitMQ node of this module's own."""
    if not os.path.exists(RABBIT):
        missing_service("rabbitmq-server (apt-get install rabbitmq-server)")
    folder = tempfile.mkdtemp(prefix="ditto-rabbit-")
    port = free_port()
    epmd_before = subprocess.run(["pgrep", "-x", "epmd"], capture_output=True).returncode == 0
    Path(folder, "enabled_plugins").write_text("[].\n")
    env = {
        **os.environ, "HOME": folder, "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()), "RABBITMQ_NODENAME": f"ditto{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_MNESIA_BASE": f"{folder}/mnesia",
        "RABBITMQ_LOG_BASE": f"{folder}/log", "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_ENABLED_PLUGINS_FILE": f"{folder}/enabled_plugins",
        "RABBITMQ_CONFIG_FILE": f"{folder}/rabbitmq",
    }  # fmt: skip
    proc = subprocess.Popen([RABBIT], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        _wait_port(port, proc, 90)
        yield f"amqp://guest:guest@127.0.0.1:{port}//"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if not epmd_before:  # the Erlang port mapper RabbitMQ started for itself
            subprocess.run(["epmd", "-kill"], capture_output=True, env=env)
        shutil.rmtree(folder, ignore_errors=True)


def worker_env(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.sqlite"), **env}


def test_amqp_broker_with_a_redis_result_backend(
    rabbitmq_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = {"DITTO_BROKER_URL": rabbitmq_url, "DITTO_RESULT_BACKEND": redis_url}
    worker = WorkerProc(tmp_path, ["--nodes", "memory", "-c", "1"], worker_env(tmp_path, **env))
    client = DittoClient.from_fleet(load_runtime_config(None, env=env).fleet)
    try:
        worker.wait_ready()
        wrote = client.invoke("MEMORY.WRITE", {"memories": [{"key": "k", "content": 1}]},
                              timeout=20)  # fmt: skip
        read = client.invoke("MEMORY.GET", {"keys": ["k"]}, timeout=20)
        late = client.invoke("RETRIEVAL.SEARCH", {"query": "x", "target": {"name": "memories"}},
                             timeout=2)  # nobody serves it  # fmt: skip
    finally:
        client.close()
        worker.stop()
    assert wrote.status == "success" and read.status == "success", (wrote, read)
    assert [m.content for m in read.output] == [1]
    assert late.status == "timeout"
    assert "Connected to amqp://guest:**@127.0.0.1" in worker.log()


def test_amqp_needs_a_result_backend_and_a_broker_that_answers(tmp_path: Path) -> None:
    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "reads"],
            cwd=tmp_path, env={**os.environ, **worker_env(tmp_path, **env)},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    no_backend = run(DITTO_BROKER_URL=closed, DITTO_RESULT_BACKEND="")
    assert no_backend.returncode == 2, no_backend
    assert "fleet.resultBackend / DITTO_RESULT_BACKEND is required" in no_backend.stderr
    started = time.monotonic()
    down = run(DITTO_BROKER_URL=closed, DITTO_RESULT_BACKEND="redis://127.0.0.1:1/0",
               DITTO_START_WAIT_S="2")  # fmt: skip
    assert down.returncode == 1, down
    assert "worker: cannot start: the broker does not answer after 2 s" in down.stderr
    assert time.monotonic() - started < 60 and "Traceback" not in down.stderr


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[RedisServer, int]]:
    """A Redis master and one sentinel monitoring it as ``ditto``."""
    master = RedisServer().start()
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor ditto 127.0.0.1 {master.port} 1\n"
        "sentinel down-after-milliseconds ditto 60000\n"
    )
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", str(conf),
                             "--sentinel"], stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + EVENT_WAIT_S
        while True:
            try:
                if client.sentinel_get_master_addr_by_name("ditto"):
                    break
            except redis.ConnectionError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        client.close()
        yield master, port
    finally:
        proc.terminate()
        proc.wait(10)
        master.close()


def test_sentinel_broker_and_backend(sentinel: tuple[RedisServer, int], tmp_path: Path) -> None:
    master, port = sentinel
    env = {"DITTO_BROKER_URL": f"sentinel://127.0.0.1:{port}/0",
           "DITTO_RESULT_BACKEND": f"sentinel://127.0.0.1:{port}/1",
           "DITTO_SENTINEL_MASTER_NAME": "ditto"}  # fmt: skip
    worker = WorkerProc(tmp_path, ["--nodes", "reads", "-c", "1"], worker_env(tmp_path, **env))
    client = DittoClient.from_fleet(load_runtime_config(None, env=env).fleet)
    try:
        worker.wait_ready()
        read = client.invoke("MEMORY.GET", {"keys": ["k"]}, timeout=10)
        started = time.monotonic()
        unserved = client.invoke("MEMORY.WRITE", {"memories": []}, timeout=2)
        unserved_s = time.monotonic() - started
        master.stop()  # the master is gone; the sentinel still answers
        started = time.monotonic()
        gone = client.invoke("MEMORY.GET", {"keys": ["k"]}, timeout=3)
        gone_s = time.monotonic() - started
    finally:
        client.close()
        worker.stop()
    assert read.status == "success", read.error
    assert unserved.status == "timeout" and unserved_s < 4, unserved_s
    assert gone.status in ("failed", "timeout") and gone_s < 5, (gone, gone_s)
    assert "ready." in worker.log()
