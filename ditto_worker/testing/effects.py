"""Count a store's committed effects with database triggers (crash tests and benches).

Exactly-once cannot be judged from the replies alone: a redelivered call that applied
its batch a second time would reply the same. These triggers record every INSERT and
UPDATE of a row of ``memories`` in an ``effects(op, id)`` table of the same database,
inside the writing transaction, so a rolled-back attempt leaves nothing and a doubled
one leaves two rows. :func:`tally` turns the rows into ``Counter[(op, id)]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["count_postgres_effects", "count_sqlite_effects", "effects_sql", "tally"]


def count_sqlite_effects(conn: Any) -> None:
    """Create ``effects`` and its triggers in an SQLite database already holding the
    store's schema (``conn``: a DB-API connection opened with
    ``ditto_plugin_sqlite.driver.connect``, the process's one SQLite library: a connection
    of another copy of SQLite on the store's file would drop the store's POSIX locks)."""
    conn.executescript(
        "CREATE TABLE effects (op TEXT NOT NULL, id TEXT NOT NULL);"
        "CREATE TRIGGER effects_insert AFTER INSERT ON memories BEGIN "
        "INSERT INTO effects VALUES ('INSERT', NEW.id); END;"
        "CREATE TRIGGER effects_update AFTER UPDATE ON memories BEGIN "
        "INSERT INTO effects VALUES ('UPDATE', NEW.id); END;"
    )


def count_postgres_effects(conn: Any, schema: str) -> None:
    """The same in a migrated PostgreSQL ``schema`` (``conn``: an autocommit psycopg
    connection)."""
    s = f'"{schema}"'
    conn.execute(f"CREATE TABLE {s}.effects (op text NOT NULL, id text NOT NULL)")
    conn.execute(
        f"CREATE FUNCTION {s}.count_effect() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN INSERT INTO {s}.effects VALUES (TG_OP, NEW.id); RETURN NULL; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER count_effect AFTER INSERT OR UPDATE ON {s}.memories "
        f"FOR EACH ROW EXECUTE FUNCTION {s}.count_effect()"
    )


def effects_sql(schema: str | None = None) -> str:
    """The query of the recorded rows (``schema``: PostgreSQL's, ``None`` for SQLite)."""
    return "SELECT op, id FROM " + ("effects" if schema is None else f'"{schema}".effects')


def tally(rows: Iterable[tuple[Any, Any]]) -> Counter[tuple[str, str]]:
    """``Counter[(op, id)]`` of the rows of :func:`effects_sql`."""
    return Counter((str(op), str(i)) for op, i in rows)
