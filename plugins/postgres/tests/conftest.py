"""Fixtures: a real PostgreSQL server (``DITTO_TEST_POSTGRES_URL``, started by
``scripts/postgres.sh``) and a store in its own schema per test, dropped in teardown.

Without a server the tests skip locally and fail when ``DITTO_REQUIRE_SERVICES=1`` or ``CI=true``
(STYLE.md), as the Redis tests do.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_worker.testing.services import missing_service

_missing = missing_service  # skip locally, fail with DITTO_REQUIRE_SERVICES=1 or CI=true


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test server's URL (a database the tests may create schemas in)."""
    url = os.environ.get("DITTO_TEST_POSTGRES_URL", "")
    if not url:
        _missing('no DITTO_TEST_POSTGRES_URL (eval "$(bash scripts/postgres.sh start)")')
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error:
        _missing("the PostgreSQL server of DITTO_TEST_POSTGRES_URL is not answering")
    return url


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema name (``t_<uuid>``), dropped after the test."""
    name = f"t_{uuid.uuid4().hex}"
    yield name
    drop_schema(postgres_url, name)


@pytest.fixture
def pg_store(postgres_url: str, pg_schema: str) -> Iterator[PostgresMemoryStore]:
    """A store on its own schema (migrated on first use)."""
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2)
    yield store
    store.close()
