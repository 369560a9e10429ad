"""Shared fixtures: a real Redis for integration tests, and a real in-thread Celery worker.

Redis comes from ``DITTO_TEST_REDIS_URL`` (``scripts/test.sh`` and ``.ci/run`` start one);
without it, a throwaway ``redis-server`` is started on a free loopback port when the binary
exists. Under pytest-xdist (``-n``; ``scripts/test.sh`` runs that way) every worker starts
its own throwaway ``redis-server`` instead: Redis database numbers would separate keys and
queues, but not what is server-wide — pub/sub channels (result and cancel channels),
``CLIENT LIST``, ``INFO`` — which several tests count. A missing Redis skips integration
tests locally and fails them when ``DITTO_REQUIRE_SERVICES=1`` (set by ``scripts/test.sh``)
or ``CI=true`` (STYLE.md; :mod:`ditto_worker.testing.services`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis

from ditto_worker.config import FleetSettings, RuntimeConfig, load_runtime_config
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.launch import create_worker_app
from ditto_worker.testing import services
from ditto_worker.testing.servers import RedisServer, stop_process

REPO = Path(__file__).resolve().parent.parent
TEST_DB = 3  # integration tests use this Redis database, flushed before each test
# The longest wait for an event (a call served, a log line, a process up): a bound that holds
# on a busy machine (load 10+ on 2 cores), not the time it is expected to take.
EVENT_WAIT_S = 120.0


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The event loop of the ``anyio``-marked tests: asyncio only.

    The gateway runs on uvicorn, which is asyncio; the runtime's ``ainvoke`` awaits asyncio
    futures. anyio >= 4.16 otherwise runs every such test on each installed backend, and on
    a machine with trio installed the gateway test answered 500 under trio.
    """
    return "asyncio"


# The files that take longest (``pytest --durations`` and per-file sums under ``-n 3``, issue
# 34 item 5), longest first. ``--dist loadfile`` runs each file whole on one worker, in the
# order collected: a long file collected late ran on alone after the others had finished
# (the local model's task tests, the LangGraph and LangChain suites), so these go first.
LONGEST_FIRST = (
    "tests/integration/test_memory_tasks_model.py",
    "tests/integration/test_langgraph_suites.py",
    "tests/integration/test_langchain_suites.py",
    "tests/integration/test_memory_tasks_converge_property.py",
    "tests/integration/test_deadline_stress.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_gateway_http.py",
    "tests/integration/test_celery_tools.py",
    "tests/integration/test_infer.py",
    "tests/integration/test_runtime_fleet.py",
    "tests/integration/test_mcp_stdio.py",
    "tests/integration/test_scope_isolation.py",
    "plugins/milvus/tests/test_conformance.py",
    "plugins/mysql/tests/test_vectors.py",
    "tests/integration/test_crash_redelivery.py",
    "plugins/postgres/tests/test_vectors.py",
    "plugins/mysql/tests/test_conformance.py",
)


@pytest.hookimpl(trylast=True)  # after the root conftest.py has marked its serial items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the run's files: :data:`LONGEST_FIRST`, then the rest as collected, then the
    files holding a ``serial`` test (it waits for every running test to end, and holds
    back the tests after it meanwhile: at the end it holds back nothing). The order within
    a file is kept; every xdist worker collects the same order."""
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    files = {item: _relative(item) for item in items}
    serial = {files[item] for item in items if item.get_closest_marker("serial")}

    def key(item: pytest.Item) -> tuple[int, int]:
        path = files[item]
        if path in serial:
            return (2, 0)
        return (0, rank[path]) if path in rank else (1, 0)

    items.sort(key=key)


def _relative(item: pytest.Item) -> str:
    """``item``'s file relative to the repository, with ``/``."""
    try:
        return item.path.relative_to(REPO).as_posix()
    except ValueError:
        return item.path.as_posix()


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = EVENT_WAIT_S) -> None:
    """Poll ``condition`` every 0.05 s until it is truthy; fail naming ``what`` after
    ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def missing_service(reason: str) -> NoReturn:
    """Skip locally; fail when ``DITTO_REQUIRE_SERVICES=1`` or ``CI=true``
    (:func:`ditto_worker.testing.services.missing_service`)."""
    services.missing_service(reason)


def postgres_url() -> str:
    """``DITTO_TEST_POSTGRES_URL`` of a server that answers (skip/fail without one)."""
    url = os.environ.get("DITTO_TEST_POSTGRES_URL", "")
    if not url:
        missing_service('no DITTO_TEST_POSTGRES_URL (eval "$(bash scripts/postgres.sh start)")')
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error:
        missing_service("the PostgreSQL server of DITTO_TEST_POSTGRES_URL is not answering")
    return url


def mysql_url() -> str:
    """``DITTO_TEST_MYSQL_URL`` of a server that answers (skip/fail without one)."""
    url = os.environ.get("DITTO_TEST_MYSQL_URL", "")
    if not url:
        missing_service('no DITTO_TEST_MYSQL_URL (eval "$(bash scripts/mysql.sh start)")')
    import pymysql

    from ditto_plugin_mysql.db import parse_url

    address = parse_url(url)
    try:
        pymysql.connect(
            host=address.host, port=address.port, user=address.user,
            password=address.password, connect_timeout=3,
        ).close()  # fmt: skip
    except pymysql.MySQLError:
        missing_service("the MySQL server of DITTO_TEST_MYSQL_URL is not answering")
    return url


def stop_worker(proc: subprocess.Popen[str]) -> None:
    """SIGTERM a worker subprocess (warm shutdown) and wait; SIGKILL after 30 s."""
    stop_process(proc)


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a real Redis server (no database number): this
    xdist worker's own, else ``DITTO_TEST_REDIS_URL``'s, else a throwaway one."""
    url = os.environ.get("DITTO_TEST_REDIS_URL")
    if url and not os.environ.get("PYTEST_XDIST_WORKER"):
        yield url.rstrip("/")
        return
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as exc:
        server.close()
        missing_service(f"a throwaway Redis for the tests: {exc}")
    yield server.url
    server.close()


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A flushed Redis database for one test: ``redis://…/3``."""
    url = f"{redis_server_url}/{TEST_DB}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError:
        missing_service(f"Redis at {redis_server_url} is not answering")
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain redis-py client on the test database (to inspect queues)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


FLEET_KEYS = {"maxInputBytes", "callTimeoutS", "visibilityTimeoutS"}


def fleet_config(broker: str, **settings: Any) -> RuntimeConfig:
    """A RuntimeConfig pointing at ``broker`` (also the result backend); ``settings`` go
    to ``fleet`` (its keys) or ``workers.memory``."""
    fleet = {"brokerUrl": broker, "resultBackend": broker}
    fleet |= {k: v for k, v in settings.items() if k in FLEET_KEYS}
    memory = {k: v for k, v in settings.items() if k not in FLEET_KEYS}
    data: dict[str, Any] = {"fleet": fleet}
    if memory:
        data["workers"] = {"memory": memory}
    return load_runtime_config(data, env={})


StartWorker = Callable[..., AbstractContextManager[Any]]


@pytest.fixture
def start_fleet_worker(redis_url: str) -> StartWorker:
    """Start a real Celery worker thread on real Redis, serving the given MemoryWorker.

    Usage: ``with start_fleet_worker(factory, queues=[...], pool="threads"):``
    """
    from celery.contrib.testing.worker import start_worker

    @contextmanager
    def run(
        worker_factory: Callable[[], Any],
        queues: list[str] | None = None,
        pool: str = "threads",
        concurrency: int = 2,
        retrieval_factory: Callable[[], Any] | None = None,
        **memory_settings: Any,
    ) -> Iterator[Any]:
        workers = [worker_factory] + ([retrieval_factory] if retrieval_factory else [])
        app = create_worker_app(fleet_config(redis_url, **memory_settings), workers)
        with start_worker(
            app,
            pool=pool,
            concurrency=concurrency,
            perform_ping_check=False,
            queues=queues or list(NODE_QUEUES.values()),
            shutdown_timeout=30.0,
            loglevel="WARNING",
        ) as w:
            yield w
        app.close()

    return run


@pytest.fixture
def client(redis_url: str) -> Iterator[DittoClient]:
    """A fleet DittoClient: a sending-only app plus its Redis result listener."""
    c = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, result_backend=redis_url))
    yield c
    c.close()
