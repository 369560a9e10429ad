"""The conformance suite's QUERY and cursor parts alone, for a store that runs them a
second time with the fields they filter and sort on declared as ``queryFields`` (issue 28
item 3): declared fields may change a store's plans (indexes, generated columns), never
its results.

Use it beside the whole suite, in a file of its own::

    # tests/test_conformance_query_fields.py
    import pytest
    from ditto_worker.testing.conformance_query import *  # noqa: F403

    @pytest.fixture
    def conformance_store(tmp_path):
        store = MyMemoryStore(tmp_path / "db", query_fields=QUERY_FIELDS)
        yield store
        store.close()
"""

from __future__ import annotations

from ditto_worker.testing.conformance import (
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

__all__ = [
    "QUERY_FIELDS",
    "conformance",
    "conformance_capabilities",
    "conformance_search",
    "test_cursor_is_bound_to_its_namespace",
    "test_cursor_is_bound_to_its_query",
    "test_cursors_cannot_be_forged_or_altered",
    "test_default_order_is_creation_order",
    "test_dot_paths_never_index_arrays",
    "test_filter_semantics",
    "test_odd_metadata_field_names",
    "test_page_size_and_last_page",
    "test_paging_across_inserts_and_deletes",
    "test_paging_matches_one_page",
    "test_typed_sort_order",
    "test_updated_sort_key_may_move",
]
