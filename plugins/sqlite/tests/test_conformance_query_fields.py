"""The conformance suite's QUERY and cursor parts against an SQLite store that declares
the fields they use as ``queryFields`` (issue 28 item 3): declared fields compile to the
expressions of their indexes (path literals, odd names included) and give the same
results as undeclared ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.testing.conformance import (  # noqa: F401
    QUERY_FIELDS,
    conformance,
    conformance_capabilities,
    conformance_search,
    test_cursor_is_bound_to_its_namespace,
    test_cursor_is_bound_to_its_query,
    test_cursors_cannot_be_forged_or_altered,
    test_default_order_is_creation_order,
    test_dot_paths_never_index_arrays,
    test_filter_semantics,
    test_odd_metadata_field_names,
    test_page_size_and_last_page,
    test_paging_across_inserts_and_deletes,
    test_paging_matches_one_page,
    test_typed_sort_order,
    test_updated_sort_key_may_move,
)


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "memory.sqlite", query_fields=QUERY_FIELDS)
    assert store._query.declared  # the compiled expressions are the indexed ones
    yield store
    store.close()
