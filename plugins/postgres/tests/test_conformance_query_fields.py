"""The conformance suite's QUERY and cursor parts against a PostgreSQL store declaring
the fields they use as ``queryFields`` (issue 28 item 3): literal paths, odd names
included, and the index-shaped ranges give the same results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ditto_plugin_postgres import PostgresMemoryStore
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
def conformance_store(postgres_url: str, pg_schema: str) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=2, query_fields=QUERY_FIELDS
    )
    yield store
    store.close()
