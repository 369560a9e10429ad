"""The conformance kit's CRUD, QUERY, cursor and scope tests against the DuckDB example
store (a fresh database file per test): a new SQL store is its dialect, its driver and
its native search on the SQL store kit (issue 34 item 4)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_example_duckdb import DuckdbMemoryStore
from ditto_worker.testing._conformance_crud import *  # noqa: F403
from ditto_worker.testing._conformance_cursors import *  # noqa: F403
from ditto_worker.testing._conformance_harness import (  # noqa: F401 (fixtures)
    conformance,
    conformance_capabilities,
    conformance_search,
)
from ditto_worker.testing._conformance_query import *  # noqa: F403
from ditto_worker.testing._conformance_scope import *  # noqa: F403


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[DuckdbMemoryStore]:
    store = DuckdbMemoryStore(tmp_path / "memory.duckdb")
    yield store
    store.close()
