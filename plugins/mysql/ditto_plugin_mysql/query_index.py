"""Indexed columns of the MySQL / MariaDB store's declared ``queryFields`` (issue 28).

MariaDB has no functional indexes (MySQL 8.0.13+ has them, MariaDB 10.11 does not), and
its optimizer does not match an expression to an index on a generated column, so each
declared field gets three ``VIRTUAL`` generated columns and one index, and the filter
compiler (:mod:`ditto_plugin_mysql.sql`) names the columns::

    qf_<field>_<digest>_r  TINYINT         type rank (sort_key's: 0 missing/null, 1 number,
                                           2 string, 3 object, 4 array, 5 boolean)
    qf_<field>_<digest>_d  DOUBLE          numbers and booleans as 0/1
    qf_<field>_<digest>_h  BINARY(32)      SHA-256 of a string's UTF-8 bytes
    INDEX qf_<field>_<digest>_i (scope, _r, _d, _h, seq)

The index serves equality (``_r = 2 AND _d IS NULL AND _h = …``, ``_r = 1 AND _d = … AND
_h IS NULL``: the rows come in ``seq`` order, so a page in creation order reads only its
rows) and number ranges; one index per field, as a table has at most 64 (at most
:data:`MAX_FIELDS` fields are declared); each condition keeps the exact test of an
undeclared field beside the indexed one, so results are the same (hashes and doubles
only find the candidates). String ranges and ``orderBy`` on a declared field are not
indexed (a string column in an index would need a length limit). A generated value must
never fail an INSERT (strict mode turns a conversion warning into an error): a number is
converted to ``DOUBLE`` only (every number the core admits has one: 64-bit integers and
floats; a text over 300 characters, never written by this store, would give ``NULL``),
never to ``DECIMAL`` (a float's range overflows it).

``<field>`` is the name with other characters than ASCII letters and digits as ``_``
(cut to 16), ``<digest>`` a SHA-256 prefix of the name. A field with a segment starting
with ``-`` is not indexed (MariaDB 10.11 cannot parse ``$."-x"``: it finds no such member
at all, declared or not). A store opening with declared
fields adds the missing columns and drops those of fields no longer declared, under a
named lock (``GET_LOCK``), in one ``ALTER TABLE`` (the indexes are built then: seconds per
100,000 records). The declared list is the whole declaration: an empty list drops every
column named with :data:`PREFIX`; a store opened without the setting leaves them alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Final

from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.sql import json_path
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import parse_field

__all__ = ["MAX_FIELDS", "PREFIX", "column_prefixes", "sync_columns"]

MAX_FIELDS: Final = 56
"""The most ``queryFields`` a MySQL store declares (a table has at most 64 indexes)."""

PREFIX: Final = "qf_"
"""The name prefix of every declared-field column and index (and of nothing else)."""
_NUMBERS: Final = "('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL')"
_LOCK_WAIT_S: Final = 600


def column_prefixes(fields: Sequence[str]) -> dict[str, str]:
    """``{field name: column prefix}`` (``qf_<field>_<digest>``) of the declared fields.

    Raises:
        ValueError: more than :data:`MAX_FIELDS` fields.
    """
    if len(fields) > MAX_FIELDS:
        raise ValueError(f"queryFields: at most {MAX_FIELDS} fields on MySQL")
    return {  # MariaDB 10.11 cannot parse a path member starting with "-": not indexed
        name: f"{PREFIX}{re.sub('[^A-Za-z0-9]', '_', name)[:16]}_"
        f"{hashlib.sha256(name.encode('utf-8')).hexdigest()[:12]}"
        for name in fields
        if not any(segment.startswith("-") for segment in parse_field(name).path)
    }


def _columns(prefix: str, path: str) -> list[str]:
    """The ``ADD COLUMN`` / ``ADD INDEX`` clauses of one field (``path``: a SQL literal)."""
    value = f"JSON_EXTRACT(metadata, {path})"
    kind, text = f"JSON_TYPE({value})", f"JSON_UNQUOTE({value})"
    rank = (
        f"CASE {kind} WHEN 'INTEGER' THEN 1 WHEN 'UNSIGNED INTEGER' THEN 1 WHEN 'DOUBLE' "
        "THEN 1 WHEN 'DECIMAL' THEN 1 WHEN 'STRING' THEN 2 WHEN 'OBJECT' THEN 3 WHEN "
        "'ARRAY' THEN 4 WHEN 'BOOLEAN' THEN 5 ELSE 0 END"
    )
    number = (
        f"CASE WHEN {kind} IN {_NUMBERS} AND CHAR_LENGTH({text}) <= 300 THEN "
        f"CAST({text} AS DOUBLE) WHEN {kind} = 'BOOLEAN' THEN ({text} = 'true') END"
    )
    digest = f"CASE WHEN {kind} = 'STRING' THEN UNHEX(SHA2(CAST({text} AS BINARY), 256)) END"
    return [
        f"ADD COLUMN {prefix}_r TINYINT AS ({rank}) VIRTUAL",
        f"ADD COLUMN {prefix}_d DOUBLE AS ({number}) VIRTUAL",
        f"ADD COLUMN {prefix}_h BINARY(32) AS ({digest}) VIRTUAL",
        f"ADD INDEX {prefix}_i (scope, {prefix}_r, {prefix}_d, {prefix}_h, seq)",
    ]


def _existing(conn: Conn, database: str) -> set[str]:
    """Column prefixes of the declared-field columns ``memories`` has."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'memories' AND column_name LIKE 'qf\\_%%'",
            [database],
        )
        return {str(row[0])[:-2] for row in cur.fetchall()}


def sync_columns(conn: Conn, database: str, fields: Sequence[str]) -> bool:
    """Add the columns and indexes of ``fields``, drop those of undeclared fields (module
    doc); True when something changed. An empty ``fields`` drops them all.

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when another process held the lock for
            ``_LOCK_WAIT_S`` seconds.
    """
    wanted: Mapping[str, str] = column_prefixes(fields)
    if _existing(conn, database) == set(wanted.values()):
        return False
    lock = f"ditto_qf_{database}"
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, %s)", [lock, _LOCK_WAIT_S])
        row = cur.fetchone()
        if row is None or row[0] != 1:
            raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "queryFields: lock not acquired")
        try:
            present = _existing(conn, database)
            clauses = [
                f"DROP COLUMN {p}_{c}" for p in sorted(present - set(wanted.values()))
                for c in "rdh"
            ]  # fmt: skip
            for name, prefix in wanted.items():
                if prefix not in present:
                    path = conn.escape(json_path(parse_field(name).path))
                    clauses += _columns(prefix, str(path))
            if clauses:
                cur.execute("ALTER TABLE memories " + ", ".join(clauses))
                cur.execute("ANALYZE TABLE memories")
                cur.fetchall()
        finally:
            cur.execute("SELECT RELEASE_LOCK(%s)", [lock])
    return True
