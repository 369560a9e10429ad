"""The conformance suite's QUERY and cursor parts against a MySQL store declaring the
fields they use as ``queryFields`` (issue 28 item 3): conditions on declared fields test
their generated columns beside the exact expressions and give the same results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ditto_plugin_mysql import MysqlMemoryStore
from ditto_worker.testing.conformance import (  # noqa: F401
    QUERY_FIELDS,
    conformance,
    conformance_capabilities,
    conformance_search,
    test_cursor_is_bound_to_its_namespace,
    test_cursor_is_bound_to_its_query,
    test_default_order_is_creation_order,
    test_dot_paths_never_index_arrays,
    test_filter_semantics,
    test_odd_metadata_field_names,
    test_paging_across_inserts_and_deletes,
    test_paging_matches_one_page,
    test_typed_sort_order,
    test_updated_sort_key_may_move,
)


@pytest.fixture
def conformance_store(mysql_url: str, mysql_database: str) -> Iterator[MysqlMemoryStore]:
    store = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, query_fields=QUERY_FIELDS
    )
    yield store
    store.close()
