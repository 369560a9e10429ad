"""The conformance suite against the PostgreSQL store (a fresh schema per test)."""

from __future__ import annotations

import pytest

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(pg_store: PostgresMemoryStore) -> PostgresMemoryStore:
    return pg_store
