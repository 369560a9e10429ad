"""The conformance suite's QUERY and cursor parts against a MySQL store declaring the
fields they use as ``queryFields`` (issue 28 item 3): conditions on declared fields test
their generated columns beside the exact expressions and give the same results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_worker.testing.conformance_query import *  # noqa: F403
from ditto_worker.testing.conformance_query import QUERY_FIELDS


@pytest.fixture
def conformance_store(mysql_url: str, mysql_database: str) -> Iterator[MysqlMemoryStore]:
    store = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, query_fields=QUERY_FIELDS
    )
    yield store
    store.close()
