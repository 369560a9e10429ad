"""An example SQL store on DuckDB, built on the SQL store kit (docs/writing-a-sql-store.md).

Kept in the repository as a worked example of :mod:`ditto_worker.sqlkit` and tested with
the conformance kit's CRUD, QUERY, cursor and scope tests
(``examples/duckdb_store/tests``); not part of the ``ditto-worker`` package.
"""

from __future__ import annotations

from ditto_example_duckdb.store import DuckdbMemoryStore

__all__ = ["DuckdbMemoryStore"]
