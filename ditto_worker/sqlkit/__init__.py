"""The SQL store kit: what the SQLite, PostgreSQL and MySQL stores share, in one core.

Like SQLAlchemy's dialects, a SQL store plugin keeps only its dialect, its driver and
connection handling, and its native search; the kit holds the rest:

* :mod:`.compiler`: the filter compiler (:func:`compile_filter` over a
  :class:`FilterDialect` that writes the leaves: placeholders, JSON paths, casts,
  collation), :func:`order_clause` and :func:`keyset_condition` (keyset paging).
* :mod:`.ledger`: the operation and execution ledgers (:func:`claim_call`,
  :func:`record_call` over a :class:`LedgerDialect`, or a call's :func:`mutation`):
  exactly-once mutations.
* :mod:`.paging`: one QUERY page (:func:`page_request`, :func:`page_query`,
  :func:`page_output`): parse, select after the cursor, cut, sign the next cursor.

* :mod:`.settings`: :func:`sql_capabilities`, and ``create_store``'s shared settings
  (:data:`SERVER_DEFAULTS`, :func:`server_values`, :func:`common_arguments`,
  :func:`search_settings`).

It sits in the SDK's plugin-author layer beside the conformance kit
(:mod:`ditto_worker.testing`): plugins import it, it imports nothing above
:mod:`ditto_worker.memory`.
"""

from __future__ import annotations

from ditto_worker.sqlkit.compiler import (
    FilterDialect,
    Sql,
    compile_filter,
    join,
    keyset_condition,
    negate,
    order_clause,
    uses_declared,
)
from ditto_worker.sqlkit.ledger import (
    DEFAULT_RETENTION_S,
    LedgerDialect,
    LedgerRow,
    Mutation,
    claim_call,
    claim_execution,
    claim_operation,
    mutation,
    prune_ledgers,
    record_call,
)
from ditto_worker.sqlkit.paging import (
    DEFAULT_QUERY_LIMIT,
    PageRequest,
    page_output,
    page_query,
    page_request,
)
from ditto_worker.sqlkit.settings import (
    SERVER_DEFAULTS,
    common_arguments,
    search_settings,
    server_values,
    sql_capabilities,
)

__all__ = [
    "DEFAULT_QUERY_LIMIT",
    "DEFAULT_RETENTION_S",
    "FilterDialect",
    "LedgerDialect",
    "LedgerRow",
    "Mutation",
    "PageRequest",
    "SERVER_DEFAULTS",
    "Sql",
    "claim_call",
    "claim_execution",
    "claim_operation",
    "common_arguments",
    "compile_filter",
    "join",
    "keyset_condition",
    "mutation",
    "negate",
    "order_clause",
    "page_output",
    "page_query",
    "page_request",
    "prune_ledgers",
    "record_call",
    "search_settings",
    "server_values",
    "sql_capabilities",
    "uses_declared",
]
