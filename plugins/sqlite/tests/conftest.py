"""Fixtures: a SQLite store per test (own file under tmp_path), and ``store`` parametrized
over the in-memory reference store and SQLite so both are checked by the same tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.testing import InMemoryMemoryStore


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "memory.sqlite")
    yield store
    store.close()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    if request.param == "memory":
        yield InMemoryMemoryStore()
        return
    sqlite = SqliteMemoryStore(tmp_path / "memory.sqlite")
    yield sqlite
    sqlite.close()
