"""The conformance suite's QUERY and cursor parts against an SQLite store that declares
the fields they use as ``queryFields`` (issue 28 item 3): declared fields compile to the
expressions of their indexes (path literals, odd names included) and give the same
results as undeclared ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.testing.conformance_query import *  # noqa: F403
from ditto_worker.testing.conformance_query import QUERY_FIELDS


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "memory.sqlite", query_fields=QUERY_FIELDS)
    assert store._query.declared  # the compiled expressions are the indexed ones
    yield store
    store.close()
