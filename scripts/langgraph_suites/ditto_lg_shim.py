"""pytest plugin (``-p ditto_lg_shim``) for LangGraph's own store tests: it rebinds
``InMemoryStore``, ``SqliteStore`` and ``AsyncSqliteStore`` (and their
``from_conn_string(...)`` / ``setup()``) to ditto-worker's ``DittoStore`` before the test
modules import them, and writes per test how many times one of ours was built.

Environment: ``DITTO_LG_STORE`` (``sqlite`` default, ``postgres``: needs
``DITTO_TEST_POSTGRES_URL``; ``fleet``: a fleet client on the broker ``DITTO_LG_BROKER``,
whose MEMORY worker the caller runs: no embedding function reaches it, so only files
without ``index=`` fit, e.g. ``tests/test_ttl.py``), ``DITTO_LG_REPORT`` (a JSON-lines
file: one line per test, ``{"nodeid", "outcome", "built"}``). Run by
scripts/langgraph_suites/run.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from ditto_worker import create_ditto, create_memory_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.integrations.langgraph import AsyncDittoStore, DittoStore, embedding_provider

_BUILT: dict[str, int] = {"count": 0}
_STORES: list[Any] = []
_SCHEMAS: dict[str, str] = {}
_RUNTIMES: list[Any] = []
_TMP = tempfile.mkdtemp(prefix="ditto-lg-")


def _backend(index: Any) -> Any:
    """A store for ``index``'s embedding (on PostgreSQL: a schema per kind of embedding)."""
    embedder = None if not index else embedding_provider(index)
    kind = os.environ.get("DITTO_LG_STORE", "sqlite")
    if kind == "postgres":
        from ditto_plugin_postgres import PostgresMemoryStore

        name = "plain" if embedder is None else f"e{embedder.identity.dims}"
        name += "_" + type(index.get("embed")).__name__.lower() if index else ""
        schema = _SCHEMAS.setdefault(name, f"lg_{uuid.uuid4().hex[:8]}_{name}"[:60])
        # a store per build: this test's embedding function (the suites' fake embeddings
        # project characters in the order one instance first sees them), a shared schema
        url = os.environ["DITTO_TEST_POSTGRES_URL"]
        store = PostgresMemoryStore(url, schema=schema, embedder=embedder)
        _STORES.append(store)
        return store
    from ditto_plugin_sqlite import SqliteMemoryStore

    return SqliteMemoryStore(os.path.join(_TMP, f"{uuid.uuid4().hex}.db"), embedder=embedder)


def _build(cls: type[DittoStore], index: Any = None, ttl: Any = None) -> Any:
    """A fresh, empty store of class ``cls``: a new tenant (and, on SQLite, a new file)."""
    _BUILT["count"] += 1
    if os.environ.get("DITTO_LG_STORE") == "fleet":  # the MEMORY worker is the fleet's
        runtime = create_ditto(config=_config())
    else:
        runtime = create_ditto([create_memory_worker(_backend(index))], _config())
    _RUNTIMES.append(runtime)
    store = object.__new__(cls)
    scope = {"tenant": f"lg-{uuid.uuid4().hex[:12]}", "user": "suite"}
    DittoStore.__init__(store, runtime, scope=scope, index=index, ttl=ttl)
    return store


def _config() -> Any:
    if os.environ.get("DITTO_LG_STORE") == "fleet":
        return load_runtime_config(None, env={"DITTO_BROKER_URL": os.environ["DITTO_LG_BROKER"]})
    return load_runtime_config(None, env={})


def _warm(store: DittoStore) -> None:
    DittoStore.list_namespaces(store, limit=1)


class ShimStore(DittoStore):
    """Stands in for InMemoryStore / SqliteStore: same constructor and factory shapes."""

    def __new__(cls, *args: Any, index: Any = None, ttl: Any = None, **kwargs: Any) -> Any:
        return _build(cls, index, ttl)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Built by ``__new__``."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, *, index: Any = None, ttl: Any = None,
                         **kwargs: Any) -> Iterator[DittoStore]:  # fmt: skip
        yield _build(cls, index, ttl)

    def setup(self) -> None:
        """Where LangGraph's store migrates, ours opens: our stores migrate themselves on
        first use, so one read here (the suites' TTLs are 1 s: their first put must not
        be the slow first call)."""
        _warm(self)


class AsyncShimStore(AsyncDittoStore):
    """Stands in for AsyncSqliteStore."""

    def __new__(cls, *args: Any, index: Any = None, ttl: Any = None, **kwargs: Any) -> Any:
        return _build(cls, index, ttl)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Built by ``__new__``."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string: str, *, index: Any = None, ttl: Any = None,
                               **kwargs: Any) -> AsyncIterator[DittoStore]:  # fmt: skip
        yield _build(cls, index, ttl)

    async def setup(self) -> None:
        """As :meth:`ShimStore.setup`."""
        await asyncio.to_thread(_warm, self)


def _rebind() -> None:
    import langgraph.store.memory as memory

    memory.InMemoryStore = ShimStore  # type: ignore[misc,assignment]
    with contextlib.suppress(ImportError):
        import langgraph.store.sqlite as sqlite
        import langgraph.store.sqlite.aio as aio
        import langgraph.store.sqlite.base as base

        for module in (sqlite, base):
            module.SqliteStore = ShimStore  # type: ignore[attr-defined]
        for module in (sqlite, aio):
            module.AsyncSqliteStore = AsyncShimStore  # type: ignore[attr-defined]


_rebind()


_OUTCOMES: dict[str, str] = {}
"""Per phase (setup, call, teardown), the last outcome logged for the running test."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    _BUILT["count"] = 0
    _OUTCOMES.clear()
    yield
    report = os.environ.get("DITTO_LG_REPORT")
    if report:
        outcomes = set(_OUTCOMES.values())
        outcome = "passed"
        if "failed" in outcomes:
            outcome = "failed"
        elif "skipped" in outcomes and _OUTCOMES.get("call") != "passed":
            outcome = "skipped"
        with open(report, "a", encoding="utf-8") as out:
            line = {"nodeid": item.nodeid, "outcome": outcome, "built": _BUILT["count"]}
            out.write(json.dumps(line) + "\n")
    while _RUNTIMES:
        with contextlib.suppress(Exception):
            _RUNTIMES.pop().close()
    while _STORES:
        with contextlib.suppress(Exception):
            _STORES.pop().close()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """The last report of each phase wins: a test the suite marks ``flaky`` (pytest-retry,
    the suites' own test dependency) is logged as retried, then with its final outcome."""
    _OUTCOMES[report.when] = report.outcome
