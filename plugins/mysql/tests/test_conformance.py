"""The conformance suite against the MySQL store (a fresh database per test; tested on
MariaDB 10.11)."""

from __future__ import annotations

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(mysql_store: MysqlMemoryStore) -> MysqlMemoryStore:
    return mysql_store
