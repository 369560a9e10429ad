"""Index build, size on disk and peak memory for ``bench/store_scale.py`` (``--million``).

PostgreSQL with ``--index-after-load``: the plugin's HNSW index is dropped before the load
and built after it with the plugin's definition, in a session of its own with
``maintenance_work_mem`` set (pgvector advises building after a bulk load; an index
graph larger than ``maintenance_work_mem`` builds far slower), then ``ANALYZE``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any


def postgres_url() -> str:
    """``DITTO_WORKER_MEMORY_POSTGRES_URL`` or ``DITTO_TEST_POSTGRES_URL``."""
    url = os.environ.get("DITTO_WORKER_MEMORY_POSTGRES_URL") or os.environ.get(
        "DITTO_TEST_POSTGRES_URL"
    )
    if not url:
        raise SystemExit("postgres: set DITTO_WORKER_MEMORY_POSTGRES_URL (scripts/postgres.sh)")
    return url


HNSW = "memory_vectors_hnsw"
"""The PostgreSQL plugin's HNSW index (``ditto_plugin_postgres.vectors.claim_identity``)."""


def drop_hnsw(memory: Any, schema: str) -> None:
    """Have the PostgreSQL store create its schema and vectors table (one QUERY), then
    drop its HNSW index so that the load does not maintain it row by row."""
    import psycopg

    memory.query({"limit": 1})
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f'DROP INDEX IF EXISTS "{schema}".{HNSW}')


def has_hnsw(schema: str) -> bool:
    """Whether the schema has the plugin's HNSW index."""
    import psycopg

    with psycopg.connect(postgres_url()) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s", [schema, HNSW]
        ).fetchone()
    return found is not None


def build_hnsw(schema: str, maintenance_work_mem: str) -> dict[str, float]:
    """Build the HNSW index as the plugin defines it, in a session with
    ``maintenance_work_mem`` set; then ``ANALYZE`` the schema's tables. Returns the seconds
    of each and the building backend's peak RSS (MB; 0 when its /proc is not readable)."""
    import psycopg

    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: print(f"  server: {notice.message_primary}"))
        conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()
        print(f"  building HNSW (maintenance_work_mem {maintenance_work_mem})", flush=True)
        start = time.perf_counter()
        conn.execute(
            f'CREATE INDEX {HNSW} ON "{schema}".memory_vectors '
            "USING hnsw (embedding vector_cosine_ops)"
        )
        built = time.perf_counter() - start
        backend = _peak_rss_mb(int(pid[0]) if pid else 0)
        conn.execute(f'ANALYZE "{schema}".memories, "{schema}".memory_vectors')
        analyzed = time.perf_counter() - start - built
    print(f"  HNSW built in {built:.1f} s, ANALYZE {analyzed:.1f} s", flush=True)
    return {"index build s": built, "ANALYZE s": analyzed, "build backend RSS MB": backend}


def _peak_rss_mb(pid: int) -> float:
    """``VmHWM`` of a local process in MB (0 when unknown)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else 0.0


def size_on_disk(name: str, store: Any) -> int:
    """Bytes the store's data takes: the SQLite file with its -wal, -shm and any index file
    named after it; the PostgreSQL schema's relations (tables with their indexes and
    TOAST); 0 for another store."""
    if name == "sqlite":
        path = Path(store.path)  # the file, its -wal/-shm and any index beside it
        return sum(f.stat().st_size for f in path.parent.glob(path.name + "*") if f.is_file())
    if name != "postgres":
        return 0
    import psycopg

    with psycopg.connect(postgres_url()) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            [store.schema],
        ).fetchone()
    return int(row[0]) if row else 0
