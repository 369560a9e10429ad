"""A made-up worker kind on a real Celery worker and real Redis (MEM-RT-1/2/3, issue 12).

``ditto-worker worker --nodes echo`` finds the ECHO kind only through its entry point (the
fixture folder on ``PYTHONPATH``); no line of the fleet's code changes. The same calls give
the same NodeResults embedded and on the fleet, and ``ctx.invoke`` sub-calls inherit
scope, deadline and cancellation across the broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
from ditto_worker.contracts import to_wire
from ditto_worker.fleet.failures import node_result_of
from ditto_worker.fleet.results import RESULT_KEY_PREFIX
from ditto_worker.runtime import CancelToken, Runtime
from ditto_worker.testing.servers import RedisServer
from tests.conftest import EVENT_WAIT_S, stop_worker

pytestmark = pytest.mark.integration

ECHO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_kind"


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.syspath_prepend(str(ECHO))
    env = _worker_env(redis_url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "echo", "--pool", "threads",
         "--concurrency", "10", "--hostname", f"echo-{os.getpid()}@localhost"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    runtime = create_ditto(config=config)
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while runtime.invoke("ECHO.SAY", {}, timeout=1).status != "success":
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            assert time.monotonic() < deadline, "the echo worker did not start"
        yield runtime
    finally:
        runtime.close()
        stop_worker(worker)  # type: ignore[arg-type]


def _worker_env(redis_url: str) -> dict[str, str]:
    path = os.pathsep.join([str(ECHO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": redis_url,
            "PYTHONPATH": path}  # fmt: skip


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items()
                if k not in ("executionId", "deadline")}  # fmt: skip
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_an_entry_point_kind_runs_on_the_fleet_as_embedded(
    fleet: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not fleet.embedded
    embedded = create_ditto(config=load_runtime_config(None, env={}))
    try:
        assert embedded.embedded
        for node, input in [
            ("ECHO.SAY", {"a": [1, "two", None, {"c": 3.5}]}),
            ("ECHO.WHOAMI", {}),
            ("ECHO.SLEEP", {"fail": "ECHO_REFUSED"}),
            ("ECHO.SLEEP", {"crash": "boom"}),
            ("ECHO.CALL", {"node": "ECHO.SAY", "input": {"b": 2}}),
            ("ECHO.NOPE", {}),
        ]:
            remote = fleet.invoke(node, input, timeout=10, scope={"tenant": "t", "user": "u"})
            local = embedded.invoke(node, input, timeout=10, scope={"tenant": "t", "user": "u"})
            assert _without_ids(to_wire(remote)) == _without_ids(to_wire(local)), node
    finally:
        embedded.close()


def test_sub_calls_inherit_scope_and_deadline_across_the_broker(fleet: Runtime) -> None:
    result = fleet.invoke("ECHO.CALL", {"node": "ECHO.WHOAMI"}, timeout=10,
                          scope={"tenant": "acme", "user": "a:b"})  # fmt: skip
    assert result.status == "success", result.error
    sub, caller = result.output["sub"], result.output["self"]
    assert sub["status"] == "success", sub
    assert sub["output"]["scope"] == caller["scope"] == {"tenant": "acme", "user": "a:b"}
    assert sub["output"]["deadline"] <= caller["deadline"]
    task = {"tenant": "acme", "user": "a:b", "space": "task:t:1"}  # issue 25: the space too
    in_task = fleet.invoke("ECHO.CALL", {"node": "ECHO.WHOAMI"}, timeout=10, scope=task)
    assert in_task.output["sub"]["output"]["scope"] == in_task.output["self"]["scope"] == task
    # issue 25: the operation id travels in its header; a sub-call names its own
    call = {"node": "ECHO.WHOAMI", "operationId": "op-sub"}
    with_op = fleet.invoke("ECHO.CALL", call, timeout=10, operation_id="op-1")
    assert with_op.output["self"]["operationId"] == "op-1"
    assert with_op.output["sub"]["output"]["operationId"] == "op-sub"
    bare = fleet.invoke("ECHO.CALL", {"node": "ECHO.WHOAMI"}, timeout=10, operation_id="op-2")
    assert bare.output["sub"]["output"]["operationId"] is None


def test_cancelling_the_caller_cancels_the_sub_call_on_the_fleet(
    fleet: Runtime, redis_client: redis.Redis
) -> None:
    token = CancelToken()
    threading.Timer(0.5, token.cancel).start()
    start = time.monotonic()
    outer = fleet.invoke("ECHO.CALL", {"node": "ECHO.SLEEP", "input": {"seconds": 30}},
                         timeout=40, cancel=token)  # fmt: skip
    assert outer.status == "cancelled" and outer.error and outer.error.code == "ECHO_CANCELLED"
    inner: dict[str, Any] | None = None
    while inner is None and time.monotonic() - start < 10:
        for key in redis_client.scan_iter(RESULT_KEY_PREFIX + "*"):
            meta = json.loads(redis_client.get(key) or "{}")
            result = node_result_of(meta.get("result")) or meta.get("result") or {}
            if isinstance(result, dict) and result.get("node") == "ECHO.SLEEP":
                inner = result
        time.sleep(0.05)
    assert inner is not None, "the sub-call never ended"
    assert inner["status"] == "cancelled" and inner["error"]["code"] == "ECHO_CANCELLED"
    assert time.monotonic() - start < 10  # not the sub-call's 30 s


def test_a_sub_call_ends_with_its_callers_deadline(fleet: Runtime) -> None:
    start = time.monotonic()
    outer = fleet.invoke("ECHO.CALL", {"node": "ECHO.SLEEP", "input": {"seconds": 30}},
                         timeout=1.0)  # fmt: skip
    assert outer.status == "timeout" and outer.error and outer.error.code == "ECHO_TIMEOUT"
    assert time.monotonic() - start < 8
    # the worker is free again at once: its 10 slots did not stay blocked for 30 s
    assert fleet.invoke("ECHO.SAY", {"x": 1}, timeout=5).status == "success"


def test_a_read_cancelled_in_the_queue_never_runs_without_a_flag_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker whose cancel subscription is known complete skips the per-call flag read
    # for a call without effects; a cancel announced while the call waits in the queue
    # still stops it before it starts (it never runs)
    from ditto_worker.fleet.cancellation import COVER_MARGIN_S

    # a Redis of its own: its command counts are this test's alone
    server = RedisServer().start()
    redis_url = server.url + "/0"
    redis_client = redis.Redis.from_url(redis_url)
    monkeypatch.syspath_prepend(str(ECHO))
    env = _worker_env(redis_url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "echo", "--pool", "threads",
         "--concurrency", "1", "--hostname", f"echo1-{os.getpid()}@localhost"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    runtime = create_ditto(config=load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={}))
    # no revoke broadcast: only the cancel flag's announcement can stop the queued call
    monkeypatch.setattr(runtime._invoker, "_revoke_later", lambda execution_id: None)
    try:
        while runtime.invoke("ECHO.SAY", {}, timeout=1).status != "success":
            assert worker.poll() is None
        time.sleep(COVER_MARGIN_S + 1)  # the watcher now vouches for calls sent from here on
        busy = threading.Thread(
            target=runtime.invoke, args=("ECHO.SLEEP", {"seconds": 2}), kwargs={"timeout": 10}
        )
        busy.start()
        time.sleep(0.3)  # the one slot is taken; the next call waits in echo.sleep
        exists_before = _calls(redis_client, "exists")
        token = CancelToken()
        threading.Timer(0.3, token.cancel).start()
        queued = runtime.invoke("ECHO.SLEEP", {"seconds": 0}, timeout=10, cancel=token)
        busy.join()
        assert queued.status == "cancelled"
        stored = _stored(redis_client, queued.execution_id)
        assert stored["status"] == "cancelled" and "before it started" in stored["error"]["message"]
        # one EXISTS: the watcher checking the announcement's flag; none per call
        assert _calls(redis_client, "exists") - exists_before == 1
    finally:
        runtime.close()
        stop_worker(worker)  # type: ignore[arg-type]
        redis_client.close()
        server.close()


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def _stored(client: redis.Redis, execution_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + EVENT_WAIT_S
    while time.monotonic() < deadline:
        raw = client.get(RESULT_KEY_PREFIX + execution_id)
        if raw:
            meta = json.loads(raw)
            result: dict[str, Any] = node_result_of(meta["result"]) or meta["result"]
            return result
        time.sleep(0.05)
    raise AssertionError("no stored result")


@pytest.mark.parametrize(("pool", "processes"), [("prefork", 2), ("threads", 1), ("solo", 1)])
def test_each_pool_process_opens_its_resources_before_serving(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: str, processes: int
) -> None:
    # MEM-RT-1: a definition's open hook runs in every process that serves it —
    # worker_process_init for prefork children and solo, worker_init for threads
    monkeypatch.syspath_prepend(str(ECHO))
    log = tmp_path / "opened.txt"
    closed_log = tmp_path / "closed.txt"
    env = {**_worker_env(redis_url), "ECHO_OPEN_LOG": str(log), "ECHO_CLOSE_LOG": str(closed_log)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "echo", "--pool", pool,
         "--concurrency", "2", "--hostname", f"open-{pool}-{os.getpid()}@localhost"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    runtime = create_ditto(config=load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={}))
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while runtime.invoke("ECHO.WHOAMI", {}, timeout=1).status != "success":
            assert worker.poll() is None and time.monotonic() < deadline
        opened = [int(line) for line in log.read_text().split()]
        if pool == "prefork":
            # ditto-worker worker's start-up check opens them once in a short-lived forked
            # process (issue 14 item 3), then each pool child; never the parent that forks
            opened = opened[1:]
        assert len(opened) == processes == len(set(opened))
        if pool == "prefork":
            assert worker.pid not in opened  # the children, never the parent that forks
        else:
            assert opened == [worker.pid]
        runtime.close()
        stop_worker(worker)  # type: ignore[arg-type]  # SIGTERM: a warm shutdown
        # ... and the close hook runs in every process that opened, once, at its shutdown
        closed = [int(line) for line in closed_log.read_text().split()]
        assert sorted(closed) == sorted(opened)
    finally:
        runtime.close()
        if worker.poll() is None:
            stop_worker(worker)  # type: ignore[arg-type]
