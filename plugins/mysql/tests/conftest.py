"""Fixtures: a real MySQL/MariaDB server (``DITTO_TEST_MYSQL_URL``, started by
``scripts/mysql.sh``) and a store in its own database per test, dropped in teardown.

Without a server the tests skip locally and fail when ``DITTO_REQUIRE_SERVICES=1`` or ``CI=true``
(STYLE.md), as the Redis and PostgreSQL tests do.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_plugin_mysql.db import parse_url
from ditto_worker.testing.services import missing_service

_missing = missing_service  # skip locally, fail with DITTO_REQUIRE_SERVICES=1 or CI=true


def admin(url: str) -> pymysql.connections.Connection:
    """An autocommit connection to the test server (no default database)."""
    address = parse_url(url)
    return pymysql.connect(
        host=address.host, port=address.port, user=address.user, password=address.password,
        charset="utf8mb4", autocommit=True, connect_timeout=3,
    )  # fmt: skip


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """The test server's URL (a user that may create databases)."""
    url = os.environ.get("DITTO_TEST_MYSQL_URL", "")
    if not url:
        _missing('no DITTO_TEST_MYSQL_URL (eval "$(bash scripts/mysql.sh start)")')
    try:
        admin(url).close()
    except pymysql.MySQLError:
        _missing("the MySQL server of DITTO_TEST_MYSQL_URL is not answering")
    return url


def drop_database(url: str, name: str) -> None:
    """Drop database ``name`` and everything in it."""
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


@pytest.fixture
def mysql_database(mysql_url: str) -> Iterator[str]:
    """A fresh database name (``t_<uuid>``), dropped after the test."""
    name = f"t_{uuid.uuid4().hex}"
    yield name
    drop_database(mysql_url, name)


@pytest.fixture
def mysql_store(mysql_url: str, mysql_database: str) -> Iterator[MysqlMemoryStore]:
    """A store on its own database (migrated on first use)."""
    store = MysqlMemoryStore(mysql_url, database=mysql_database, pool_max_size=2)
    yield store
    store.close()
