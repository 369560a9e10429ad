"""The conformance suite's QUERY and cursor parts against a PostgreSQL store declaring
the fields they use as ``queryFields`` (issue 28 item 3): literal paths, odd names
included, and the index-shaped ranges give the same results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_worker.testing.conformance_query import *  # noqa: F403
from ditto_worker.testing.conformance_query import QUERY_FIELDS


@pytest.fixture
def conformance_store(postgres_url: str, pg_schema: str) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=2, query_fields=QUERY_FIELDS
    )
    yield store
    store.close()
