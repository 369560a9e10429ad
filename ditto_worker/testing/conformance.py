"""The conformance suite every MemoryStore plugin runs (pytest).

One behavioural suite, the same for every backend, so that the contract means the same on
each: typed filters (numbers numeric, strings as strings, missing fields, ``$in`` with mixed
types, nested paths), explicit failures for what a plugin does not support, keyset paging
across inserts and deletes, literal ``_ % - ' "`` and non-ASCII in keys, prefixes and
values, signed cursors that refuse any edit, forgery or other namespace, timestamps with
offsets compared as instants, records carrying ``createdAt``/``updatedAt`` set by the
store (MEM-DATA-5), lone surrogates and undeclared SEARCH options refused before
the store, a 10,000-record WRITE, deleting more than 1,000 matches, any JSON content
(string, number, object, list, ``null``), keyword search over English, Chinese,
Thai/Lao/Khmer/Myanmar, words with combining marks, NFKC/case-folded text, JSON field
names and keys, with the most selective query terms and per-scope statistics, tenant
scope on all six operations with colliding-looking scope values, and a user's ``memory``
and ``task:<taskId>`` spaces kept apart on all six; operation ids applied once
(MEM-RUN-7) and conditional updates that lose nothing under a race (MEM-UPDATE-5). Plugin-side rules
covered: MEM-GET-2/3/5, MEM-QUERY-2/3/4/5, MEM-WRITE-2/3, MEM-UPDATE-1/2/4, MEM-DELETE-2/3,
MEM-SEARCH-2/3 (and MEM-PY-5/6/11/12, MEM-RUN-2).

Use it from a plugin's own repository (``pip install ditto-worker[dev]`` for pytest)::

    # tests/test_conformance.py
    import pytest
    from ditto_worker.testing.conformance import *  # noqa: F403

    @pytest.fixture
    def conformance_store(tmp_path):
        store = MyMemoryStore(tmp_path / "db")  # a fresh, empty store per test
        yield store
        store.close()

    # Optional: a separate MemorySearchProvider tested with the store (default: the
    # store's native ``search``). Define it here, after the import, to override:
    # @pytest.fixture
    # def conformance_search(conformance_store):
    #     return MySearchProvider(conformance_store)

The store declares what it supports as a class attribute
``capabilities: ClassVar[StoreCapabilities]`` (:mod:`ditto_worker.memory.capabilities`: filter
operators and fields, orderBy fields, search strategies and which one is keyword search,
key-conflict policy, batch atomicity, max batch size, cancellation, tenant scope). The suite
tests what is declared and checks that what is not declared fails explicitly
(``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``, ``UNSUPPORTED_STRATEGY``,
``SEARCH_UNAVAILABLE``); tests of undeclared features are skipped.

Calls go through :func:`ditto_worker.create_memory`, so plugin outputs are also checked
by the core (``INVALID_BACKEND_OUTPUT`` fails a test). 61 tests; the two volume
tests write 10,000 and 2,800 records. Add ``pytest.register_assert_rewrite(
"ditto_worker.testing")`` in a ``conftest.py`` for detailed assertion messages (done
automatically when ``ditto_worker.testing`` is imported under pytest).
"""

from __future__ import annotations

from ditto_worker.testing._conformance_crud import (
    test_batch_limit_is_explicit,
    test_cancelled_call_commits_nothing,
    test_capabilities_are_declared,
    test_content_kinds_round_trip,
    test_delete_reports_only_deleted_and_frees_keys,
    test_get_union_each_once,
    test_key_conflict_policy,
    test_odd_characters_in_keys_and_values,
    test_update_missing_id_is_not_found,
    test_update_presence_semantics,
)
from ditto_worker.testing._conformance_cursors import (
    test_cursor_is_bound_to_its_namespace,
    test_cursors_cannot_be_forged_or_altered,
)
from ditto_worker.testing._conformance_harness import (
    Harness,
    conformance,
    conformance_capabilities,
    conformance_search,
)
from ditto_worker.testing._conformance_inputs import (
    test_lone_surrogates_never_reach_the_store,
    test_not_a_timestamp_is_invalid_input,
    test_the_seed_vector_options_metric_cosine,
    test_timestamps_compare_as_instants,
    test_undeclared_search_options_are_refused,
)
from ditto_worker.testing._conformance_operations import (
    test_conditional_update_applies_only_when_metadata_holds,
    test_conditional_updates_racing_lose_nothing,
    test_failed_mutation_keeps_no_operation,
    test_operation_id_applies_update_and_delete_once,
    test_operation_id_applies_write_once,
    test_operation_id_with_another_input_is_conflict,
    test_undeclared_features_are_unsupported,
)
from ditto_worker.testing._conformance_query import (
    QUERY_FIELDS,
    test_cursor_is_bound_to_its_query,
    test_default_order_is_creation_order,
    test_dot_paths_never_index_arrays,
    test_filter_semantics,
    test_odd_metadata_field_names,
    test_page_size_and_last_page,
    test_paging_across_inserts_and_deletes,
    test_paging_matches_one_page,
    test_typed_sort_order,
    test_undeclared_filters_fail,
    test_undeclared_order_by_fails,
    test_updated_sort_key_may_move,
)
from ditto_worker.testing._conformance_retention import (
    test_execution_replay_applies_nothing,
    test_operation_replay_after_the_window_is_expired,
    test_operation_replay_inside_the_window_applies_nothing,
    test_prune_forgets_only_old_operations,
)
from ditto_worker.testing._conformance_scale import (
    test_delete_more_than_a_thousand_matches,
    test_ten_thousand_record_write,
)
from ditto_worker.testing._conformance_scope import (
    test_filter_cannot_widen_scope,
    test_odd_scope_values_never_collide,
    test_scope_confines_all_six_operations,
    test_search_in_a_task_space_is_refused_before_the_store,
    test_spaces_confine_all_six_operations,
    test_undeclared_scope_is_refused,
)
from ditto_worker.testing._conformance_search import (
    test_exhaustive_search_returns_min_of_limit_and_matches,
    test_keyword_chinese_without_spaces,
    test_keyword_combining_marks_stay_in_words,
    test_keyword_english,
    test_keyword_filter_applies_before_limit,
    test_keyword_follows_updates_and_deletes,
    test_keyword_json_field_names_and_keys,
    test_keyword_keeps_the_most_selective_terms,
    test_keyword_one_match_score_is_readable,
    test_keyword_query_is_never_syntax,
    test_keyword_scores_use_only_the_scope_own_records,
    test_keyword_scripts_without_spaces,
    test_keyword_unicode_normalisation,
    test_search_results_carry_full_records,
    test_search_strategies_are_explicit,
)
from ditto_worker.testing._conformance_timestamps import (
    test_records_carry_store_timestamps,
    test_timestamps_are_never_input,
)

__all__ = [
    "QUERY_FIELDS",
    "Harness",
    "conformance",
    "conformance_capabilities",
    "conformance_search",
    "test_batch_limit_is_explicit",
    "test_cancelled_call_commits_nothing",
    "test_capabilities_are_declared",
    "test_conditional_update_applies_only_when_metadata_holds",
    "test_conditional_updates_racing_lose_nothing",
    "test_execution_replay_applies_nothing",
    "test_content_kinds_round_trip",
    "test_cursor_is_bound_to_its_namespace",
    "test_cursor_is_bound_to_its_query",
    "test_cursors_cannot_be_forged_or_altered",
    "test_default_order_is_creation_order",
    "test_dot_paths_never_index_arrays",
    "test_delete_more_than_a_thousand_matches",
    "test_delete_reports_only_deleted_and_frees_keys",
    "test_exhaustive_search_returns_min_of_limit_and_matches",
    "test_failed_mutation_keeps_no_operation",
    "test_filter_cannot_widen_scope",
    "test_filter_semantics",
    "test_get_union_each_once",
    "test_key_conflict_policy",
    "test_keyword_chinese_without_spaces",
    "test_keyword_combining_marks_stay_in_words",
    "test_keyword_english",
    "test_keyword_filter_applies_before_limit",
    "test_keyword_follows_updates_and_deletes",
    "test_keyword_json_field_names_and_keys",
    "test_keyword_keeps_the_most_selective_terms",
    "test_keyword_one_match_score_is_readable",
    "test_keyword_query_is_never_syntax",
    "test_keyword_scores_use_only_the_scope_own_records",
    "test_keyword_scripts_without_spaces",
    "test_keyword_unicode_normalisation",
    "test_lone_surrogates_never_reach_the_store",
    "test_not_a_timestamp_is_invalid_input",
    "test_odd_characters_in_keys_and_values",
    "test_odd_metadata_field_names",
    "test_odd_scope_values_never_collide",
    "test_operation_id_applies_update_and_delete_once",
    "test_operation_id_applies_write_once",
    "test_operation_id_with_another_input_is_conflict",
    "test_operation_replay_after_the_window_is_expired",
    "test_operation_replay_inside_the_window_applies_nothing",
    "test_page_size_and_last_page",
    "test_records_carry_store_timestamps",
    "test_paging_across_inserts_and_deletes",
    "test_paging_matches_one_page",
    "test_prune_forgets_only_old_operations",
    "test_scope_confines_all_six_operations",
    "test_search_in_a_task_space_is_refused_before_the_store",
    "test_search_results_carry_full_records",
    "test_search_strategies_are_explicit",
    "test_spaces_confine_all_six_operations",
    "test_ten_thousand_record_write",
    "test_the_seed_vector_options_metric_cosine",
    "test_timestamps_are_never_input",
    "test_timestamps_compare_as_instants",
    "test_typed_sort_order",
    "test_undeclared_features_are_unsupported",
    "test_undeclared_filters_fail",
    "test_undeclared_order_by_fails",
    "test_undeclared_scope_is_refused",
    "test_undeclared_search_options_are_refused",
    "test_update_missing_id_is_not_found",
    "test_update_presence_semantics",
    "test_updated_sort_key_may_move",
]
