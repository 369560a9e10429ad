"""Fixtures: a SQLite store per test (its own file under tmp_path). The behaviour shared
with every store is checked by the conformance suite (``test_conformance.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "memory.sqlite")
    yield store
    store.close()
