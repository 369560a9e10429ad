"""The conformance suite against the SQLite store (a fresh file per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "memory.sqlite")
    yield store
    store.close()
