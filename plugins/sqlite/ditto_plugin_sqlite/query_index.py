"""Indexes of the SQLite store's declared ``queryFields`` (issue 28), and their statistics.

Each declared field whose path is plain (no ``"``, ``\\`` or control characters; other
names keep working through ``json_each``, unindexed) gets two expression indexes on
``memories``, built from the same functions as the filter compiler's expressions
(:func:`ditto_plugin_sqlite.sql.field_expressions`), so SQLite matches them exactly:

* ``memories_qf_<field>_<digest>_f (namespace, json_extract(metadata, '$."f"'))``: equality and
  range conditions; ties come in ``seq`` order (the row id closes every index), so a
  filtered QUERY in the default order stops after its page;
* ``memories_qf_<field>_<digest>_s (namespace, <type rank>, <sort value>)``: ``orderBy`` on the
  field, either direction (SQLite sorts only the ties by ``seq``).

``<field>`` is the name with other characters than ASCII letters and digits as ``_``,
``<digest>`` a SHA-256 prefix of the index's statement, so an index whose expression
changes in a later version is a new index. Opening a store creates the indexes of newly
declared fields and drops those of fields no longer declared (idempotent; one write
transaction, only when something differs; several seconds at a million records). The
declared list is the whole declaration: an empty list drops every index named with
:data:`PREFIX`; only a store opened without the setting (``None``) leaves them alone.

Statistics: the planner must choose between indexes (``user`` held by 0.5 % of records
against ``kind`` held by 20 %), and SQLite only knows how selective an index is from
``ANALYZE``. With declared fields the store runs ``ANALYZE memories`` (with
``PRAGMA analysis_limit``, milliseconds) when it builds indexes and after a WRITE that
doubled the table since the last run, so the statistics stay within a factor of two of
the row count. A store without declared fields never runs ``ANALYZE``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.sql import Declared, field_expressions, indexable, sort_expressions
from ditto_worker.memory.filters import parse_field

__all__ = ["PREFIX", "QueryIndexes", "index_statements"]

PREFIX: Final = "memories_qf_"
"""The name prefix of every declared-field index (and of nothing else)."""
_ANALYSIS_LIMIT: Final = 2000
"""Rows ``ANALYZE`` samples per index (``PRAGMA analysis_limit``)."""
_MIN_GROWTH: Final = 1000
"""Records added before statistics are refreshed (besides the doubling)."""


def index_statements(fields: Sequence[str]) -> dict[str, str]:
    """``{index name: CREATE INDEX statement}`` for the indexable ``fields``."""
    statements: dict[str, str] = {}
    for name in fields:
        ref = parse_field(name)
        if not indexable(ref, frozenset({name})):
            continue
        type_text, value_text = field_expressions(ref.path, "metadata")
        rank, value = sort_expressions(type_text, value_text)
        for suffix, columns in (("f", value_text), ("s", f"{rank}, {value}")):
            body = f"ON memories (namespace, {columns})"
            digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]
            index = f"{PREFIX}{re.sub('[^A-Za-z0-9]', '_', name)[:32]}_{digest}_{suffix}"
            statements[index] = f"CREATE INDEX IF NOT EXISTS {index} {body}"
    return statements


class QueryIndexes:
    """The declared fields of one store object: which are indexed, and their upkeep.

    Args:
        fields: the ``queryFields`` setting (names as in filters); ``None``: not set,
            existing indexes are left alone.
    """

    def __init__(self, fields: Sequence[str] | None) -> None:
        self._managed = fields is not None
        self.fields = tuple(fields or ())
        self.declared: Declared = frozenset(
            name for name in self.fields if indexable(parse_field(name), frozenset({name}))
        )
        self._statements = index_statements(self.fields)
        self._analyzed = 0

    def existing(self, conn: Connection) -> set[str]:
        """Names of the declared-field indexes in the database."""
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memories'"
        )
        return {str(row[0]) for row in rows if str(row[0]).startswith(PREFIX)}

    def in_step(self, conn: Connection) -> bool:
        """True when nothing is to do at open: no declaration (existing indexes are left
        alone), or exactly the declared fields' indexes and, with some, statistics."""
        if not self._managed:
            return True
        if self.existing(conn) != set(self._statements):
            return False
        if not self.fields:
            return True
        self._analyzed = _analyzed_rows(conn)
        return self._analyzed > 0 or _empty(conn)

    def sync(self, conn: Connection) -> None:
        """Create missing indexes, drop those of undeclared fields, refresh statistics
        (in the caller's write transaction)."""
        if not self._managed:
            return
        present = self.existing(conn)
        for name in sorted(present - set(self._statements)):
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        for name, statement in self._statements.items():
            if name not in present:
                conn.execute(statement)
        if self.fields:
            self.analyze(conn)

    def analyze(self, conn: Connection) -> None:
        """``ANALYZE memories`` (sampled; in the caller's write transaction)."""
        conn.execute(f"PRAGMA analysis_limit = {_ANALYSIS_LIMIT}")
        conn.execute("ANALYZE memories")
        self._analyzed = _analyzed_rows(conn)

    def stale(self, last_seq: int) -> bool:
        """True when a WRITE reaching ``last_seq`` may have doubled the table since the
        statistics were taken (``seq`` never falls below the row count)."""
        return bool(self.fields) and last_seq >= 2 * self._analyzed + _MIN_GROWTH


def _analyzed_rows(conn: Connection) -> int:
    """The row count of ``memories`` in ``sqlite_stat1`` (0 when never analyzed)."""
    found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
    if conn.execute(found).fetchone() is None:
        return 0
    row = conn.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = 'memories' LIMIT 1").fetchone()
    return int(str(row[0]).split()[0]) if row is not None else 0


def _empty(conn: Connection) -> bool:
    return conn.execute("SELECT 1 FROM memories LIMIT 1").fetchone() is None
